"""E2SM-KPM in: the simulator's golden header, message and RAN function description, versions
and dialects, measurement naming and labels, format 2, refusals."""

from __future__ import annotations

from typing import Any

import asn1tools
import pytest

from tests.xapp.adapters.e2.vectors import UES, golden
from xapp.adapters.e2 import aper, e2ap, kpm_decode, kpm_encode
from xapp.adapters.e2.asn1 import build
from xapp.adapters.e2.records import E2DecodeError, KpmReport

# --- golden vectors (O-RAN SC E2 simulator, E2AP v3.01 / E2SM-KPM v3.00) --------------------


def test_golden_indication_header_and_message_format1() -> None:
    ind = e2ap.decode_ric_indication(golden("ind0.bin"))
    kpm = kpm_decode.decode_kpm_indication(ind.header, ind.message, 3)
    assert kpm.kpm_version == 3
    assert kpm.format == 1
    assert kpm.sender_name == "ORANSim"
    # colletStartTime is the ASCII "20200613", not an NTP time after 1970: no start time.
    assert kpm.collect_start_ms is None
    assert kpm.granularity_ms == 1
    # One record, measID 1 (label PLMN "747", slice SST "1" SD "100"), integer 1, the
    # incompleteFlag set: the simulator numbers its measurements and sends synthetic values.
    assert kpm.reports == (KpmReport({"id:1": 1.0}),)
    named = kpm_decode.decode_kpm_indication(ind.header, ind.message, 3,
                                             measurement_ids={1: "DRB.RlcSduTransmittedVolumeDL"})
    assert named.reports[0].values == {"DRB.RlcSduTransmittedVolumeDL": 1.0}


def test_golden_header_sender_type_is_extended_aper() -> None:
    """senderType "simulator" is 9 characters against SIZE(0..8, ...): the extension bit is set
    (0x80) and the length follows unconstrained; pycrate decodes it, asn1tools does not."""
    ind = e2ap.decode_ric_indication(golden("ind0.bin"))
    # 0x0e, colletStartTime (8), senderName: length 00 00 07 + "ORANSim", then senderType.
    assert ind.header[19] == 0x80 and ind.header[20] == 9
    assert ind.header[21:30] == b"simulator"
    spec = asn1tools.compile_files([str(build.HERE / "e2sm-kpm-v3.asn")], "per")
    with pytest.raises(Exception):  # noqa: B017 - asn1tools' own error types vary by version
        spec.decode("E2SM-KPM-IndicationHeader", ind.header)


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


# --- versions ------------------------------------------------------------------------------


def test_v2_node_sending_format3_is_read_with_v3_ue_ids() -> None:
    message = kpm_encode.encode_kpm_indication_message(
        [KpmReport({"a": 1.0}, ue=u) for u in UES], 3)
    header = kpm_encode.encode_kpm_indication_header(0, 2)
    kpm = kpm_decode.decode_kpm_indication(header, message, 2)
    assert kpm.format == 3 and kpm.kpm_version == 3
    assert [r.ue for r in kpm.reports] == list(UES)


@pytest.mark.parametrize("version", [0, 1, 5, -3])
def test_unsupported_version_refused(version: int) -> None:
    ind = e2ap.decode_ric_indication(golden("ind0.bin"))
    with pytest.raises(E2DecodeError, match="not supported"):
        kpm_decode.decode_kpm_indication(ind.header, ind.message, version)


def test_ran_function_version_from_oid() -> None:
    fn = e2ap.decode_e2_setup_request(golden("e2setup_req.bin"))[1][0]
    ind = golden("e2setup_req.bin")
    assert fn.kpm_version == 3
    from pycrate_asn1dir import E2AP

    pdu = E2AP.E2AP_PDU_Descriptions.E2AP_PDU
    pdu.from_aper(ind)
    item = pdu.get_val()[1]["value"][1]["protocolIEs"][2]["value"][1][0]["value"][1]
    definition = item["ranFunctionDefinition"]
    for oid, version in (("1.3.6.1.4.1.53148.1.2.2.2", 2), ("1.3.6.1.4.1.53148.1.3.2.2", 3),
                         ("1.3.6.1.4.1.53148.1.4.2.2", 4)):
        fn = kpm_decode.decode_ran_function_description(definition, 2, oid, 1)
        assert fn.kpm_version == version
    with pytest.raises(E2DecodeError, match="version 1 is not supported"):
        kpm_decode.decode_ran_function_description(definition, 2, "1.3.6.1.4.1.53148.1.1.2.2", 1)


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
    header = kpm_encode.encode_kpm_indication_header(0, 3)
    with pytest.raises(E2DecodeError, match="measurement names are needed"):
        kpm_decode.decode_kpm_indication(header, message, 3)
    kpm = kpm_decode.decode_kpm_indication(header, message, 3, measurement_names=["a", "b"])
    # The latest complete period (the last one is flagged incomplete): 9 and 1.5.
    assert kpm.reports[0].values == {"a": 9.0, "b": 1.5}
    with pytest.raises(E2DecodeError, match="2 values for 3 measurements"):
        kpm_decode.decode_kpm_indication(header, message, 3, measurement_names=["a", "b", "c"])


# --- refusals ------------------------------------------------------------------------------


def test_too_many_ues_refused() -> None:
    from xapp.adapters.e2.asn1 import _kpm_v3

    msg = _kpm_v3.E2SM_KPM_v3_IEs.E2SM_KPM_IndicationMessage
    item = {"ueID": ("gNB-DU-UEID", {"gNB-CU-UE-F1AP-ID": 1}),
            "measReport": {"measData": [{"measRecord": [("integer", 1)]}],
                           "measInfoList": [{"measType": ("measID", 1),
                                             "labelInfoList": [{"measLabel": {
                                                 "noLabel": "true"}}]}]}}
    msg.set_val({"indicationMessage-formats": ("indicationMessage-Format3", {
        "ueMeasReportList": [item] * (aper.MAX_REPORTS + 1)})})
    data = msg.to_aper()
    assert len(data) <= aper.MAX_INDICATION_BYTES
    with pytest.raises(E2DecodeError, match="2049 UE reports, more than 2048"):
        kpm_decode.decode_kpm_indication(kpm_encode.encode_kpm_indication_header(0, 3), data, 3)


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
    header = kpm_encode.encode_kpm_indication_header(1_700_000_000_000, 3)
    # One record per matched UE (two UEs, two records): each UE its own value.
    kpm = kpm_decode.decode_kpm_indication(header, _format2([500, 700], [3, 7]), 3)
    assert kpm.format == 2
    assert [(r.ue.amf_ue_ngap_id if r.ue else None, r.values) for r in kpm.reports] == \
        [(3, {"DRB.UEThpDl": 500.0}), (7, {"DRB.UEThpDl": 700.0})]
    # One record per condition: the matched UEs share it.
    kpm = kpm_decode.decode_kpm_indication(header, _format2([600], [3, 7]), 3)
    assert [r.values for r in kpm.reports] == [{"DRB.UEThpDl": 600.0}] * 2
    # No matched UE: one node/cell report.
    kpm = kpm_decode.decode_kpm_indication(header, _format2([600], []), 3)
    assert [(r.ue, r.values) for r in kpm.reports] == [(None, {"DRB.UEThpDl": 600.0})]
    # Neither reading fits: refused, not guessed.
    with pytest.raises(E2DecodeError, match="values for"):
        kpm_decode.decode_kpm_indication(header, _format2([1, 2, 3], [3, 7]), 3)


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
    header = kpm_encode.encode_kpm_indication_header(1_700_000_000_000, 3)
    [report] = kpm_decode.decode_kpm_indication(header, bytes(m.to_aper()), 3).reports
    assert report.values == {"DRB.RlcSduDelayDl": 20.0, "DRB.UEThpDl": 100.0,
                             "DRB.UEThpUl": 12.0}
