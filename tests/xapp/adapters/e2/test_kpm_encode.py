"""E2SM-KPM out: round trips through the decoder, every REPORT style under every dialect,
refusals of what cannot be encoded."""

from __future__ import annotations

import pytest

from tests.xapp.adapters.e2.vectors import UES
from xapp.adapters.e2 import aper, kpm_decode, kpm_encode
from xapp.adapters.e2.records import E2DecodeError, KpmReport, UeId

# --- indications (the node's side) ----------------------------------------------------------


@pytest.mark.parametrize("version", [3, 4])
def test_format3_round_trip_every_ue_id_form(version: int) -> None:
    reports = tuple(KpmReport({"DRB.UEThpDl": 1000.0 + i, "DRB.UEThpUl": 0.125 * i,
                               "RRU.PrbUsedDl": float(i)}, ue=ue) for i, ue in enumerate(UES))
    header = kpm_encode.encode_kpm_indication_header(1_700_000_000_123, version,
                                                     sender_name="gnb-1")
    message = kpm_encode.encode_kpm_indication_message(reports, version, granularity_ms=500)
    kpm = kpm_decode.decode_kpm_indication(header, message, version)
    assert kpm.kpm_version == version
    assert kpm.format == 3
    assert kpm.collect_start_ms == 1_700_000_000_123
    assert kpm.granularity_ms == 500
    assert kpm.sender_name == "gnb-1"
    assert kpm.reports == reports
    assert kpm.reports[0].ue is not None
    assert kpm.reports[0].ue.keys()[0] == "amf:02f839-ff-3ff-3f:1099511627775"


def test_v2_format1_round_trip_and_4_octet_timestamp() -> None:
    header = kpm_encode.encode_kpm_indication_header(1_700_000_000_999, 2)
    assert len(header) < len(kpm_encode.encode_kpm_indication_header(1_700_000_000_999, 3))
    message = kpm_encode.encode_kpm_indication_message([KpmReport({"DRB.UEThpDl": 2.5e9})], 2,
                                                       granularity_ms=1000)
    kpm = kpm_decode.decode_kpm_indication(header, message, 2)
    assert (kpm.kpm_version, kpm.format, kpm.granularity_ms) == (2, 1, 1000)
    assert kpm.collect_start_ms == 1_700_000_000_000  # v2: whole seconds
    assert kpm.reports == (KpmReport({"DRB.UEThpDl": 2.5e9}),)
    # A v3 (8-octet) header is not a v2 header.
    with pytest.raises(E2DecodeError):
        kpm_decode.decode_kpm_indication(kpm_encode.encode_kpm_indication_header(0, 3)[:9],
                                         message, 2)


def test_too_many_ues_refused() -> None:
    many = [KpmReport({"a": 1.0}, ue=UeId(gnb_cu_ue_f1ap_id=i))
            for i in range(aper.MAX_REPORTS + 1)]
    with pytest.raises(ValueError, match="more than 2048"):
        kpm_encode.encode_kpm_indication_message(many, 3)


# --- subscriptions: event trigger and action definition ------------------------------------


@pytest.mark.parametrize("version", [0, 1, 5, -3])
def test_unsupported_version_refused(version: int) -> None:
    with pytest.raises(ValueError, match="not supported"):
        kpm_encode.encode_event_trigger(1000, version)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_event_trigger_round_trip(version: int) -> None:
    data = kpm_encode.encode_event_trigger(1000, version)
    obj = (aper.compiled().v2 if version == 2 else aper.compiled().v3) \
        .E2SM_KPM_EventTriggerDefinition
    obj.from_aper(data)
    assert obj.get_val() == {"eventDefinition-formats": ("eventDefinition-Format1",
                                                         {"reportingPeriod": 1000})}


@pytest.mark.parametrize("version", [2, 3, 4])
def test_action_definition_style1_round_trip(version: int) -> None:
    data = kpm_encode.encode_action_definition(["DRB.UEThpDl", "RRU.PrbUsedDl"], 1000, version,
                                               cell="00f110-00000000a")
    obj = (aper.compiled().v2 if version == 2 else aper.compiled().v3).E2SM_KPM_ActionDefinition
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
    obj = aper.compiled().v3.E2SM_KPM_ActionDefinition
    obj.from_aper(kpm_encode.encode_action_definition(["DRB.UEThpDl"], 100, version, style=4))
    kind, fmt = obj.get_val()["actionDefinition-formats"]
    assert kind == "actionDefinition-Format4"
    assert fmt["matchingUeCondList"] == [{"testCondInfo": {"testType": ("rSRP", "true"),
                                                           "testExpr": "present"}}]
    obj.from_aper(kpm_encode.encode_action_definition(["DRB.UEThpDl"], 100, version, style=5,
                                                      ues=UES))
    kind, fmt = obj.get_val()["actionDefinition-formats"]
    assert kind == "actionDefinition-Format5"
    assert [kpm_decode._ue_id(item["ueID"], version)
            for item in fmt["matchingUEidList"]] == list(UES)


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
        kpm_encode.encode_action_definition(**kwargs)  # type: ignore[arg-type]


#: Styles each dialect's text has action definition formats for (issue 21: every style a node
#: offers, under the definitions it speaks).  KPM v02.00 and v02.00.03 (ONF) have formats 1-3.
DIALECT_STYLES = {"v3": (1, 2, 3, 4, 5), "v2": (1, 2, 3), "flexric-v3": (1, 2, 3, 4, 5),
                  "flexric-v2": (1, 2, 3, 4, 5), "onf-v2": (1, 2, 3)}
DIALECT_VERSION = {"v3": 3, "v2": 2, "flexric-v3": 3, "flexric-v2": 2, "onf-v2": 2}


@pytest.mark.parametrize("dialect", aper.DIALECTS)
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
        return kpm_encode.encode_action_definition(names, 1000, DIALECT_VERSION[dialect],
                                                   style=style, cell=cell, ues=ues, dialect=dialect)

    if style not in DIALECT_STYLES[dialect]:
        with pytest.raises(ValueError, match=f"no style {style}"):
            build()
        return
    data = build()
    module = aper.dialect_modules(dialect)[1]
    with aper.LOCK:
        value = aper.decode(module.E2SM_KPM_ActionDefinition, data, "action definition")
    kind, fmt = value["actionDefinition-formats"]
    assert (value["ric-Style-Type"], kind) == (style, f"actionDefinition-Format{style}")
    assert kpm_decode.decode_action_definition(data, dialect) == (
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
        assert kpm_decode._ue_id(fmt["ueID"], DIALECT_VERSION[dialect]) == ues[0]
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
        assert [kpm_decode._ue_id(i["ueID"], 3) for i in fmt["matchingUEidList"]] == list(ues)
