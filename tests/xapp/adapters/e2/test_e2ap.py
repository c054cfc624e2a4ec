"""The E2AP envelope: the simulator's golden bytes, the RIC Indication round trip, refusals."""

from __future__ import annotations

import dataclasses

import pytest

from tests.xapp.adapters.e2.vectors import golden
from xapp.adapters.e2 import e2ap
from xapp.adapters.e2.records import E2DecodeError, RicIndication, RicRequestId

# --- golden vectors (O-RAN SC E2 simulator, E2AP v3.01 / E2SM-KPM v3.00) --------------------


def test_golden_indication_envelope() -> None:
    ind = e2ap.decode_ric_indication(golden("ind0.bin"))
    # The shared README's table says requestor 1; the bytes say 123.  The RICrequestID IE
    # (id 29, bytes 0x0e..0x14 of ind0.bin) is "00 1d | 00 | 05 | 00 00 7b 00 07": after the
    # extension bit and alignment, ricRequestorID INTEGER (0..65535) is the two octets 0x007b =
    # 123 and ricInstanceID 0x0007 = 7.  The "1" is what ricxappframe's e2ap reports for any
    # requestor (issue 13 notes that bug); the subscription response carries 123 too.
    assert ind.request == RicRequestId(requestor=123, instance=7)
    assert ind.ran_function_id == 2
    assert ind.action_id == 1
    assert ind.sequence_number == 1
    assert ind.indication_type == "report"
    assert ind.header == bytes.fromhex(
        "0e3230323030363133000007" "4f52414e53696d" "80" "0973696d756c61746f72" "0e4f52414e2d5343")
    assert len(ind.message) == 27


def test_golden_subscription_response() -> None:
    request, ran_function = e2ap.decode_subscription_response(golden("subresp.bin"))
    assert request == RicRequestId(requestor=123, instance=7)
    assert ran_function == 147  # sic: the simulator answers 147 for RAN function 2


def test_golden_e2_setup_request() -> None:
    node, functions = e2ap.decode_e2_setup_request(golden("e2setup_req.bin"))
    # GlobalE2node-ID gNB: PLMN b"747" (ASCII, as the simulator sends it), gNB id of 29 bits.
    assert node == "373437-16b8cef1"
    assert len(functions) == 1
    fn = functions[0]
    assert fn.ran_function_id == 2
    assert fn.oid == "OID123"
    assert fn.revision == 2
    assert fn.short_name == "ORAN-E2SM-KPM"
    assert fn.kpm_version == 3  # private OID: styles 4/5 with message format 3 mean v3
    assert fn.event_trigger_styles == (1,)
    assert fn.report_styles == {
        1: ("E2 Node Measurement", 1, 1, 1),
        2: ("E2 Node Measurement for a single UE", 2, 1, 1),
        3: ("Condition-based, UE-level E2 Node Measurement", 3, 1, 2),
        4: ("Common Condition-based, UE-level Measurement", 4, 1, 3),
        5: ("E2 Node Measurement for multiple UEs", 5, 1, 3),
    }
    offered = ("DRB.RlcSduTransmittedVolumeDL", "DRB.RlcSduTransmittedVolumeUL",
               "DRB.PerDataVolumeDLDist.Bin", "DRB.PerDataVolumeULDist.Bin",
               "DRB.RlcPacketDropRateDLDist", "DRB.PacketLossRateULDist",
               "L1M.DL-SS-RSRP.SSB", "L1M.DL-SS-SINR.SSB", "L1M.UL-SRS-RSRP")
    assert fn.measurements == {style: offered for style in range(1, 6)}
    assert fn.measurement_ids == {i + 1: name for i, name in enumerate(offered)}


# --- encoder ---------------------------------------------------------------------------------


def test_ric_indication_round_trip() -> None:
    ind = RicIndication(RicRequestId(65535, 0), 4095, 255, 65535, "insert", b"\x01", b"\x02\x03")
    assert e2ap.decode_ric_indication(e2ap.encode_ric_indication(ind)) == ind
    no_sn = dataclasses.replace(ind, sequence_number=None, indication_type="report")
    assert e2ap.decode_ric_indication(e2ap.encode_ric_indication(no_sn)) == no_sn


# --- refusals ------------------------------------------------------------------------------


def test_wrong_e2ap_messages_refused() -> None:
    with pytest.raises(E2DecodeError, match="successfulOutcome, expected a initiatingMessage"):
        e2ap.decode_ric_indication(golden("subresp.bin"))
    with pytest.raises(E2DecodeError, match="expected a successfulOutcome"):
        e2ap.decode_subscription_response(golden("ind0.bin"))
    with pytest.raises(E2DecodeError, match="procedure code 5, expected 1"):
        e2ap.decode_e2_setup_request(golden("ind0.bin"))
