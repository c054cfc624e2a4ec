"""E2SM-KPM v04.00: what it adds to v03.00, read by the codec (issue 21).

v04.00 (with E2SM common v05.00) was compared field by field with the project's text
(``asn1/e2sm-kpm-v3.asn``; how, in ``docs/e2.md``): every root component, optionality and
constraint of the types the codec reads is the same; v04.00 adds extension additions only, and
the project's text now carries them.  The vectors below were encoded by asn1tools from
srsRAN's transcription of the v04.00 ASN.1 (its ``oran-sc-ric`` xApp library), outside this
repository: bytes of an independent encoder of the v4 text, as the interop vectors are.
"""

from __future__ import annotations

import pytest

from xapp.adapters.e2 import kpm_decode
from xapp.adapters.e2.mapping import map_indication
from xapp.adapters.e2.records import UeId
from xapp.adapters.e2.registry import CpeRegistry

CELL = "00f110-00000000a"
#: Format 3, two UEs: a gNB-UEID (AMF-UE-NGAP-ID 7) and a gNB-DU-UEID (F1AP id 21), each with
#: v04.00's cell-RNTI (C-RNTI 4660 and 17, NR CGI 00f110/0xa); DRB.UEThpDl's label carries
#: v04.00's cellGlobalID and beamID (SSB 3) and its item a matchCondReportList (> 100);
#: records: (12000, noValue) and (2500.5, 300); granularity 1000 ms.
V4_MESSAGE = bytes.fromhex(
    "400080be0000010400070000f11002004102800c0012340000f11000000000a06000000002082ee040000180"
    "a04452422e5545546870446c016000000830090000f11000000000a00106010600000200016400a04452422e"
    "5545546870556c012000004003e70c0015010c0000110000f11000000000a06000000002200480ff13890801"
    "2c000180a04452422e5545546870446c016000000830090000f11000000000a00106010600000200016400a0"
    "4452422e5545546870556c012000004003e7")
V4_HEADER = bytes.fromhex("08e8a2b6c08000000000000776342d6e6f6465")  # sender "v4-node"
#: Action definition format 1: DRB.UEThpDl with a matchCondReportList ("present"), 500 ms,
#: the NR cell 00f110/0xa.
V4_ACTION = bytes.fromhex(
    "00010108000080a04452422e5545546870446c012000000104000008504001f30000f11000000000a0")
#: RAN function description: style 4 (action format 4, message format 3), DRB.UEThpDl as
#: measID 1 with v04.00's binRangeDef, the v4 OID.
V4_DESCRIPTION = bytes.fromhex(
    "20304f52414e2d4532534d2d4b504d000018312e332e362e312e342e312e35333134382e312e342e322e3205"
    "004b504d204d6f6e69746f72000104010055457301040000c1404452422e5545546870446c000000010c0000"
    "0000000000010000010a01010103")
V4_OID = "1.3.6.1.4.1.53148.1.4.2.2"


def test_a_v4_format3_indication_reads_in_full() -> None:
    kpm = kpm_decode.decode_kpm_indication(V4_HEADER, V4_MESSAGE, 4)
    assert (kpm.format, kpm.granularity_ms, kpm.sender_name, kpm.dialect) == (
        3, 1000, "v4-node", "v3")
    first, second = kpm.reports
    # noValue is no value; the C-RNTI and its cell (v04.00's cell-RNTI) are read.
    assert first.values == {"DRB.UEThpDl": 12000.0}
    assert first.ue == UeId(amf_ue_ngap_id=7, guami="00f110-2-1-1", c_rnti=4660)
    assert second.values == {"DRB.UEThpDl": 2500.5, "DRB.UEThpUl": 300.0}
    assert second.ue == UeId(gnb_cu_ue_f1ap_id=21, c_rnti=17)
    assert first.cell == second.cell == CELL
    assert second.ue.keys()[-1] == "crnti:17"
    assert kpm_decode.detect_kpm_indication(V4_HEADER, V4_MESSAGE, 4).dialect == "v3"
    _, value = kpm_decode.decode_kpm_value("message", V4_MESSAGE)
    [item, _] = value["indicationMessage-formats"][1]["ueMeasReportList"][0]["measReport"][
        "measInfoList"]
    assert item["labelInfoList"][0]["measLabel"]["beamID"] == ("nR-Beam-ID", 3)
    assert item["labelInfoList"][0]["measLabel"]["cellGlobalID"][0] == "nR-CGI"
    assert item["matchCondReportList"] == [{"measValueReportCond": {
        "testExpr": "greaterthan", "testValue": ("valueInt", 100)}}]


def test_a_ue_known_by_its_c_rnti_maps_to_its_cpe() -> None:
    registry = CpeRegistry()
    registry.add("cpe-du", ["crnti:17"], CELL)
    kpm = kpm_decode.decode_kpm_indication(V4_HEADER, V4_MESSAGE, 4)
    frame, counts = map_indication(kpm, registry, time_s=0.0)
    assert (counts.ue_mapped, counts.ue_unmapped) == (1, 1)
    assert frame is not None and set(frame.cpe) == {"cpe-du"}
    assert frame.direction is not None
    got = dict(zip(frame.direction, frame.column("delivered_mbps"), strict=True))
    assert got == pytest.approx({"dl": 2.5005, "ul": 0.3})


def test_a_v4_action_definition_and_description_read() -> None:
    assert kpm_decode.decode_action_definition(V4_ACTION) == (
        1, "actionDefinition-Format1", ("DRB.UEThpDl",), 500)
    _, value = kpm_decode.decode_kpm_value("action_definition", V4_ACTION)
    fmt = value["actionDefinition-formats"][1]
    assert fmt["measInfoList"][0]["matchCondReportList"][0]["measValueReportCond"][
        "testExpr"] == "present"
    fn = kpm_decode.decode_ran_function_description(V4_DESCRIPTION, 2, V4_OID, 1)
    assert (fn.kpm_version, fn.dialect, fn.report_styles) == (4, "v3", {4: ("UEs", 4, 1, 3)})
    assert fn.measurement_ids == {1: "DRB.UEThpDl"}


def test_not_satisfied_is_no_value() -> None:
    # Format 1, no measInfoList, records (integer 5, notSatisfied): v04.00's CHOICE extension
    # alternative, an open type holding NULL, whose complete encoding is one zero octet
    # (X.691 10.1.3): extension bit and index 0 (0x80), length 1, 0x00.
    message = bytes.fromhex("00000000020005" + "800100")
    _, value = kpm_decode.decode_kpm_value("message", message, first="v3")
    assert value["indicationMessage-formats"][1]["measData"][0]["measRecord"] == [
        ("integer", 5), ("notSatisfied", 0)]
    kpm = kpm_decode.decode_kpm_indication(V4_HEADER, message, 4,
                                           measurement_names=("DRB.UEThpDl", "DRB.UEThpUl"))
    assert kpm.reports[0].values == {"DRB.UEThpDl": 5.0}
