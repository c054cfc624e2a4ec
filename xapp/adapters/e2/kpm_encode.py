"""E2SM-KPM out: the event trigger and action definition of a subscription, and indication
headers and messages as a node sends them (tests, benches and the twin), under the dialect a node
speaks (:data:`xapp.adapters.e2.aper.DIALECTS`).

Every public function raises ``ValueError`` for arguments it cannot encode.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from xapp.adapters.e2 import aper
from xapp.adapters.e2.records import E2DecodeError, KpmReport, UeId


def _check_version(kpm_version: int) -> Any:
    if kpm_version not in aper.SUPPORTED_VERSIONS:
        raise ValueError(f"E2SM-KPM version {kpm_version!r} is not supported "
                         f"(supported: {', '.join(map(str, aper.SUPPORTED_VERSIONS))})")
    return aper.compiled().v2 if kpm_version == 2 else aper.compiled().v3


def _positive(value: int, what: str, upper: int = 0xFFFFFFFF) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise ValueError(f"{what} must be an integer in 1..{upper}, got {value!r}")
    return value


def encode_event_trigger(period_ms: int, kpm_version: int) -> bytes:
    """E2SM-KPM event trigger definition format 1: report every ``period_ms``."""
    module = _check_version(kpm_version)
    value = {"eventDefinition-formats": ("eventDefinition-Format1", {
        "reportingPeriod": _positive(period_ms, "reporting period (ms)")})}
    with aper.LOCK:
        return aper.encode(module.E2SM_KPM_EventTriggerDefinition, value, "event trigger")


_CELL_RE: Final = re.compile(r"([0-9a-fA-F]{6})-([0-9a-fA-F]{1,9})")


def _cgi(cell: str) -> tuple[str, dict[str, Any]]:
    match = _CELL_RE.fullmatch(cell.strip())
    if match is None:
        raise ValueError(f"cell {cell!r}: expected an NR CGI as <6 hex PLMN>-<NCI hex>")
    return ("nR-CGI", {"pLMNIdentity": bytes.fromhex(match.group(1)),
                       "nRCellIdentity": (int(match.group(2), 16), 36)})


def _format1_definition(measurements: Sequence[str], granularity_ms: int,
                        cell: str | None) -> dict[str, Any]:
    if isinstance(measurements, str) or not measurements:
        raise ValueError("measurements must be a non-empty sequence of names")
    if len(measurements) > aper.MAX_MEASUREMENTS:
        raise ValueError(f"{len(measurements)} measurements, more than {aper.MAX_MEASUREMENTS}")
    for name in measurements:
        if not isinstance(name, str) or not 1 <= len(name) <= 150:
            raise ValueError(f"measurement name {name!r} is not 1..150 characters")
    out: dict[str, Any] = {
        "measInfoList": [{"measType": ("measName", name),
                          "labelInfoList": [{"measLabel": {"noLabel": "true"}}]}
                         for name in measurements],
        "granulPeriod": _positive(granularity_ms, "granularity period (ms)"),
    }
    if cell is not None:
        out["cellGlobalID"] = _cgi(cell)
    return out


def _ueid_value(ue: UeId, kpm_version: int) -> Any:
    """The UEID CHOICE value (v3) or UE-Identity octets (v2) naming ``ue``."""
    ran = bytes.fromhex(ue.ran_ue_id) if ue.ran_ue_id is not None else None
    if kpm_version == 2:
        if ran is None:
            raise ValueError("a v2 UE-Identity is the RAN UE id octets: ran_ue_id is needed")
        return ran
    if ran is not None and len(ran) != 8:
        raise ValueError(f"ran_ue_id {ue.ran_ue_id!r} is not 8 octets")
    if ue.amf_ue_ngap_id is not None and ue.guami is not None:
        try:
            plmn, region, amf_set, pointer = ue.guami.split("-")
            guami = {"pLMNIdentity": bytes.fromhex(plmn), "aMFRegionID": (int(region, 16), 8),
                     "aMFSetID": (int(amf_set, 16), 10), "aMFPointer": (int(pointer, 16), 6)}
        except ValueError:
            raise ValueError(f"GUAMI {ue.guami!r} is not <plmn>-<region>-<set>-<pointer> "
                             "in hex") from None
        gnb: dict[str, Any] = {"amf-UE-NGAP-ID": ue.amf_ue_ngap_id, "guami": guami}
        if ue.gnb_cu_ue_f1ap_id is not None:
            gnb["gNB-CU-UE-F1AP-ID-List"] = [{"gNB-CU-UE-F1AP-ID": ue.gnb_cu_ue_f1ap_id}]
        if ran is not None:
            gnb["ran-UEID"] = ran
        return ("gNB-UEID", gnb)
    if ue.gnb_cu_ue_f1ap_id is not None:
        du: dict[str, Any] = {"gNB-CU-UE-F1AP-ID": ue.gnb_cu_ue_f1ap_id}
        if ran is not None:
            du["ran-UEID"] = ran
        return ("gNB-DU-UEID", du)
    raise ValueError(f"{ue!r}: a KPM UEID needs AMF-UE-NGAP-ID with GUAMI, or an F1AP id")


def encode_action_definition(measurements: Sequence[str], granularity_ms: int,
                             kpm_version: int, *, style: int = 1, cell: str | None = None,
                             ues: Sequence[UeId] = (), dialect: str | None = None) -> bytes:
    """E2SM-KPM action definition of REPORT ``style`` under ``dialect`` (by default the
    standard definitions of ``kpm_version``).

    Style 1: format 1, node or cell level (``cell`` an NR CGI "<plmn hex>-<nci hex>").
    Style 2: format 2, the one UE ``ues[0]``.  Style 3: format 3, each measurement for the UEs
    that have an RSRP ("rSRP present"), reported in indication format 2.
    Style 4 (not v2.00): format 4, every UE that has an RSRP, per-UE reports in indication
    format 3.  Style 5 (not v2.00): format 5, the ``ues`` listed (at least two).  Under
    "onf-v2" (KPM v02.00.03) styles 1-3, in that text's structures (see
    ``_onf_action_definition``).
    """
    _check_version(kpm_version)
    if dialect is None:
        dialect = aper.default_dialect(kpm_version)
    try:
        module = aper.dialect_modules(dialect)[1]
    except E2DecodeError as exc:
        raise ValueError(str(exc)) from None
    v2 = module is aper.compiled().v2
    onf = module is aper.compiled().onf
    info = _format1_definition(measurements, granularity_ms, None if onf else cell)
    rsrp_present = {"testType": ("rSRP", "true"), "testExpr": "present"}
    if onf:
        return _onf_action_definition(module, info, style, cell, ues)
    if style == 1:
        formats: tuple[str, Any] = ("actionDefinition-Format1", info)
    elif style == 2:
        if len(ues) != 1:
            raise ValueError("style 2 (action definition format 2) names exactly one UE")
        formats = ("actionDefinition-Format2", {"ueID": _ueid_value(ues[0], 2 if v2 else 3),
                                                "subscriptInfo": info})
    elif style == 3:
        # v2.00's MatchingCondItem is the CHOICE itself; v3 wraps it with logicalOR.
        choice = ("testCondInfo", rsrp_present)
        cond: list[Any] = [choice] if v2 else [{"matchingCondChoice": choice}]
        fmt3: dict[str, Any] = {
            "measCondList": [{"measType": m["measType"], "matchingCond": cond}
                             for m in info["measInfoList"]],
            "granulPeriod": info["granulPeriod"]}
        if "cellGlobalID" in info:
            fmt3["cellGlobalID"] = info["cellGlobalID"]
        formats = ("actionDefinition-Format3", fmt3)
    elif style in (4, 5) and v2:
        raise ValueError(f"E2SM-KPM v2.00 has no style {style} (action definition format "
                         f"{style}); subscribe with v3 or v4, or style 1")
    elif style == 4:
        formats = ("actionDefinition-Format4", {
            "matchingUeCondList": [{"testCondInfo": rsrp_present}],
            "subscriptionInfo": info})
    elif style == 5:
        if len(ues) < 2:
            raise ValueError("style 5 (action definition format 5) lists at least two UEs")
        if len(ues) > aper.MAX_REPORTS:
            raise ValueError(f"{len(ues)} UEs, more than {aper.MAX_REPORTS}")
        formats = ("actionDefinition-Format5", {
            "matchingUEidList": [{"ueID": _ueid_value(u, 3)} for u in ues],
            "subscriptionInfo": info})
    else:
        raise ValueError(f"REPORT style {style!r} is not supported (1 to 5)")
    value = {"ric-Style-Type": style, "actionDefinition-formats": formats}
    with aper.LOCK:
        return aper.encode(module.E2SM_KPM_ActionDefinition, value, "action definition")


def _onf_action_definition(module: Any, info: Mapping[str, Any], style: int,
                           cell: str | None, ues: Sequence[UeId]) -> bytes:
    """KPM v02.00.03 (ONF, Radisys): styles 1-3 only, the text has no action definition
    format 4 or 5.  The cell is the node's own cell object id (from its KPM node list;
    ``cell`` is passed as that id), the subscription numbered (one per node here: 1), the UE
    of style 2 the opaque UE-Identity (``ran_ue_id``'s octets), and style 3's test condition
    carries a value even for "present" (mandatory in this text: TRUE)."""
    meas = [{"measType": m["measType"]} for m in info["measInfoList"]]
    common = {"cellObjID": cell or "", "granulPeriod": info["granulPeriod"], "subscriptID": 1}
    if style == 1:
        formats: tuple[str, Any] = ("actionDefinition-Format1", {**common, "measInfoList": meas})
    elif style == 2:
        if len(ues) != 1:
            raise ValueError("style 2 (action definition format 2) names exactly one UE")
        formats = ("actionDefinition-Format2", {
            "ueID": _ueid_value(ues[0], 2),
            "subscriptInfo": {**common, "measInfoList": meas}})
    elif style == 3:
        cond = [("testCondInfo", {"testType": ("rSRP", "true"), "testExpr": "present",
                                  "testValue": ("valueBool", True)})]
        formats = ("actionDefinition-Format3", {**common, "measCondList": [
            {"measType": m["measType"], "matchingCond": cond} for m in meas]})
    elif style in (4, 5):
        raise ValueError(f"E2SM-KPM v02.00.03 (onf-v2) has no style {style} (no action "
                         f"definition format {style}); styles 1-3 only")
    else:
        raise ValueError(f"REPORT style {style!r} is not supported (1 to 5)")
    value = {"ric-Style-Type": style, "actionDefinition-formats": formats}
    with aper.LOCK:
        return aper.encode(module.E2SM_KPM_ActionDefinition, value, "action definition")


def _ntp(ms: int, octets: int) -> bytes:
    seconds, rest = divmod(ms, 1000)
    seconds += aper.NTP_UNIX_OFFSET
    if octets == 4:
        return seconds.to_bytes(4, "big")
    # Rounded up, so that the decoder's rounding down gives back the same millisecond.
    return seconds.to_bytes(4, "big") + (((rest << 32) + 999) // 1000).to_bytes(4, "big")


def encode_kpm_indication_header(collect_start_ms: int, kpm_version: int, *,
                                 sender_name: str | None = None,
                                 sender_type: str | None = None,
                                 vendor_name: str | None = None) -> bytes:
    """E2SM-KPM indication header format 1 (the node's side; tests, benches, the twin)."""
    module = _check_version(kpm_version)
    if not isinstance(collect_start_ms, int) or not 0 <= collect_start_ms < (1 << 32) * 1000 \
            - aper.NTP_UNIX_OFFSET * 1000:
        raise ValueError(f"collect start {collect_start_ms!r} ms is not a Unix time in NTP range")
    fmt: dict[str, Any] = {"colletStartTime": _ntp(collect_start_ms, 4 if kpm_version == 2
                                                   else 8)}
    for key, text in (("senderName", sender_name), ("senderType", sender_type),
                      ("vendorName", vendor_name)):
        if text is not None:
            fmt[key] = text
    value = {"indicationHeader-formats": ("indicationHeader-Format1", fmt)}
    with aper.LOCK:
        return aper.encode(module.E2SM_KPM_IndicationHeader, value, "indication header")


def _record(value: float) -> tuple[str, Any]:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0xFFFFFFFF:
        return ("integer", value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"measurement value {value!r} is not finite")
    if number.is_integer() and 0 <= number <= 0xFFFFFFFF:
        return ("integer", int(number))
    mantissa, denominator = number.as_integer_ratio()
    return ("real", (mantissa, 2, -(denominator.bit_length() - 1)))


def _format1_message(values: Mapping[str, float], granularity_ms: int | None) -> dict[str, Any]:
    if not values:
        raise ValueError("a report needs at least one measurement value")
    out: dict[str, Any] = {
        "measData": [{"measRecord": [_record(v) for v in values.values()]}],
        "measInfoList": [{"measType": ("measName", name),
                          "labelInfoList": [{"measLabel": {"noLabel": "true"}}]}
                         for name in values],
    }
    if granularity_ms is not None:
        out["granulPeriod"] = _positive(granularity_ms, "granularity period (ms)")
    return out


def encode_kpm_indication_message(reports: Sequence[KpmReport], kpm_version: int, *,
                                  granularity_ms: int | None = None,
                                  dialect: str | None = None) -> bytes:
    """E2SM-KPM indication message: format 1 for one report without a UE, else format 3
    (``dialect``: as a node of that dialect sends it, e.g. "flexric-v3"; benches, the twin)."""
    module = _check_version(kpm_version)
    if dialect is not None:
        try:
            module = aper.dialect_modules(dialect)[1]
        except E2DecodeError as exc:
            raise ValueError(str(exc)) from None
    if not reports:
        raise ValueError("no reports to encode")
    if len(reports) > aper.MAX_REPORTS:
        raise ValueError(f"{len(reports)} reports, more than {aper.MAX_REPORTS}")
    if len(reports) == 1 and reports[0].ue is None:
        formats: tuple[str, Any] = ("indicationMessage-Format1",
                                    _format1_message(reports[0].values, granularity_ms))
    else:
        if module is aper.compiled().v2:
            raise ValueError("E2SM-KPM v2.00 has no indication message format 3 (per-UE)")
        items = []
        for report in reports:
            if report.ue is None:
                raise ValueError("format 3 reports each name a UE")
            items.append({"ueID": _ueid_value(report.ue, 2 if module is aper.compiled().v2 else 3),
                          "measReport": _format1_message(report.values, granularity_ms)})
        formats = ("indicationMessage-Format3", {"ueMeasReportList": items})
    value = {"indicationMessage-formats": formats}
    with aper.LOCK:
        return aper.encode(module.E2SM_KPM_IndicationMessage, value, "indication message")

