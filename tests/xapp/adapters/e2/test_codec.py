"""E2AP / E2SM-KPM codec: the simulator's golden bytes, encoder round trips, refusals."""

from __future__ import annotations

import dataclasses
from typing import Any

import asn1tools
import pytest

from tests.support.paths import SHARED
from xapp.adapters.e2 import codec
from xapp.adapters.e2.asn1 import build
from xapp.adapters.e2.records import (
    E2DecodeError,
    KpmReport,
    RicIndication,
    RicRequestId,
    UeId,
)

GOLDEN = SHARED / "data" / "e2sim-kpm"


def golden(name: str) -> bytes:
    path = GOLDEN / name
    if not path.exists():
        pytest.skip(f"golden vectors not present at {GOLDEN}")
    return path.read_bytes()


# --- golden vectors (O-RAN SC E2 simulator, E2AP v3.01 / E2SM-KPM v3.00) --------------------


def test_golden_indication_envelope() -> None:
    ind = codec.decode_ric_indication(golden("ind0.bin"))
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


def test_golden_indication_header_and_message_format1() -> None:
    ind = codec.decode_ric_indication(golden("ind0.bin"))
    kpm = codec.decode_kpm_indication(ind.header, ind.message, 3)
    assert kpm.kpm_version == 3
    assert kpm.format == 1
    assert kpm.sender_name == "ORANSim"
    # colletStartTime is the ASCII "20200613", not an NTP time after 1970: no start time.
    assert kpm.collect_start_ms is None
    assert kpm.granularity_ms == 1
    # One record, measID 1 (label PLMN "747", slice SST "1" SD "100"), integer 1, the
    # incompleteFlag set: the simulator numbers its measurements and sends synthetic values.
    assert kpm.reports == (KpmReport({"id:1": 1.0}),)
    named = codec.decode_kpm_indication(ind.header, ind.message, 3,
                                        measurement_ids={1: "DRB.RlcSduTransmittedVolumeDL"})
    assert named.reports[0].values == {"DRB.RlcSduTransmittedVolumeDL": 1.0}


def test_golden_header_sender_type_is_extended_aper() -> None:
    """senderType "simulator" is 9 characters against SIZE(0..8, ...): the extension bit is set
    (0x80) and the length follows unconstrained; pycrate decodes it, asn1tools does not."""
    ind = codec.decode_ric_indication(golden("ind0.bin"))
    # 0x0e, colletStartTime (8), senderName: length 00 00 07 + "ORANSim", then senderType.
    assert ind.header[19] == 0x80 and ind.header[20] == 9
    assert ind.header[21:30] == b"simulator"
    spec = asn1tools.compile_files([str(build.HERE / "e2sm-kpm-v3.asn")], "per")
    with pytest.raises(Exception):  # noqa: B017 - asn1tools' own error types vary by version
        spec.decode("E2SM-KPM-IndicationHeader", ind.header)


def test_golden_subscription_response() -> None:
    request, ran_function = codec.decode_subscription_response(golden("subresp.bin"))
    assert request == RicRequestId(requestor=123, instance=7)
    assert ran_function == 147  # sic: the simulator answers 147 for RAN function 2


def test_golden_e2_setup_request() -> None:
    node, functions = codec.decode_e2_setup_request(golden("e2setup_req.bin"))
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


def test_golden_ran_function_description_instance_and_name() -> None:
    """The description's RANfunction-Name: instance 1, description "KPM Monitor" (read with the
    compiled module directly, since KpmRanFunction keeps neither)."""
    from pycrate_asn1dir import E2AP

    from xapp.adapters.e2.asn1 import _kpm_v3

    pdu = E2AP.E2AP_PDU_Descriptions.E2AP_PDU
    pdu.from_aper(golden("e2setup_req.bin"))
    ies = {ie["id"]: ie["value"][1] for ie in pdu.get_val()[1]["value"][1]["protocolIEs"]}
    definition = ies[10][0]["value"][1]["ranFunctionDefinition"]
    desc = _kpm_v3.E2SM_KPM_v3_IEs.E2SM_KPM_RANfunction_Description
    desc.from_aper(definition)
    name = desc.get_val()["ranFunction-Name"]
    assert name == {"ranFunction-ShortName": "ORAN-E2SM-KPM", "ranFunction-E2SM-OID": "OID123",
                    "ranFunction-Description": "KPM Monitor", "ranFunction-Instance": 1}
    assert desc.get_val()["ric-EventTriggerStyle-List"] == [{
        "ric-EventTriggerStyle-Type": 1, "ric-EventTriggerStyle-Name": "Periodic Report",
        "ric-EventTriggerFormat-Type": 1}]


# --- generated modules are what the committed sources compile to ---------------------------


def test_generated_modules_match_sources() -> None:
    assert build.stale() == [], "run: python -m xapp.adapters.e2.asn1.build"


# --- versions ------------------------------------------------------------------------------

UES = (
    UeId(amf_ue_ngap_id=(1 << 40) - 1, guami="02f839-ff-3ff-3f", gnb_cu_ue_f1ap_id=7,
         ran_ue_id="0102030405060708"),
    UeId(amf_ue_ngap_id=0, guami="00f110-1-2-3"),
    UeId(gnb_cu_ue_f1ap_id=0xFFFFFFFF, ran_ue_id="ffffffffffffffff"),
    UeId(gnb_cu_ue_f1ap_id=12),
)


@pytest.mark.parametrize("version", [3, 4])
def test_format3_round_trip_every_ue_id_form(version: int) -> None:
    reports = tuple(KpmReport({"DRB.UEThpDl": 1000.0 + i, "DRB.UEThpUl": 0.125 * i,
                               "RRU.PrbUsedDl": float(i)}, ue=ue) for i, ue in enumerate(UES))
    header = codec.encode_kpm_indication_header(1_700_000_000_123, version, sender_name="gnb-1")
    message = codec.encode_kpm_indication_message(reports, version, granularity_ms=500)
    kpm = codec.decode_kpm_indication(header, message, version)
    assert kpm.kpm_version == version
    assert kpm.format == 3
    assert kpm.collect_start_ms == 1_700_000_000_123
    assert kpm.granularity_ms == 500
    assert kpm.sender_name == "gnb-1"
    assert kpm.reports == reports
    assert kpm.reports[0].ue is not None
    assert kpm.reports[0].ue.keys()[0] == "amf:02f839-ff-3ff-3f:1099511627775"


def test_v2_format1_round_trip_and_4_octet_timestamp() -> None:
    header = codec.encode_kpm_indication_header(1_700_000_000_999, 2)
    assert len(header) < len(codec.encode_kpm_indication_header(1_700_000_000_999, 3))
    message = codec.encode_kpm_indication_message([KpmReport({"DRB.UEThpDl": 2.5e9})], 2,
                                                  granularity_ms=1000)
    kpm = codec.decode_kpm_indication(header, message, 2)
    assert (kpm.kpm_version, kpm.format, kpm.granularity_ms) == (2, 1, 1000)
    assert kpm.collect_start_ms == 1_700_000_000_000  # v2: whole seconds
    assert kpm.reports == (KpmReport({"DRB.UEThpDl": 2.5e9}),)
    # A v3 (8-octet) header is not a v2 header.
    with pytest.raises(E2DecodeError):
        codec.decode_kpm_indication(codec.encode_kpm_indication_header(0, 3)[:9], message, 2)


def test_v2_node_sending_format3_is_read_with_v3_ue_ids() -> None:
    message = codec.encode_kpm_indication_message([KpmReport({"a": 1.0}, ue=u) for u in UES], 3)
    kpm = codec.decode_kpm_indication(codec.encode_kpm_indication_header(0, 2), message, 2)
    assert kpm.format == 3 and kpm.kpm_version == 3
    assert [r.ue for r in kpm.reports] == list(UES)


@pytest.mark.parametrize("version", [0, 1, 5, -3])
def test_unsupported_version_refused(version: int) -> None:
    ind = codec.decode_ric_indication(golden("ind0.bin"))
    with pytest.raises(E2DecodeError, match="not supported"):
        codec.decode_kpm_indication(ind.header, ind.message, version)
    with pytest.raises(ValueError, match="not supported"):
        codec.encode_event_trigger(1000, version)


def test_ran_function_version_from_oid() -> None:
    fn = codec.decode_e2_setup_request(golden("e2setup_req.bin"))[1][0]
    ind = golden("e2setup_req.bin")
    assert fn.kpm_version == 3
    from pycrate_asn1dir import E2AP

    pdu = E2AP.E2AP_PDU_Descriptions.E2AP_PDU
    pdu.from_aper(ind)
    item = pdu.get_val()[1]["value"][1]["protocolIEs"][2]["value"][1][0]["value"][1]
    definition = item["ranFunctionDefinition"]
    for oid, version in (("1.3.6.1.4.1.53148.1.2.2.2", 2), ("1.3.6.1.4.1.53148.1.3.2.2", 3),
                         ("1.3.6.1.4.1.53148.1.4.2.2", 4)):
        assert codec.decode_ran_function_description(definition, 2, oid, 1).kpm_version == version
    with pytest.raises(E2DecodeError, match="version 1 is not supported"):
        codec.decode_ran_function_description(definition, 2, "1.3.6.1.4.1.53148.1.1.2.2", 1)


# --- measurement naming --------------------------------------------------------------------


def test_format1_without_meas_info_list_uses_the_action_definition_order() -> None:
    from xapp.adapters.e2.asn1 import _kpm_v3

    msg = _kpm_v3.E2SM_KPM_v3_IEs.E2SM_KPM_IndicationMessage
    msg.set_val({"indicationMessage-formats": ("indicationMessage-Format1", {
        "measData": [{"measRecord": [("integer", 5), ("noValue", 0)]},
                     {"measRecord": [("integer", 9), ("real", (3, 2, -1))]},
                     {"measRecord": [("integer", 11), ("integer", 12)],
                      "incompleteFlag": "true"}]})})
    message = msg.to_aper()
    header = codec.encode_kpm_indication_header(0, 3)
    with pytest.raises(E2DecodeError, match="measurement names are needed"):
        codec.decode_kpm_indication(header, message, 3)
    kpm = codec.decode_kpm_indication(header, message, 3, measurement_names=["a", "b"])
    # The latest complete period (the last one is flagged incomplete): 9 and 1.5.
    assert kpm.reports[0].values == {"a": 9.0, "b": 1.5}
    with pytest.raises(E2DecodeError, match="2 values for 3 measurements"):
        codec.decode_kpm_indication(header, message, 3, measurement_names=["a", "b", "c"])


# --- encoders ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4])
def test_event_trigger_round_trip(version: int) -> None:
    data = codec.encode_event_trigger(1000, version)
    obj = (codec._codecs().v2 if version == 2 else codec._codecs().v3) \
        .E2SM_KPM_EventTriggerDefinition
    obj.from_aper(data)
    assert obj.get_val() == {"eventDefinition-formats": ("eventDefinition-Format1",
                                                         {"reportingPeriod": 1000})}


@pytest.mark.parametrize("version", [2, 3, 4])
def test_action_definition_style1_round_trip(version: int) -> None:
    data = codec.encode_action_definition(["DRB.UEThpDl", "RRU.PrbUsedDl"], 1000, version,
                                          cell="00f110-00000000a")
    obj = (codec._codecs().v2 if version == 2 else codec._codecs().v3).E2SM_KPM_ActionDefinition
    obj.from_aper(data)
    value = obj.get_val()
    assert value["ric-Style-Type"] == 1
    kind, fmt = value["actionDefinition-formats"]
    assert kind == "actionDefinition-Format1"
    assert [m["measType"] for m in fmt["measInfoList"]] == [("measName", "DRB.UEThpDl"),
                                                            ("measName", "RRU.PrbUsedDl")]
    assert fmt["granulPeriod"] == 1000
    assert fmt["cellGlobalID"] == ("nR-CGI", {"pLMNIdentity": b"\x00\xf1\x10",
                                              "nRCellIdentity": (10, 36)})


@pytest.mark.parametrize("version", [3, 4])
def test_action_definition_styles_4_and_5_round_trip(version: int) -> None:
    obj = codec._codecs().v3.E2SM_KPM_ActionDefinition
    obj.from_aper(codec.encode_action_definition(["DRB.UEThpDl"], 100, version, style=4))
    kind, fmt = obj.get_val()["actionDefinition-formats"]
    assert kind == "actionDefinition-Format4"
    assert fmt["matchingUeCondList"] == [{"testCondInfo": {"testType": ("rSRP", "true"),
                                                           "testExpr": "present"}}]
    obj.from_aper(codec.encode_action_definition(["DRB.UEThpDl"], 100, version, style=5,
                                                 ues=UES))
    kind, fmt = obj.get_val()["actionDefinition-formats"]
    assert kind == "actionDefinition-Format5"
    assert [codec._ue_id(item["ueID"], version) for item in fmt["matchingUEidList"]] == list(UES)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"measurements": [], "granularity_ms": 1000, "kpm_version": 3}, "non-empty"),
    ({"measurements": "DRB.UEThpDl", "granularity_ms": 1000, "kpm_version": 3}, "non-empty"),
    ({"measurements": ["x" * 151], "granularity_ms": 1000, "kpm_version": 3}, "1..150"),
    ({"measurements": ["a"], "granularity_ms": 0, "kpm_version": 3}, "granularity"),
    ({"measurements": ["a"], "granularity_ms": 1000, "kpm_version": 2, "style": 4}, "v2.00"),
    ({"measurements": ["a"], "granularity_ms": 1000, "kpm_version": 3, "style": 5,
      "ues": UES[:1]}, "at least two"),
    ({"measurements": ["a"], "granularity_ms": 1000, "kpm_version": 3, "style": 6}, "style"),
    ({"measurements": ["a"], "granularity_ms": 1000, "kpm_version": 3, "style": 2}, "one UE"),
    ({"measurements": ["a"], "granularity_ms": 1000, "kpm_version": 3, "cell": "x"}, "NR CGI"),
    ({"measurements": ["a"], "granularity_ms": 1000, "kpm_version": 3, "style": 5,
      "ues": [UeId(c_rnti=1), UeId(c_rnti=2)]}, "UEID needs"),
])
def test_action_definition_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        codec.encode_action_definition(**kwargs)  # type: ignore[arg-type]


def test_ric_indication_round_trip() -> None:
    ind = RicIndication(RicRequestId(65535, 0), 4095, 255, 65535, "insert", b"\x01", b"\x02\x03")
    assert codec.decode_ric_indication(codec.encode_ric_indication(ind)) == ind
    no_sn = dataclasses.replace(ind, sequence_number=None, indication_type="report")
    assert codec.decode_ric_indication(codec.encode_ric_indication(no_sn)) == no_sn


# --- refusals ------------------------------------------------------------------------------


def test_wrong_e2ap_messages_refused() -> None:
    with pytest.raises(E2DecodeError, match="successfulOutcome, expected a initiatingMessage"):
        codec.decode_ric_indication(golden("subresp.bin"))
    with pytest.raises(E2DecodeError, match="expected a successfulOutcome"):
        codec.decode_subscription_response(golden("ind0.bin"))
    with pytest.raises(E2DecodeError, match="procedure code 5, expected 1"):
        codec.decode_e2_setup_request(golden("ind0.bin"))


def test_size_limits_refuse_before_parsing() -> None:
    with pytest.raises(E2DecodeError, match="more than the 65536 accepted"):
        codec.decode_ric_indication(golden("ind0.bin") + bytes(codec.MAX_INDICATION_BYTES))
    with pytest.raises(E2DecodeError, match="empty"):
        codec.decode_ric_indication(b"")
    with pytest.raises(E2DecodeError, match="expected bytes"):
        codec.decode_ric_indication("00")  # type: ignore[arg-type]
    with pytest.raises(E2DecodeError, match="header: 4097 bytes"):
        codec.decode_kpm_indication(bytes(4097), b"\x00", 3)


def test_too_many_ues_refused() -> None:
    many = [KpmReport({"a": 1.0}, ue=UeId(gnb_cu_ue_f1ap_id=i))
            for i in range(codec.MAX_REPORTS + 1)]
    with pytest.raises(ValueError, match="more than 2048"):
        codec.encode_kpm_indication_message(many, 3)
    from xapp.adapters.e2.asn1 import _kpm_v3

    msg = _kpm_v3.E2SM_KPM_v3_IEs.E2SM_KPM_IndicationMessage
    item = {"ueID": ("gNB-DU-UEID", {"gNB-CU-UE-F1AP-ID": 1}),
            "measReport": {"measData": [{"measRecord": [("integer", 1)]}],
                           "measInfoList": [{"measType": ("measID", 1),
                                             "labelInfoList": [{"measLabel": {
                                                 "noLabel": "true"}}]}]}}
    msg.set_val({"indicationMessage-formats": ("indicationMessage-Format3", {
        "ueMeasReportList": [item] * (codec.MAX_REPORTS + 1)})})
    data = msg.to_aper()
    assert len(data) <= codec.MAX_INDICATION_BYTES
    with pytest.raises(E2DecodeError, match="2049 UE reports, more than 2048"):
        codec.decode_kpm_indication(codec.encode_kpm_indication_header(0, 3), data, 3)


def _format2(records: list[int], ues: list[int]) -> bytes:
    """A v3 format 2 message: one condition on DRB.UEThpDl matched by ``ues`` (AMF ids)."""
    from xapp.adapters.e2.asn1 import _kpm_v3

    guami = {"pLMNIdentity": b"\x00\xf1\x10", "aMFRegionID": (2, 8), "aMFSetID": (1, 10),
             "aMFPointer": (3, 6)}
    cond: dict[str, object] = {
        "measType": ("measName", "DRB.UEThpDl"),
        "matchingCond": [{"matchingCondChoice": ("testCondInfo", {
            "testType": ("rSRP", "true"), "testExpr": "present"})}]}
    if ues:
        cond["matchingUEidList"] = [
            {"ueID": ("gNB-UEID", {"amf-UE-NGAP-ID": u, "guami": guami})} for u in ues]
    m = _kpm_v3.E2SM_KPM_v3_IEs.E2SM_KPM_IndicationMessage
    m.set_val({"indicationMessage-formats": ("indicationMessage-Format2", {
        "measData": [{"measRecord": [("integer", r) for r in records]}],
        "measCondUEidList": [cond], "granulPeriod": 1000})})
    return bytes(m.to_aper())


def test_format2_reports_per_matched_ue() -> None:
    header = codec.encode_kpm_indication_header(1_700_000_000_000, 3)
    # One record per matched UE (two UEs, two records): each UE its own value.
    kpm = codec.decode_kpm_indication(header, _format2([500, 700], [3, 7]), 3)
    assert kpm.format == 2
    assert [(r.ue.amf_ue_ngap_id if r.ue else None, r.values) for r in kpm.reports] == \
        [(3, {"DRB.UEThpDl": 500.0}), (7, {"DRB.UEThpDl": 700.0})]
    # One record per condition: the matched UEs share it.
    kpm = codec.decode_kpm_indication(header, _format2([600], [3, 7]), 3)
    assert [r.values for r in kpm.reports] == [{"DRB.UEThpDl": 600.0}] * 2
    # No matched UE: one node/cell report.
    kpm = codec.decode_kpm_indication(header, _format2([600], []), 3)
    assert [(r.ue, r.values) for r in kpm.reports] == [(None, {"DRB.UEThpDl": 600.0})]
    # Neither reading fits: refused, not guessed.
    with pytest.raises(E2DecodeError, match="values for"):
        codec.decode_kpm_indication(header, _format2([1, 2, 3], [3, 7]), 3)


def test_labels_summed_averaged_or_the_total() -> None:
    from xapp.adapters.e2.asn1 import _kpm_v3

    def item(name: str, labels: list[dict[str, Any]]) -> dict[str, object]:
        return {"measType": ("measName", name),
                "labelInfoList": [{"measLabel": lab} for lab in labels]}

    plmn1, plmn2 = {"plmnID": b"\x00\xf1\x10"}, {"plmnID": b"\x99\xf9\x99"}
    m = _kpm_v3.E2SM_KPM_v3_IEs.E2SM_KPM_IndicationMessage
    m.set_val({"indicationMessage-formats": ("indicationMessage-Format1", {
        "measData": [{"measRecord": [("integer", v) for v in (10, 30, 100, 40, 60, 5, 7)]}],
        "measInfoList": [item("DRB.RlcSduDelayDl", [plmn1, plmn2]),  # 10, 30: mean
                         item("DRB.UEThpDl", [{"noLabel": "true"}, plmn1, plmn2]),  # total
                         item("DRB.UEThpUl", [plmn1, plmn2])]})})  # 5, 7: sum
    header = codec.encode_kpm_indication_header(1_700_000_000_000, 3)
    [report] = codec.decode_kpm_indication(header, bytes(m.to_aper()), 3).reports
    assert report.values == {"DRB.RlcSduDelayDl": 20.0, "DRB.UEThpDl": 100.0,
                             "DRB.UEThpUl": 12.0}


#: Styles each dialect's text has action definition formats for (issue 21: every style a node
#: offers, under the definitions it speaks).  KPM v02.00 and v02.00.03 (ONF) have formats 1-3.
DIALECT_STYLES = {"v3": (1, 2, 3, 4, 5), "v2": (1, 2, 3), "flexric-v3": (1, 2, 3, 4, 5),
                  "flexric-v2": (1, 2, 3, 4, 5), "onf-v2": (1, 2, 3)}
DIALECT_VERSION = {"v3": 3, "v2": 2, "flexric-v3": 3, "flexric-v2": 2, "onf-v2": 2}


@pytest.mark.parametrize("dialect", codec.DIALECTS)
@pytest.mark.parametrize("style", [1, 2, 3, 4, 5])
def test_action_definition_of_every_style_decodes_as_built(dialect: str, style: int) -> None:
    """Built under a dialect, decoded with that dialect's text: style, format, measurements,
    period, the cell, the UEs named and the test condition are what was asked for."""
    names = ["DRB.UEThpDl", "RRU.PrbUsedDl"]
    onf, opaque = dialect == "onf-v2", dialect in ("v2", "onf-v2")
    cell = "cell-7" if onf else "00f110-00000000a"
    ues = {2: UES[:1], 5: UES}.get(style, ())
    if opaque:  # UE-Identity is the RAN UE id's octets in these texts
        ues = tuple(UeId(ran_ue_id=u.ran_ue_id) for u in ues)

    def build() -> bytes:
        return codec.encode_action_definition(names, 1000, DIALECT_VERSION[dialect],
                                              style=style, cell=cell, ues=ues, dialect=dialect)

    if style not in DIALECT_STYLES[dialect]:
        with pytest.raises(ValueError, match=f"no style {style}"):
            build()
        return
    data = build()
    module = codec._dialect_modules(dialect)[1]
    with codec._LOCK:
        value = codec._decode(module.E2SM_KPM_ActionDefinition, data, "action definition")
    kind, fmt = value["actionDefinition-formats"]
    assert (value["ric-Style-Type"], kind) == (style, f"actionDefinition-Format{style}")
    assert codec.decode_action_definition(data, dialect) == (
        style, kind, tuple(names), 1000)
    info = fmt.get("subscriptInfo") or fmt.get("subscriptionInfo") or fmt
    assert info["granulPeriod"] == 1000
    if style in (1, 3):  # the cell: an NR CGI, or ONF's cell object id
        want_cell = cell if onf else ("nR-CGI", {"pLMNIdentity": b"\x00\xf1\x10",
                                                 "nRCellIdentity": (10, 36)})
        assert info["cellObjID" if onf else "cellGlobalID"] == want_cell
    if onf:
        assert info["subscriptID"] == 1
    if style == 2:
        assert codec._ue_id(fmt["ueID"], DIALECT_VERSION[dialect]) == ues[0]
    if style == 3:
        conds = [c["matchingCond"] for c in fmt["measCondList"]]
        assert len(conds) == len(names)
        for cond in conds:
            [item] = cond
            test = item[1] if isinstance(item, tuple) else item["matchingCondChoice"][1]
            assert (test["testType"], test["testExpr"]) == (("rSRP", "true"), "present")
    if style == 4:
        assert fmt["matchingUeCondList"] == [{"testCondInfo": {"testType": ("rSRP", "true"),
                                                               "testExpr": "present"}}]
    if style == 5:
        assert [codec._ue_id(i["ueID"], 3) for i in fmt["matchingUEidList"]] == list(ues)
