"""Cross-codec: KPM messages encoded by pycrate (the shipped codec) decoded by asn1tools from the
same .asn sources, and encoded by asn1tools decoded by the shipped codec, per KPM version."""

from __future__ import annotations

from typing import Any

import asn1tools  # a dev dependency: missing, the tests fail rather than skip
import pytest

from xapp.adapters.e2 import kpm_decode, kpm_encode
from xapp.adapters.e2.asn1 import build
from xapp.adapters.e2.records import KpmReport, UeId

UES = (
    UeId(amf_ue_ngap_id=123456789, guami="02f839-81-155-2a", gnb_cu_ue_f1ap_id=9,
         ran_ue_id="00000000000000a1"),
    UeId(gnb_cu_ue_f1ap_id=4_000_000_000, ran_ue_id="0102030405060708"),
    UeId(gnb_cu_ue_f1ap_id=3),
)
VALUES = ({"DRB.UEThpDl": 153_000.0, "DRB.UEThpUl": 0.375, "RRU.PrbUsedDl": 12.0},
          {"DRB.UEThpDl": 7.0, "DRB.UEThpUl": 1e-3, "RRU.PrbUsedDl": 0.0},
          {"DRB.UEThpDl": 4294967295.0, "DRB.UEThpUl": 2.5e12, "RRU.PrbUsedDl": 273.0})


@pytest.fixture(scope="module", params=[2, 3])
def spec(request: pytest.FixtureRequest) -> tuple[int, Any]:
    version = int(request.param)
    return version, asn1tools.compile_files(
        [str(build.HERE / f"e2sm-kpm-v{version}.asn")], "per")


def _tools_ue(value: Any) -> UeId:
    """UeId of an asn1tools UEID value (BIT STRINGs are (bytes, bits) there)."""
    kind, ue = value
    ran = ue.get("ran-UEID")
    if kind == "gNB-UEID":
        g = ue["guami"]
        bits = [int.from_bytes(g[k][0], "big") >> (len(g[k][0]) * 8 - g[k][1])
                for k in ("aMFRegionID", "aMFSetID", "aMFPointer")]
        f1 = ue.get("gNB-CU-UE-F1AP-ID-List")
        return UeId(amf_ue_ngap_id=ue["amf-UE-NGAP-ID"],
                    guami=f"{g['pLMNIdentity'].hex()}-{bits[0]:x}-{bits[1]:x}-{bits[2]:x}",
                    gnb_cu_ue_f1ap_id=f1[0]["gNB-CU-UE-F1AP-ID"] if f1 else None,
                    ran_ue_id=ran.hex() if ran is not None else None)
    assert kind == "gNB-DU-UEID"
    return UeId(gnb_cu_ue_f1ap_id=ue["gNB-CU-UE-F1AP-ID"],
                ran_ue_id=ran.hex() if ran is not None else None)


def _tools_format1(fmt: Any) -> dict[str, float]:
    names = [item["measType"][1] for item in fmt["measInfoList"]]
    return {n: float(v) for n, (_, v) in zip(names, fmt["measData"][-1]["measRecord"],
                                             strict=True)}


def _bits(value: int, bits: int) -> tuple[bytes, int]:
    """asn1tools BIT STRING: left-aligned bytes and length."""
    width = (bits + 7) // 8
    return (value << (width * 8 - bits)).to_bytes(width, "big"), bits


def _tools_ueid(ue: UeId) -> Any:
    ran = bytes.fromhex(ue.ran_ue_id) if ue.ran_ue_id else None
    if ue.guami is not None:
        plmn, region, amf_set, pointer = ue.guami.split("-")
        gnb: dict[str, Any] = {
            "amf-UE-NGAP-ID": ue.amf_ue_ngap_id,
            "guami": {"pLMNIdentity": bytes.fromhex(plmn), "aMFRegionID": _bits(int(region, 16), 8),
                      "aMFSetID": _bits(int(amf_set, 16), 10),
                      "aMFPointer": _bits(int(pointer, 16), 6)}}
        if ue.gnb_cu_ue_f1ap_id is not None:
            gnb["gNB-CU-UE-F1AP-ID-List"] = [{"gNB-CU-UE-F1AP-ID": ue.gnb_cu_ue_f1ap_id}]
        if ran is not None:
            gnb["ran-UEID"] = ran
        return ("gNB-UEID", gnb)
    du: dict[str, Any] = {"gNB-CU-UE-F1AP-ID": ue.gnb_cu_ue_f1ap_id}
    if ran is not None:
        du["ran-UEID"] = ran
    return ("gNB-DU-UEID", du)


def _tools_record(value: float) -> tuple[str, Any]:
    if value.is_integer() and 0 <= value <= 0xFFFFFFFF:
        return ("integer", int(value))
    return ("real", value)


def _tools_f1(values: dict[str, float], labels: bool = True) -> dict[str, Any]:
    return {"measData": [{"measRecord": [("integer", 0)] * len(values), "incompleteFlag": "true"},
                         {"measRecord": [_tools_record(v) for v in values.values()]}],
            "measInfoList": [{"measType": ("measName", n),
                              "labelInfoList": [{"measLabel": {"noLabel": "true"}}
                                                if labels else {"measLabel": {"sUM": "true"}}]}
                             for n in values],
            "granulPeriod": 250}


def test_pycrate_format1_decoded_by_asn1tools(spec: tuple[int, Any]) -> None:
    version, tools = spec
    message = kpm_encode.encode_kpm_indication_message([KpmReport(VALUES[0])], version,
                                                       granularity_ms=250)
    kind, fmt = tools.decode("E2SM-KPM-IndicationMessage", message)["indicationMessage-formats"]
    assert kind == "indicationMessage-Format1"
    assert fmt["granulPeriod"] == 250
    assert _tools_format1(fmt) == VALUES[0]
    header = kpm_encode.encode_kpm_indication_header(1_700_000_000_500, version, sender_name="du-7")
    kind, hdr = tools.decode("E2SM-KPM-IndicationHeader", header)["indicationHeader-formats"]
    assert hdr["senderName"] == "du-7"
    assert len(hdr["colletStartTime"]) == (4 if version == 2 else 8)


def test_asn1tools_format1_decoded_by_pycrate(spec: tuple[int, Any]) -> None:
    version, tools = spec
    message = tools.encode("E2SM-KPM-IndicationMessage", {
        "indicationMessage-formats": ("indicationMessage-Format1", _tools_f1(VALUES[2]))})
    header = tools.encode("E2SM-KPM-IndicationHeader", {"indicationHeader-formats": (
        "indicationHeader-Format1", {"colletStartTime": bytes(4 if version == 2 else 8),
                                     "vendorName": "v"})})
    kpm = kpm_decode.decode_kpm_indication(header, message, version)
    assert (kpm.format, kpm.granularity_ms, kpm.collect_start_ms) == (1, 250, None)
    # The first period is flagged incomplete: the values are the second's.
    assert kpm.reports == (KpmReport(VALUES[2]),)


@pytest.mark.parametrize("version", [3, 4])
def test_pycrate_format3_decoded_by_asn1tools(version: int) -> None:
    tools = asn1tools.compile_files([str(build.HERE / "e2sm-kpm-v3.asn")], "per")
    reports = [KpmReport(v, ue=u) for v, u in zip(VALUES, UES, strict=True)]
    message = kpm_encode.encode_kpm_indication_message(reports, version, granularity_ms=100)
    kind, fmt = tools.decode("E2SM-KPM-IndicationMessage", message)["indicationMessage-formats"]
    assert kind == "indicationMessage-Format3"
    got = [(_tools_ue(item["ueID"]), _tools_format1(item["measReport"]))
           for item in fmt["ueMeasReportList"]]
    assert got == [(r.ue, r.values) for r in reports]


@pytest.mark.parametrize("version", [3, 4])
def test_asn1tools_format3_decoded_by_pycrate(version: int) -> None:
    tools = asn1tools.compile_files([str(build.HERE / "e2sm-kpm-v3.asn")], "per")
    message = tools.encode("E2SM-KPM-IndicationMessage", {"indicationMessage-formats": (
        "indicationMessage-Format3", {"ueMeasReportList": [
            {"ueID": _tools_ueid(u), "measReport": _tools_f1(v, labels=i % 2 == 0)}
            for i, (v, u) in enumerate(zip(VALUES, UES, strict=True))]})})
    header = kpm_encode.encode_kpm_indication_header(0, version)
    kpm = kpm_decode.decode_kpm_indication(header, message, version)
    assert kpm.format == 3
    assert kpm.reports == tuple(KpmReport(v, ue=u) for v, u in zip(VALUES, UES, strict=True))


def test_action_definitions_cross(spec: tuple[int, Any]) -> None:
    version, tools = spec
    data = kpm_encode.encode_action_definition(["DRB.UEThpDl", "DRB.UEThpUl"], 1000, version,
                                               cell="00f110-00000000a")
    value = tools.decode("E2SM-KPM-ActionDefinition", data)
    kind, fmt = value["actionDefinition-formats"]
    assert (value["ric-Style-Type"], kind) == (1, "actionDefinition-Format1")
    assert fmt["cellGlobalID"] == ("nR-CGI", {"pLMNIdentity": b"\x00\xf1\x10",
                                              "nRCellIdentity": _bits(10, 36)})
    assert tools.decode("E2SM-KPM-EventTriggerDefinition",
                        kpm_encode.encode_event_trigger(500, version)) == {
        "eventDefinition-formats": ("eventDefinition-Format1", {"reportingPeriod": 500})}
    if version == 3:
        five = tools.decode("E2SM-KPM-ActionDefinition", kpm_encode.encode_action_definition(
            ["DRB.UEThpDl"], 100, 3, style=5, ues=UES))["actionDefinition-formats"][1]
        assert [_tools_ue(i["ueID"]) for i in five["matchingUEidList"]] == list(UES)
