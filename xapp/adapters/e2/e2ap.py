"""The E2AP envelope: RIC Indication, RIC Subscription Response and E2 Setup Request in, RIC
Indication out, with pycrate's bundled E2AP module (:mod:`xapp.adapters.e2.aper`).

The E2SM contents are left encoded (an indication's header and message) or handed to
:mod:`xapp.adapters.e2.kpm_decode` (an E2 Setup's RAN function descriptions).  The decoders
raise :class:`E2DecodeError` only, the encoder ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from xapp.adapters.e2 import aper, kpm_decode
from xapp.adapters.e2.records import E2DecodeError, KpmRanFunction, RicIndication, RicRequestId

#: Largest E2 Setup Request (every RAN function's description; the simulator's is 1.7 KB).
MAX_SETUP_BYTES: Final = 512 * 1024
#: Largest RIC Subscription Response.
MAX_SUBSCRIPTION_RESPONSE_BYTES: Final = 16 * 1024
#: RAN functions of one E2 Setup Request turned into records; more is refused, not cut.
MAX_RAN_FUNCTIONS: Final = 256

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
    raw = aper.need_bytes(data, aper.MAX_INDICATION_BYTES, what)
    with aper.LOCK:
        pdu = aper.decode(aper.compiled().pdu, raw, what)
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
    raw = aper.need_bytes(data, MAX_SUBSCRIPTION_RESPONSE_BYTES, what)
    with aper.LOCK:
        pdu = aper.decode(aper.compiled().pdu, raw, what)
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
    raw = aper.need_bytes(data, MAX_SETUP_BYTES, what)
    with aper.LOCK:
        pdu = aper.decode(aper.compiled().pdu, raw, what)
    ies = _ies(pdu, "initiatingMessage", _PROC_E2SETUP, "E2setupRequest", what)
    node = _global_node_id(_mandatory(ies, _IE_GLOBAL_E2NODE_ID, "GlobalE2node-ID", what)[1])
    items = _mandatory(ies, _IE_RAN_FUNCTIONS_ADDED, "RANfunctions-List", what)
    if len(items) > MAX_RAN_FUNCTIONS:
        raise E2DecodeError(f"{what}: {len(items)} RAN functions, more than {MAX_RAN_FUNCTIONS}")
    out = []
    for item in items:
        fn = item["value"][1]
        try:
            out.append(kpm_decode.decode_ran_function_description(
                fn["ranFunctionDefinition"], int(fn["ranFunctionID"]),
                str(fn["ranFunctionOID"]), int(fn["ranFunctionRevision"])))
        except E2DecodeError:
            continue
    return node, out


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
    with aper.LOCK:
        return aper.encode(aper.compiled().pdu, value, "RIC indication")
