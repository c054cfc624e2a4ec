"""E2SM-KPM in: RAN function descriptions, indication headers and messages, action definitions,
read with the dialect a node speaks (:data:`xapp.adapters.e2.aper.DIALECTS`).  What differs:

* Indication header: v2's TimeStamp is 4 octets (NTP seconds), v3's 8 (NTP seconds and
  fraction); FlexRIC's v02.03 and ONF's v02.00.03 use 4, FlexRIC's v03.00 8.
* UE identity: v2 has an opaque ``UE-Identity`` OCTET STRING (kept as ``UeId.ran_ue_id`` hex);
  v3 has the E2SM common UEID CHOICE (gNB: AMF-UE-NGAP-ID + GUAMI, F1AP ids, RAN UE id; gNB-DU;
  gNB-CU-UP; ng-eNB; en-gNB; eNB), mapped onto :class:`UeId`.
* Indication message format 3 (several UEs) and action definition formats 4 and 5 exist from v3
  on (as extension additions; root alternatives in FlexRIC's text).  A node that says v2 but
  sends format 3 (E2SM-KPM v2.02/v2.03, with the UEID CHOICE) is read with the v3 definitions.
* KPM v04.00 adds only extension additions to v03.00 (compared field by field: docs/e2.md);
  the v3 module carries them, so v4 nodes are read with it in full (a UE's C-RNTI and cell,
  the record value notSatisfied, which is no value).
* v02.00.03 (ONF, Radisys) carries subscriptID and cellObjID, a KPM node list, optional labels.
* Several labels of one measurement become one value (see ``_values``).

Every public function raises :class:`E2DecodeError` only.  Inputs are bounded before parsing
(bytes) and while turning values into records (UEs, measurements).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from xapp.adapters.e2 import aper
from xapp.adapters.e2.records import E2DecodeError, KpmIndication, KpmRanFunction, KpmReport, UeId

#: Largest RANfunction-Description and E2SM-KPM indication header.
MAX_DESCRIPTION_BYTES: Final = 256 * 1024
MAX_HEADER_BYTES: Final = 4 * 1024

#: E2SM-KPM OIDs: 1.3.6.1.4.1.53148.1.<version>.2.2 (e2(1) versionN(N) e2sm(2) kpm(2)).
_KPM_OID_RE: Final = re.compile(r"1\.3\.6\.1\.4\.1\.53148\.1\.([0-9]+)\.2\.2")
_KPM_SHORT_NAME: Final = "ORAN-E2SM-KPM"
#: Short names real nodes use: "ORAN-E2SM-KPM" (the specification, srsRAN, the O-RAN SC
#: simulator) and "ORAN-E2SM-KPM-v03.00" / "-v02.03" (FlexRIC, so OAI's gNB).
_KPM_SHORT_NAME_RE: Final = re.compile(r"ORAN-E2SM-KPM(?:-v([0-9]{2})\.([0-9]{2}))?")


def _kpm_module(kpm_version: int) -> Any:
    if kpm_version == 2:
        return aper.compiled().v2
    if kpm_version in (3, 4):
        return aper.compiled().v3
    raise E2DecodeError(f"E2SM-KPM version {kpm_version!r} is not supported "
                        f"(supported: {', '.join(map(str, aper.SUPPORTED_VERSIONS))})")


# --- E2SM-KPM: RAN function description -------------------------------------------------


def _version_from_oid(oid: str) -> int | None:
    match = _KPM_OID_RE.fullmatch(oid.strip())
    return int(match.group(1)) if match else None


def decode_ran_function_description(data: bytes, ran_function_id: int, oid: str,
                                    revision: int) -> KpmRanFunction:
    """A KPM RANfunction-Description; the KPM version from the OID, else from the contents.

    The OID (E2AP's ranFunctionOID, else the description's own E2SM OID) names the version
    when it is the standard one; a node with a private OID (the O-RAN SC simulator says
    "OID123") is taken as v3 when it offers a style with indication message format 3 or action
    format 4/5 (which v2.00 lacks), as v2 otherwise.
    """
    what = f"RAN function {ran_function_id} description"
    raw = aper.need_bytes(data, MAX_DESCRIPTION_BYTES, what)
    # The description's structure is the same in v2, v3 and FlexRIC's: decode it with v3;
    # v02.00.03 (ONF, Radisys) adds a KPM node list and constrains the style numbers.
    onf = False
    with aper.LOCK:
        try:
            desc = aper.decode(aper.compiled().v3.E2SM_KPM_RANfunction_Description, raw, what)
        except E2DecodeError as exc:
            try:
                desc = aper.decode(aper.compiled().onf.E2SM_KPM_RANfunction_Description, raw, what)
            except E2DecodeError:
                raise exc from None
            onf = True
    name = desc["ranFunction-Name"]
    short = str(name["ranFunction-ShortName"])
    short_match = _KPM_SHORT_NAME_RE.fullmatch(short.strip())
    if short_match is None:
        raise E2DecodeError(f"{what}: short name {short!r} is not {_KPM_SHORT_NAME} "
                            "(optionally with a -vNN.NN suffix)")
    report_styles: dict[int, tuple[str, int, int, int]] = {}
    measurements: dict[int, tuple[str, ...]] = {}
    ids: dict[int, str] = {}
    styles = desc.get("ric-ReportStyle-List", ())
    for style in styles:
        kind = int(style["ric-ReportStyle-Type"])
        report_styles[kind] = (str(style["ric-ReportStyle-Name"]),
                               int(style["ric-ActionFormat-Type"]),
                               int(style["ric-IndicationHeaderFormat-Type"]),
                               int(style["ric-IndicationMessageFormat-Type"]))
        actions = style["measInfo-Action-List"]
        if len(actions) > aper.MAX_MEASUREMENTS:
            raise E2DecodeError(f"{what}: style {kind} lists {len(actions)} measurements, "
                                f"more than {aper.MAX_MEASUREMENTS}")
        measurements[kind] = tuple(str(a["measName"]) for a in actions)
        for a in actions:
            if "measID" in a:
                ids.setdefault(int(a["measID"]), str(a["measName"]))
    per_ue = any(s[1] in (4, 5) or s[3] == 3 for s in report_styles.values())
    version = _version_from_oid(oid)
    if version is None:
        version = _version_from_oid(str(name["ranFunction-E2SM-OID"]))
    if version is None and short_match.group(1) is not None:
        version = int(short_match.group(1))
    if version is None:
        version = 3 if per_ue else 2
    if version not in aper.SUPPORTED_VERSIONS:
        raise E2DecodeError(f"{what}: E2SM-KPM version {version} is not supported "
                            f"(supported: {', '.join(map(str, aper.SUPPORTED_VERSIONS))})")
    # A first guess, checked against the node's first indication (the description reads the
    # same under every dialect): the -vNN.NN suffix is FlexRIC's naming; a node labelled v2
    # that offers per-UE styles (srsRAN: KPM v2 OID, v3-era structures, 8-octet TimeStamp)
    # gets the v3 definitions, which also give it action definition formats 4 and 5.
    if onf:
        dialect = "onf-v2"
    elif short_match.group(1) is not None:
        dialect = "flexric-v2" if version == 2 else "flexric-v3"
    elif version == 2 and per_ue:
        dialect = "v3"
    else:
        dialect = aper.default_dialect(version)
    return KpmRanFunction(
        ran_function_id=ran_function_id,
        oid=oid,
        revision=revision,
        short_name=short,
        kpm_version=version,
        report_styles=report_styles,
        measurements=measurements,
        measurement_ids=ids,
        event_trigger_styles=tuple(int(s["ric-EventTriggerStyle-Type"])
                                   for s in desc.get("ric-EventTriggerStyle-List", ())),
        dialect=dialect,
    )


# --- E2SM-KPM: indications -----------------------------------------------------------------


def _collect_start_ms(stamp: bytes) -> int | None:
    """Unix ms of an NTP TimeStamp (4 octets: seconds; 8: seconds and fraction).

    None before the Unix epoch: no node collects in the past century, and the simulator fills
    the field with ASCII digits.
    """
    seconds = int.from_bytes(stamp[:4], "big")
    fraction = int.from_bytes(stamp[4:8], "big") if len(stamp) == 8 else 0
    if seconds < aper.NTP_UNIX_OFFSET:
        return None
    return (seconds - aper.NTP_UNIX_OFFSET) * 1000 + (fraction * 1000 >> 32)


def _real(value: Any) -> float | None:
    """A pycrate REAL (mantissa, base, exponent) as a finite float, or None."""
    mantissa, base, exponent = value
    if exponent is None:  # pycrate's special values (infinities, NaN) have no exponent
        return None
    if base not in (2, 10) or abs(exponent) > 400 or abs(mantissa) >= 1 << 64:
        return None
    try:
        out = float(mantissa) * float(base) ** exponent
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def _number(record: Any) -> float | None:
    kind, value = record
    if kind == "integer":
        return float(value)
    if kind == "real":
        return _real(value)
    return None  # noValue, notSatisfied (v04.00), or an extension the node added


def _meas_name(meas_type: Any, ids: Mapping[int, str] | None) -> str:
    kind, value = meas_type
    if kind == "measName":
        return str(value)
    if kind == "measID":
        ident = int(value)
        if ids is not None and ident in ids:
            return ids[ident]
        return f"id:{ident}"
    raise E2DecodeError("measurement type is neither a name nor an id")


#: Measurements whose values under several labels are averaged, not summed (the rest are
#: volumes, throughputs, counts: summed over the labels' disjoint subsets).
_AVERAGED: Final = re.compile(r"(?i).*(delay|cqi|rsrp|rsrq|sinr|mcs|bler|ratio|percent|mean)")


def _values(data_items: Sequence[Any], names: Sequence[str]) -> dict[str, float]:
    """Measurement name -> value of the period's latest complete record (latest if none is).

    Record i of a MeasurementDataItem is measurement-and-label i of the list ``names`` was made
    from.  A measurement reported under several labels (per PLMN, slice, 5QI...) is one value:
    the ``noLabel`` record (the total) if ``names`` marks one with a trailing ``"\0"``, else
    the sum over the labels, or their mean for delays and radio qualities (``_AVERAGED``).
    """
    if not data_items:
        return {}
    chosen = data_items[-1]
    for item in reversed(data_items):
        if "incompleteFlag" not in item:
            chosen = item
            break
    records = chosen["measRecord"]
    if len(records) != len(names):
        raise E2DecodeError(f"measurement record has {len(records)} values for "
                            f"{len(names)} measurements")
    totals: dict[str, float] = {}
    parts: dict[str, list[float]] = {}
    for name, record in zip(names, records, strict=True):
        value = _number(record)
        if value is None:
            continue
        if name.endswith("\0"):
            totals[name[:-1]] = value
        else:
            parts.setdefault(name, []).append(value)
    out: dict[str, float] = {}
    for name, values in parts.items():
        if name in totals:
            continue
        total = math.fsum(values)
        out[name] = total / len(values) if len(values) > 1 and _AVERAGED.match(name) else total
    out.update(totals)
    return out


def _format1(fmt: Mapping[str, Any], ids: Mapping[int, str] | None,
             names: Sequence[str] | None) -> tuple[dict[str, float], int | None]:
    info = fmt.get("measInfoList")
    if info is not None:
        if len(info) > aper.MAX_MEASUREMENTS:
            raise E2DecodeError(f"{len(info)} measurements in one report, more than "
                                f"{aper.MAX_MEASUREMENTS}")
        flat = []
        for item in info:
            name = _meas_name(item["measType"], ids)
            labels = item.get("labelInfoList") or ({"measLabel": {"noLabel": "true"}},)
            if len(labels) > aper.MAX_MEASUREMENTS:
                raise E2DecodeError(f"{len(labels)} labels for {name}, more than "
                                    f"{aper.MAX_MEASUREMENTS}")
            if len(labels) == 1:
                flat.append(name)
            else:  # "\0" marks the total among several labels (see _values)
                flat.extend(name + "\0" if "noLabel" in lab["measLabel"] else name
                            for lab in labels)
    elif names is not None:
        flat = list(names)
    else:
        raise E2DecodeError("format 1 report without measInfoList: the subscription's "
                            "measurement names are needed to read it")
    if len(flat) > aper.MAX_MEASUREMENTS:
        raise E2DecodeError(f"{len(flat)} measurement records, more than {aper.MAX_MEASUREMENTS}")
    period = fmt.get("granulPeriod")
    return _values(fmt["measData"], flat), (int(period) if period is not None else None)


def _format2(fmt: Mapping[str, Any], ids: Mapping[int, str] | None
             ) -> tuple[int | None, list[KpmReport]]:
    """Format 2 (style 3): one report per matched UE where the node lists them, else one.

    The record list is read one of two ways, told apart by its length: one record per
    condition (measCondUEidList's item i), the UEs it matched sharing the value; or one record
    per matched UE, conditions in order and their matchingUEidList in order (what srsRAN
    sends).  Without matched UEs, one report for the node or cell.
    """
    conds = fmt["measCondUEidList"]
    if len(conds) > aper.MAX_MEASUREMENTS:
        raise E2DecodeError(f"{len(conds)} conditional measurements, more than "
                            f"{aper.MAX_MEASUREMENTS}")
    names = [_meas_name(c["measType"], ids) for c in conds]
    gp = fmt.get("granulPeriod")
    period = int(gp) if gp is not None else None
    matched: list[list[UeId]] = []
    for cond in conds:
        items = cond.get("matchingUEidList") or ()
        if len(items) > aper.MAX_REPORTS:
            raise E2DecodeError(f"{len(items)} matched UEs, more than {aper.MAX_REPORTS}")
        matched.append([_ue_id(item["ueID"], 3) for item in items])
    total = sum(len(m) for m in matched)
    if total > aper.MAX_REPORTS:
        raise E2DecodeError(f"{total} matched UEs, more than {aper.MAX_REPORTS}")
    data = fmt["measData"]
    width = len(data[-1]["measRecord"]) if data else 0
    per_ue: dict[UeId, dict[str, float]] = {}
    if total and width == total and total != len(conds):
        flat = [(name, ue) for name, ues in zip(names, matched, strict=True) for ue in ues]
        keys = [f"{i}" for i in range(total)]
        by_key = _values(data, keys)
        for key, (name, ue) in zip(keys, flat, strict=True):
            if key in by_key:
                per_ue.setdefault(ue, {})[name] = by_key[key]
        return period, [KpmReport(v, ue=ue) for ue, v in per_ue.items()]
    values = _values(data, names)
    for name, ues in zip(names, matched, strict=True):
        for ue in ues:
            if name in values:
                per_ue.setdefault(ue, {})[name] = values[name]
    if per_ue:
        return period, [KpmReport(v, ue=ue) for ue, v in per_ue.items()]
    return period, [KpmReport(values)]


def _bits(value: tuple[int, int]) -> int:
    return int(value[0])


def _guami(value: Mapping[str, Any]) -> str:
    return (f"{bytes(value['pLMNIdentity']).hex()}-{_bits(value['aMFRegionID']):x}-"
            f"{_bits(value['aMFSetID']):x}-{_bits(value['aMFPointer']):x}")


def _ue_id(value: Any, kpm_version: int) -> UeId:
    """The :class:`UeId` of a v3 UEID CHOICE (or of v2's opaque UE-Identity octets); the
    C-RNTI where a v04.00 node adds its cell-RNTI."""
    if isinstance(value, bytes):
        return UeId(ran_ue_id=value.hex())
    kind, ue = value
    ran = ue.get("ran-UEID")
    ran_hex = bytes(ran).hex() if ran is not None else None
    cell_rnti = ue.get("cell-RNTI")
    rnti = int(cell_rnti["c-RNTI"]) if cell_rnti is not None else None
    if kind == "gNB-UEID":
        f1 = ue.get("gNB-CU-UE-F1AP-ID-List")
        return UeId(amf_ue_ngap_id=int(ue["amf-UE-NGAP-ID"]), guami=_guami(ue["guami"]),
                    gnb_cu_ue_f1ap_id=int(f1[0]["gNB-CU-UE-F1AP-ID"]) if f1 else None,
                    ran_ue_id=ran_hex, c_rnti=rnti)
    if kind == "gNB-DU-UEID":
        return UeId(gnb_cu_ue_f1ap_id=int(ue["gNB-CU-UE-F1AP-ID"]), ran_ue_id=ran_hex,
                    c_rnti=rnti)
    if kind == "gNB-CU-UP-UEID":
        return UeId(ran_ue_id=ran_hex)
    if kind == "ng-eNB-UEID":
        return UeId(amf_ue_ngap_id=int(ue["amf-UE-NGAP-ID"]), guami=_guami(ue["guami"]),
                    c_rnti=rnti)
    if kind == "en-gNB-UEID":
        f1ap = ue.get("gNB-CU-UE-F1AP-ID")
        return UeId(gnb_cu_ue_f1ap_id=int(f1ap) if f1ap is not None else None, ran_ue_id=ran_hex,
                    c_rnti=rnti)
    # ng-eNB-DU and eNB UE ids (W1AP, S1AP ids) name no id the CPE registry keeps; a v04.00
    # node's C-RNTI is one.
    return UeId(c_rnti=rnti)


def _ue_cell(value: Any) -> str | None:
    """The NR cell of a v04.00 UEID's cell-RNTI, as "<plmn hex>-<nci hex>"; None without."""
    if isinstance(value, bytes):
        return None
    cell_rnti = value[1].get("cell-RNTI")
    if cell_rnti is None:
        return None
    kind, cgi = cell_rnti["cell-Global-ID"]
    if kind != "nR-CGI":
        return None
    return f"{bytes(cgi['pLMNIdentity']).hex()}-{_bits(cgi['nRCellIdentity']):09x}"


def decode_kpm_indication(header: bytes, message: bytes, kpm_version: int, *,
                          dialect: str | None = None,
                          measurement_ids: Mapping[int, str] | None = None,
                          measurement_names: Sequence[str] | None = None) -> KpmIndication:
    """An E2SM-KPM indication header and message read with ``dialect`` (see
    :data:`~xapp.adapters.e2.aper.DIALECTS`; by default the standard definitions of
    ``kpm_version``, 2, 3 or 4).

    ``measurement_ids`` names measurements a node reports by measID; ``measurement_names`` is
    the action definition's measurement list, needed only when a node leaves measInfoList out
    of format 1 (its records are then in the action definition's order).
    """
    if dialect is None:
        _kpm_module(kpm_version)  # refuses unsupported versions
        dialect = aper.default_dialect(kpm_version)
    head_module, body_module = aper.dialect_modules(dialect)
    head = aper.need_bytes(header, MAX_HEADER_BYTES, "KPM indication header")
    body = aper.need_bytes(message, aper.MAX_INDICATION_BYTES, "KPM indication message")
    with aper.LOCK:
        hdr = aper.decode(head_module.E2SM_KPM_IndicationHeader, head, "KPM indication header")
        msg = aper.decode(body_module.E2SM_KPM_IndicationMessage, body, "KPM indication message")
        if dialect == "v2" and msg["indicationMessage-formats"][0] not in (
                "indicationMessage-Format1", "indicationMessage-Format2"):
            # v2.02/v2.03 nodes send format 3 (with the UEID CHOICE): v3's definitions.
            msg = aper.decode(aper.compiled().v3.E2SM_KPM_IndicationMessage, body,
                          "KPM indication message")
            kpm_version = 3
    hkind, hval = hdr["indicationHeader-formats"]
    if hkind != "indicationHeader-Format1":
        raise E2DecodeError(f"KPM indication header format {hkind!r} is not supported")
    start = _collect_start_ms(bytes(hval["colletStartTime"]))
    kind, fmt = msg["indicationMessage-formats"]
    reports: list[KpmReport] = []
    if kind == "indicationMessage-Format1":
        number = 1
        values, period = _format1(fmt, measurement_ids, measurement_names)
        reports.append(KpmReport(values))
    elif kind == "indicationMessage-Format2":
        number = 2
        period, reports = _format2(fmt, measurement_ids)
    elif kind == "indicationMessage-Format3":
        number = 3
        ues = fmt["ueMeasReportList"]
        if len(ues) > aper.MAX_REPORTS:
            raise E2DecodeError(f"{len(ues)} UE reports, more than {aper.MAX_REPORTS}")
        period = None
        for ue in ues:
            values, gp3 = _format1(ue["measReport"], measurement_ids, measurement_names)
            period = gp3 if period is None else period
            reports.append(KpmReport(values, ue=_ue_id(ue["ueID"], kpm_version),
                                     cell=_ue_cell(ue["ueID"])))
    else:
        raise E2DecodeError(f"KPM indication message format {kind!r} is not supported")
    sender = hval.get("senderName")
    return KpmIndication(kpm_version=kpm_version, format=number, collect_start_ms=start,
                         granularity_ms=period, sender_name=str(sender) if sender else None,
                         reports=tuple(reports), dialect=dialect)


def detect_kpm_indication(header: bytes, message: bytes, kpm_version: int, *,
                          first: str | None = None,
                          measurement_ids: Mapping[int, str] | None = None,
                          measurement_names: Sequence[str] | None = None) -> KpmIndication:
    """The indication read with the first dialect under which header and message both decode
    with no bytes left over, ``first`` tried first, then
    :data:`~xapp.adapters.e2.aper.DIALECTS` in order.

    The result's ``dialect`` names the one that did; E2DecodeError (each dialect's reason)
    when none does.  A message can fit more than one text only where the texts agree on the
    wire (format 1 without the moved components), so the choice does not change the values.
    """
    order = [first] if first is not None else []
    order += [d for d in aper.DIALECTS if d != first]
    errors: list[str] = []
    for dialect in order:
        try:
            return decode_kpm_indication(header, message, kpm_version, dialect=dialect,
                                         measurement_ids=measurement_ids,
                                         measurement_names=measurement_names)
        except E2DecodeError as exc:
            errors.append(f"{dialect}: {exc}")
    raise E2DecodeError(f"KPM indication decodes under no E2SM-KPM dialect "
                        f"({'; '.join(errors)})"[:1200])


# --- E2SM-KPM: any type under any dialect (tools, interop checks, tests) -----------------


_KINDS: Final = {"header": ("E2SM_KPM_IndicationHeader", 0),
                 "message": ("E2SM_KPM_IndicationMessage", 1),
                 "action_definition": ("E2SM_KPM_ActionDefinition", 1),
                 "ran_function": ("E2SM_KPM_RANfunction_Description", 1)}


def decode_kpm_value(kind: str, data: bytes, *, first: str | None = None) -> tuple[str, Any]:
    """(dialect, decoded value) of one E2SM-KPM ``kind`` ("header", "message",
    "action_definition", "ran_function"): the first dialect (``first``, then
    :data:`~xapp.adapters.e2.aper.DIALECTS`) under which the bytes decode with none left
    over.  The value is pycrate's (dicts, tuples, bytes), for inspection (interop checks,
    tools); the indication path uses :func:`detect_kpm_indication`.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(_KINDS)}")
    type_name, which = _KINDS[kind]
    what = f"KPM {kind.replace('_', ' ')}"
    raw = aper.need_bytes(data, aper.MAX_INDICATION_BYTES, what)
    order = ([first] if first is not None else []) + [d for d in aper.DIALECTS if d != first]
    errors: list[str] = []
    for dialect in order:
        module = aper.dialect_modules(dialect)[which]
        try:
            with aper.LOCK:
                return dialect, aper.decode(getattr(module, type_name), raw, what)
        except E2DecodeError as exc:
            errors.append(f"{dialect}: {exc}")
    raise E2DecodeError(f"{what} decodes under no E2SM-KPM dialect ({'; '.join(errors)})"[:600])


def decode_action_definition(data: bytes, dialect: str | None = None
                             ) -> tuple[int, str, tuple[str, ...], int | None]:
    """(style, format name, measurement names or "id:<n>", granularity ms) of an action
    definition, read with ``dialect`` first, then the others (the node's side of a
    subscription; tests and interop checks)."""
    _, value = decode_kpm_value("action_definition", data, first=dialect)
    kind, fmt = value["actionDefinition-formats"]
    if not kind.startswith("actionDefinition-Format"):
        raise E2DecodeError(f"KPM action definition format {kind!r} is not known")
    info = fmt.get("subscriptInfo") or fmt.get("subscriptionInfo") or fmt
    items = info.get("measInfoList") or info.get("measCondList") or ()
    names = tuple(_meas_name(i["measType"], None) for i in items)
    period = info.get("granulPeriod")
    return int(value["ric-Style-Type"]), str(kind), names, (int(period) if period else None)

