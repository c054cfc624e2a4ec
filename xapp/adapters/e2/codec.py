"""E2AP and E2SM-KPM in and out of APER bytes, with pycrate (pure Python, no native library).

E2AP: pycrate's bundled module (``pycrate_asn1dir.E2AP``, pycrate 0.8.x: the E2AP v3 message
set, RIC Query included), used for the envelope only.  E2SM-KPM: the project's own definitions
(``asn1/*.asn``), compiled by pycrate at build time, one set per dialect (:data:`DIALECTS`):
a node's bytes, not its label, say which it speaks (``docs/e2.md``).  What differs:

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

Every public function raises :class:`E2DecodeError` only (``ValueError`` for bad arguments of
the encoders).  Inputs are bounded before parsing (bytes) and while turning values into records
(UEs, measurements).  pycrate keeps codec state in class attributes and in its module-level
objects, so all pycrate work here runs under one lock.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any, Final

from xapp.adapters.e2.records import (
    E2DecodeError,
    KpmIndication,
    KpmRanFunction,
    KpmReport,
    RicIndication,
    RicRequestId,
    UeId,
)

#: Largest E2AP RIC Indication accepted (a 100-UE format 3 message with four measurements and
#: full UE ids is ~12 KB; 64 KiB also bounds the decoding work of a hostile message).
MAX_INDICATION_BYTES: Final = 64 * 1024
#: Largest E2 Setup Request (every RAN function's description; the simulator's is 1.7 KB).
MAX_SETUP_BYTES: Final = 512 * 1024
#: Largest RANfunction-Description, subscription response, E2SM header.
MAX_DESCRIPTION_BYTES: Final = 256 * 1024
MAX_SUBSCRIPTION_RESPONSE_BYTES: Final = 16 * 1024
MAX_HEADER_BYTES: Final = 4 * 1024
#: Reports (UEs) and measurements per report turned into records; more is refused, not cut.
MAX_REPORTS: Final = 2048
MAX_MEASUREMENTS: Final = 1024
MAX_RAN_FUNCTIONS: Final = 256

SUPPORTED_VERSIONS: Final = (2, 3, 4)

#: The sets of E2SM-KPM definitions ("dialects") a node's bytes are read with, in the order
#: they are tried when a node's bytes do not decode under the one it was taken for:
#: "v3" (KPM v03.00, also v04.00 and the v2.02/v2.03 nodes that send v3-era structures, such
#: as srsRAN's gNB), "v2" (KPM v02.00: 4-octet TimeStamp, opaque UE-Identity), "flexric-v3"
#: and "flexric-v2" (FlexRIC's KPM v03.00/v02.03 model that OAI's gNB links: the v3 text with
#: seven extension markers moved; v02.03's header has the 4-octet TimeStamp), "onf-v2" (KPM
#: v02.00.03 of onos-e2-sm and Radisys: subscriptID, cellObjID, KPM node list, kpmNodeID).
DIALECTS: Final = ("v3", "v2", "flexric-v3", "flexric-v2", "onf-v2")

#: E2SM-KPM OIDs: 1.3.6.1.4.1.53148.1.<version>.2.2 (e2(1) versionN(N) e2sm(2) kpm(2)).
_KPM_OID_RE: Final = re.compile(r"1\.3\.6\.1\.4\.1\.53148\.1\.([0-9]+)\.2\.2")
_KPM_SHORT_NAME: Final = "ORAN-E2SM-KPM"
#: Short names real nodes use: "ORAN-E2SM-KPM" (the specification, srsRAN, the O-RAN SC
#: simulator) and "ORAN-E2SM-KPM-v03.00" / "-v02.03" (FlexRIC, so OAI's gNB).
_KPM_SHORT_NAME_RE: Final = re.compile(r"ORAN-E2SM-KPM(?:-v([0-9]{2})\.([0-9]{2}))?")

# E2AP procedure codes and protocol IE ids (E2AP clause 9.3.6/9.3.7).
_PROC_E2SETUP: Final = 1
_PROC_RIC_SUBSCRIPTION: Final = 8
_PROC_RIC_INDICATION: Final = 5
_IE_RAN_FUNCTION_ID: Final = 5
_IE_RAN_FUNCTIONS_ADDED: Final = 10
_IE_RIC_ACTION_ID: Final = 15
_IE_INDICATION_HEADER: Final = 25
_IE_INDICATION_MESSAGE: Final = 26
_IE_INDICATION_SN: Final = 27
_IE_INDICATION_TYPE: Final = 28
_IE_RIC_REQUEST_ID: Final = 29
_IE_GLOBAL_E2NODE_ID: Final = 3

#: Seconds between the NTP epoch (1900) and the Unix epoch (1970).
_NTP_UNIX_OFFSET: Final = 2_208_988_800

_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Codecs:
    pdu: Any  # E2AP-PDU
    v2: Any  # E2SM-KPM-v2-IEs module class
    v3: Any
    flexric: Any  # E2SM-KPM-FlexRIC-IEs: v3 with seven extension markers moved (see its .asn)
    onf: Any  # E2SM-KPM-ONF-v2-IEs: KPM v02.00.03 of the ONF/Radisys lineage


@cache
def _codecs() -> _Codecs:
    """Load the compiled modules once (about 0.3 s, see the bench); later calls are free."""
    from pycrate_asn1dir import E2AP

    from xapp.adapters.e2.asn1 import _kpm_flexric, _kpm_onf_v2, _kpm_v2, _kpm_v3

    v2: ModuleType = _kpm_v2
    v3: ModuleType = _kpm_v3
    flexric: ModuleType = _kpm_flexric
    onf: ModuleType = _kpm_onf_v2
    codecs = _Codecs(E2AP.E2AP_PDU_Descriptions.E2AP_PDU, v2.E2SM_KPM_v2_IEs,
                     v3.E2SM_KPM_v3_IEs, flexric.E2SM_KPM_FlexRIC_IEs,
                     onf.E2SM_KPM_ONF_v2_IEs)
    # from_aper re-walks the whole decoded value to check constraints the APER structure already
    # enforced (it costs two thirds of a format 3 decode).  Only the KPM modules' objects skip
    # it (instance attributes, nested ones included: extension additions such as format 3 are
    # open types, decoded by their own from_aper); the values used are range-checked below.
    codecs.pdu._SAFE_BND = False
    for module in (codecs.v2, codecs.v3, codecs.flexric, codecs.onf):
        for name in module._all_:
            _skip_bound_checks(name)
    return codecs


def _skip_bound_checks(obj: Any) -> None:
    stack, seen = [obj], set()
    while stack:
        item = stack.pop()
        if id(item) in seen or not hasattr(item, "_SAFE_BND"):
            continue
        seen.add(id(item))
        item._SAFE_BND = False
        cont: Any = getattr(item, "_cont", None)
        if cont is None:
            continue
        if callable(getattr(cont, "values", None)):  # SEQUENCE, CHOICE: an ASN1Dict
            stack.extend(cont.values())
        else:  # SEQUENCE OF: the component object
            stack.append(cont)


def warm_up() -> None:
    """Load the codecs now rather than at the first message (start-up, health checks)."""
    _codecs()


def _kpm_module(kpm_version: int) -> Any:
    if kpm_version == 2:
        return _codecs().v2
    if kpm_version in (3, 4):
        return _codecs().v3
    raise E2DecodeError(f"E2SM-KPM version {kpm_version!r} is not supported "
                        f"(supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")


def default_dialect(kpm_version: int) -> str:
    """The dialect a node of ``kpm_version`` is read with until its bytes say otherwise."""
    return "v2" if kpm_version == 2 else "v3"


def _dialect_modules(dialect: str) -> tuple[Any, Any]:
    """(indication header module, message/action definition module) of ``dialect``."""
    c = _codecs()
    if dialect == "v3":
        return c.v3, c.v3
    if dialect == "v2":
        return c.v2, c.v2
    if dialect == "flexric-v3":
        return c.v3, c.flexric
    if dialect == "flexric-v2":
        return c.v2, c.flexric
    if dialect == "onf-v2":
        return c.onf, c.onf
    raise E2DecodeError(f"E2SM-KPM dialect {dialect!r} is not known "
                        f"(known: {', '.join(DIALECTS)})")


def _decode(obj: Any, data: bytes, what: str) -> Any:
    """``obj`` decoded from ``data`` (APER), the caller holding ``_LOCK``; E2DecodeError if not."""
    from pycrate_core.charpy import Charpy

    char = Charpy(data)
    try:
        obj.from_aper(char)
        value = obj.get_val()
    except Exception as exc:  # pycrate raises many types (its own, IndexError, struct.error...)
        raise E2DecodeError(f"{what}: not valid APER ({type(exc).__name__}: {exc})"[:300]) from None
    # Bytes left over mean the message is not of this type (often: the wrong KPM version).
    left = char.len_bit() // 8
    if left:
        raise E2DecodeError(f"{what}: {left} bytes left over after the APER value")
    return value


def _need_bytes(data: object, limit: int, what: str) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise E2DecodeError(f"{what}: expected bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise E2DecodeError(f"{what}: empty")
    if len(data) > limit:
        raise E2DecodeError(f"{what}: {len(data)} bytes, more than the {limit} accepted")
    return bytes(data)


# --- E2AP ----------------------------------------------------------------------------------


def _ies(pdu: Any, kind: str, procedure: int, value_name: str, what: str) -> dict[int, Any]:
    """The protocol IEs of an E2AP PDU of the expected kind, by IE id (first occurrence)."""
    if not (isinstance(pdu, tuple) and len(pdu) == 2 and pdu[0] == kind):
        raise E2DecodeError(f"{what}: E2AP PDU is a {pdu[0] if isinstance(pdu, tuple) else '?'}, "
                            f"expected a {kind}")
    body = pdu[1]
    if body.get("procedureCode") != procedure:
        raise E2DecodeError(f"{what}: E2AP procedure code {body.get('procedureCode')}, "
                            f"expected {procedure}")
    value = body.get("value")
    if not (isinstance(value, tuple) and value[0] == value_name):
        raise E2DecodeError(f"{what}: E2AP message is not a {value_name}")
    out: dict[int, Any] = {}
    for ie in value[1].get("protocolIEs", ()):
        out.setdefault(ie["id"], ie["value"][1])
    return out


def _mandatory(ies: Mapping[int, Any], ie: int, name: str, what: str) -> Any:
    if ie not in ies:
        raise E2DecodeError(f"{what}: mandatory IE {name} (id {ie}) missing")
    return ies[ie]


def decode_ric_indication(data: bytes) -> RicIndication:
    """An E2AP RIC Indication, its E2SM header and message left encoded."""
    what = "RIC indication"
    raw = _need_bytes(data, MAX_INDICATION_BYTES, what)
    with _LOCK:
        pdu = _decode(_codecs().pdu, raw, what)
    ies = _ies(pdu, "initiatingMessage", _PROC_RIC_INDICATION, "RICindication", what)
    req = _mandatory(ies, _IE_RIC_REQUEST_ID, "RICrequestID", what)
    kind = _mandatory(ies, _IE_INDICATION_TYPE, "RICindicationType", what)
    if kind not in ("report", "insert"):
        raise E2DecodeError(f"{what}: indication type {kind!r} is not report or insert")
    return RicIndication(
        request=RicRequestId(int(req["ricRequestorID"]), int(req["ricInstanceID"])),
        ran_function_id=int(_mandatory(ies, _IE_RAN_FUNCTION_ID, "RANfunctionID", what)),
        action_id=int(_mandatory(ies, _IE_RIC_ACTION_ID, "RICactionID", what)),
        sequence_number=int(ies[_IE_INDICATION_SN]) if _IE_INDICATION_SN in ies else None,
        indication_type=kind,
        header=bytes(_mandatory(ies, _IE_INDICATION_HEADER, "RICindicationHeader", what)),
        message=bytes(_mandatory(ies, _IE_INDICATION_MESSAGE, "RICindicationMessage", what)),
    )


def decode_subscription_response(data: bytes) -> tuple[RicRequestId, int]:
    """(RIC request id, RAN function id) of an E2AP RIC Subscription Response."""
    what = "RIC subscription response"
    raw = _need_bytes(data, MAX_SUBSCRIPTION_RESPONSE_BYTES, what)
    with _LOCK:
        pdu = _decode(_codecs().pdu, raw, what)
    ies = _ies(pdu, "successfulOutcome", _PROC_RIC_SUBSCRIPTION, "RICsubscriptionResponse", what)
    req = _mandatory(ies, _IE_RIC_REQUEST_ID, "RICrequestID", what)
    ran_function = _mandatory(ies, _IE_RAN_FUNCTION_ID, "RANfunctionID", what)
    return RicRequestId(int(req["ricRequestorID"]), int(req["ricInstanceID"])), int(ran_function)


def _global_node_id(value: Any) -> str:
    """``<plmn hex>-<node id hex>`` of a GlobalE2node-ID, whatever the node type."""
    plmn: bytes | None = None
    node: tuple[int, int] | None = None
    stack = [value]
    while stack and (plmn is None or node is None):
        item = stack.pop(0)
        if isinstance(item, bytes) and len(item) == 3 and plmn is None:
            plmn = item
        elif (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int)
              and isinstance(item[1], int) and node is None):
            node = item
        elif isinstance(item, tuple):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    if plmn is None or node is None:
        raise E2DecodeError("E2 setup request: GlobalE2node-ID without PLMN and node id")
    number, bits = node
    return f"{plmn.hex()}-{number:0{max(1, (bits + 3) // 4)}x}"


def decode_e2_setup_request(data: bytes) -> tuple[str, list[KpmRanFunction]]:
    """(global E2 node id, its KPM RAN functions) of an E2 Setup Request.

    RAN functions that are not E2SM-KPM of a supported version (RC, NI...) are left out.
    """
    what = "E2 setup request"
    raw = _need_bytes(data, MAX_SETUP_BYTES, what)
    with _LOCK:
        pdu = _decode(_codecs().pdu, raw, what)
    ies = _ies(pdu, "initiatingMessage", _PROC_E2SETUP, "E2setupRequest", what)
    node = _global_node_id(_mandatory(ies, _IE_GLOBAL_E2NODE_ID, "GlobalE2node-ID", what)[1])
    items = _mandatory(ies, _IE_RAN_FUNCTIONS_ADDED, "RANfunctions-List", what)
    if len(items) > MAX_RAN_FUNCTIONS:
        raise E2DecodeError(f"{what}: {len(items)} RAN functions, more than {MAX_RAN_FUNCTIONS}")
    out = []
    for item in items:
        fn = item["value"][1]
        try:
            out.append(decode_ran_function_description(
                fn["ranFunctionDefinition"], int(fn["ranFunctionID"]),
                str(fn["ranFunctionOID"]), int(fn["ranFunctionRevision"])))
        except E2DecodeError:
            continue
    return node, out


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
    raw = _need_bytes(data, MAX_DESCRIPTION_BYTES, what)
    # The description's structure is the same in v2, v3 and FlexRIC's: decode it with v3;
    # v02.00.03 (ONF, Radisys) adds a KPM node list and constrains the style numbers.
    onf = False
    with _LOCK:
        try:
            desc = _decode(_codecs().v3.E2SM_KPM_RANfunction_Description, raw, what)
        except E2DecodeError as exc:
            try:
                desc = _decode(_codecs().onf.E2SM_KPM_RANfunction_Description, raw, what)
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
        if len(actions) > MAX_MEASUREMENTS:
            raise E2DecodeError(f"{what}: style {kind} lists {len(actions)} measurements, "
                                f"more than {MAX_MEASUREMENTS}")
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
    if version not in SUPPORTED_VERSIONS:
        raise E2DecodeError(f"{what}: E2SM-KPM version {version} is not supported "
                            f"(supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
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
        dialect = default_dialect(version)
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
    if seconds < _NTP_UNIX_OFFSET:
        return None
    return (seconds - _NTP_UNIX_OFFSET) * 1000 + (fraction * 1000 >> 32)


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
        if len(info) > MAX_MEASUREMENTS:
            raise E2DecodeError(f"{len(info)} measurements in one report, more than "
                                f"{MAX_MEASUREMENTS}")
        flat = []
        for item in info:
            name = _meas_name(item["measType"], ids)
            labels = item.get("labelInfoList") or ({"measLabel": {"noLabel": "true"}},)
            if len(labels) > MAX_MEASUREMENTS:
                raise E2DecodeError(f"{len(labels)} labels for {name}, more than "
                                    f"{MAX_MEASUREMENTS}")
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
    if len(flat) > MAX_MEASUREMENTS:
        raise E2DecodeError(f"{len(flat)} measurement records, more than {MAX_MEASUREMENTS}")
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
    if len(conds) > MAX_MEASUREMENTS:
        raise E2DecodeError(f"{len(conds)} conditional measurements, more than "
                            f"{MAX_MEASUREMENTS}")
    names = [_meas_name(c["measType"], ids) for c in conds]
    gp = fmt.get("granulPeriod")
    period = int(gp) if gp is not None else None
    matched: list[list[UeId]] = []
    for cond in conds:
        items = cond.get("matchingUEidList") or ()
        if len(items) > MAX_REPORTS:
            raise E2DecodeError(f"{len(items)} matched UEs, more than {MAX_REPORTS}")
        matched.append([_ue_id(item["ueID"], 3) for item in items])
    total = sum(len(m) for m in matched)
    if total > MAX_REPORTS:
        raise E2DecodeError(f"{total} matched UEs, more than {MAX_REPORTS}")
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
    """An E2SM-KPM indication header and message read with ``dialect`` (see :data:`DIALECTS`;
    by default the standard definitions of ``kpm_version``, 2, 3 or 4).

    ``measurement_ids`` names measurements a node reports by measID; ``measurement_names`` is
    the action definition's measurement list, needed only when a node leaves measInfoList out
    of format 1 (its records are then in the action definition's order).
    """
    if dialect is None:
        _kpm_module(kpm_version)  # refuses unsupported versions
        dialect = default_dialect(kpm_version)
    head_module, body_module = _dialect_modules(dialect)
    head = _need_bytes(header, MAX_HEADER_BYTES, "KPM indication header")
    body = _need_bytes(message, MAX_INDICATION_BYTES, "KPM indication message")
    with _LOCK:
        hdr = _decode(head_module.E2SM_KPM_IndicationHeader, head, "KPM indication header")
        msg = _decode(body_module.E2SM_KPM_IndicationMessage, body, "KPM indication message")
        if dialect == "v2" and msg["indicationMessage-formats"][0] not in (
                "indicationMessage-Format1", "indicationMessage-Format2"):
            # v2.02/v2.03 nodes send format 3 (with the UEID CHOICE): v3's definitions.
            msg = _decode(_codecs().v3.E2SM_KPM_IndicationMessage, body,
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
        if len(ues) > MAX_REPORTS:
            raise E2DecodeError(f"{len(ues)} UE reports, more than {MAX_REPORTS}")
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
    with no bytes left over, ``first`` tried first, then :data:`DIALECTS` in order.

    The result's ``dialect`` names the one that did; E2DecodeError (each dialect's reason)
    when none does.  A message can fit more than one text only where the texts agree on the
    wire (format 1 without the moved components), so the choice does not change the values.
    """
    order = [first] if first is not None else []
    order += [d for d in DIALECTS if d != first]
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


# --- E2SM-KPM: encoders (subscriptions; indications for tests, benches and the twin) --------


def _check_version(kpm_version: int) -> Any:
    if kpm_version not in SUPPORTED_VERSIONS:
        raise ValueError(f"E2SM-KPM version {kpm_version!r} is not supported "
                         f"(supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
    return _codecs().v2 if kpm_version == 2 else _codecs().v3


def _encode(obj: Any, value: Any, what: str) -> bytes:
    try:
        obj.set_val(value)
        return bytes(obj.to_aper())
    except Exception as exc:
        raise ValueError(f"{what}: cannot be encoded ({type(exc).__name__}: {exc})"[:300]) from None


def _positive(value: int, what: str, upper: int = 0xFFFFFFFF) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise ValueError(f"{what} must be an integer in 1..{upper}, got {value!r}")
    return value


def encode_event_trigger(period_ms: int, kpm_version: int) -> bytes:
    """E2SM-KPM event trigger definition format 1: report every ``period_ms``."""
    module = _check_version(kpm_version)
    value = {"eventDefinition-formats": ("eventDefinition-Format1", {
        "reportingPeriod": _positive(period_ms, "reporting period (ms)")})}
    with _LOCK:
        return _encode(module.E2SM_KPM_EventTriggerDefinition, value, "event trigger")


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
    if len(measurements) > MAX_MEASUREMENTS:
        raise ValueError(f"{len(measurements)} measurements, more than {MAX_MEASUREMENTS}")
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
        dialect = default_dialect(kpm_version)
    try:
        module = _dialect_modules(dialect)[1]
    except E2DecodeError as exc:
        raise ValueError(str(exc)) from None
    v2 = module is _codecs().v2
    onf = module is _codecs().onf
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
        if len(ues) > MAX_REPORTS:
            raise ValueError(f"{len(ues)} UEs, more than {MAX_REPORTS}")
        formats = ("actionDefinition-Format5", {
            "matchingUEidList": [{"ueID": _ueid_value(u, 3)} for u in ues],
            "subscriptionInfo": info})
    else:
        raise ValueError(f"REPORT style {style!r} is not supported (1 to 5)")
    value = {"ric-Style-Type": style, "actionDefinition-formats": formats}
    with _LOCK:
        return _encode(module.E2SM_KPM_ActionDefinition, value, "action definition")


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
    with _LOCK:
        return _encode(module.E2SM_KPM_ActionDefinition, value, "action definition")


_KINDS: Final = {"header": ("E2SM_KPM_IndicationHeader", 0),
                 "message": ("E2SM_KPM_IndicationMessage", 1),
                 "action_definition": ("E2SM_KPM_ActionDefinition", 1),
                 "ran_function": ("E2SM_KPM_RANfunction_Description", 1)}


def decode_kpm_value(kind: str, data: bytes, *, first: str | None = None) -> tuple[str, Any]:
    """(dialect, decoded value) of one E2SM-KPM ``kind`` ("header", "message",
    "action_definition", "ran_function"): the first dialect (``first``, then
    :data:`DIALECTS`) under which the bytes decode with none left over.  The value is
    pycrate's (dicts, tuples, bytes), for inspection (interop checks, tools); the indication
    path uses :func:`detect_kpm_indication`.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(_KINDS)}")
    type_name, which = _KINDS[kind]
    what = f"KPM {kind.replace('_', ' ')}"
    raw = _need_bytes(data, MAX_INDICATION_BYTES, what)
    order = ([first] if first is not None else []) + [d for d in DIALECTS if d != first]
    errors: list[str] = []
    for dialect in order:
        module = _dialect_modules(dialect)[which]
        try:
            with _LOCK:
                return dialect, _decode(getattr(module, type_name), raw, what)
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


def _ntp(ms: int, octets: int) -> bytes:
    seconds, rest = divmod(ms, 1000)
    seconds += _NTP_UNIX_OFFSET
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
            - _NTP_UNIX_OFFSET * 1000:
        raise ValueError(f"collect start {collect_start_ms!r} ms is not a Unix time in NTP range")
    fmt: dict[str, Any] = {"colletStartTime": _ntp(collect_start_ms, 4 if kpm_version == 2
                                                   else 8)}
    for key, text in (("senderName", sender_name), ("senderType", sender_type),
                      ("vendorName", vendor_name)):
        if text is not None:
            fmt[key] = text
    value = {"indicationHeader-formats": ("indicationHeader-Format1", fmt)}
    with _LOCK:
        return _encode(module.E2SM_KPM_IndicationHeader, value, "indication header")


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
            module = _dialect_modules(dialect)[1]
        except E2DecodeError as exc:
            raise ValueError(str(exc)) from None
    if not reports:
        raise ValueError("no reports to encode")
    if len(reports) > MAX_REPORTS:
        raise ValueError(f"{len(reports)} reports, more than {MAX_REPORTS}")
    if len(reports) == 1 and reports[0].ue is None:
        formats: tuple[str, Any] = ("indicationMessage-Format1",
                                    _format1_message(reports[0].values, granularity_ms))
    else:
        if module is _codecs().v2:
            raise ValueError("E2SM-KPM v2.00 has no indication message format 3 (per-UE)")
        items = []
        for report in reports:
            if report.ue is None:
                raise ValueError("format 3 reports each name a UE")
            items.append({"ueID": _ueid_value(report.ue, 2 if module is _codecs().v2 else 3),
                          "measReport": _format1_message(report.values, granularity_ms)})
        formats = ("indicationMessage-Format3", {"ueMeasReportList": items})
    value = {"indicationMessage-formats": formats}
    with _LOCK:
        return _encode(module.E2SM_KPM_IndicationMessage, value, "indication message")


def encode_ric_indication(indication: RicIndication) -> bytes:
    """An E2AP RIC Indication PDU carrying ``indication``'s E2SM header and message."""
    kind = indication.indication_type
    if kind not in ("report", "insert"):
        raise ValueError(f"indication type {kind!r} is not report or insert")
    ies: list[dict[str, Any]] = [
        {"id": _IE_RIC_REQUEST_ID, "criticality": "reject", "value": ("RICrequestID", {
            "ricRequestorID": indication.request.requestor,
            "ricInstanceID": indication.request.instance})},
        {"id": _IE_RAN_FUNCTION_ID, "criticality": "reject",
         "value": ("RANfunctionID", indication.ran_function_id)},
        {"id": _IE_RIC_ACTION_ID, "criticality": "reject",
         "value": ("RICactionID", indication.action_id)},
    ]
    if indication.sequence_number is not None:
        ies.append({"id": _IE_INDICATION_SN, "criticality": "reject",
                    "value": ("RICindicationSN", indication.sequence_number)})
    ies += [
        {"id": _IE_INDICATION_TYPE, "criticality": "reject", "value": ("RICindicationType", kind)},
        {"id": _IE_INDICATION_HEADER, "criticality": "reject",
         "value": ("RICindicationHeader", bytes(indication.header))},
        {"id": _IE_INDICATION_MESSAGE, "criticality": "reject",
         "value": ("RICindicationMessage", bytes(indication.message))},
    ]
    value = ("initiatingMessage", {"procedureCode": _PROC_RIC_INDICATION, "criticality": "ignore",
                                   "value": ("RICindication", {"protocolIEs": ies})})
    with _LOCK:
        return _encode(_codecs().pdu, value, "RIC indication")
