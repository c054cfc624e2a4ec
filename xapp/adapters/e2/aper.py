"""APER in and out with pycrate (pure Python, no native library): what the E2AP envelope and the
E2SM-KPM decoder and encoder share.

E2AP: pycrate's bundled module (``pycrate_asn1dir.E2AP``, pycrate 0.8.x: the E2AP v3 message
set, RIC Query included), used for the envelope only (:mod:`xapp.adapters.e2.e2ap`).  E2SM-KPM:
the project's own definitions (``asn1/*.asn``), compiled by pycrate at build time, one set per
dialect (:data:`DIALECTS`): a node's bytes, not its label, say which it speaks (``docs/e2.md``;
:mod:`xapp.adapters.e2.kpm_decode`, :mod:`xapp.adapters.e2.kpm_encode`).

Inputs are bounded before parsing (bytes; :func:`need_bytes`) and while turning values into
records (:data:`MAX_REPORTS`, :data:`MAX_MEASUREMENTS`).  pycrate keeps codec state in class
attributes and in its module-level objects, so all pycrate work runs under one lock
(:data:`LOCK`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any, Final

from xapp.adapters.e2.records import E2DecodeError

#: Largest E2AP RIC Indication accepted (a 100-UE format 3 message with four measurements and
#: full UE ids is ~12 KB; 64 KiB also bounds the decoding work of a hostile message).
MAX_INDICATION_BYTES: Final = 64 * 1024

#: Reports (UEs) and measurements per report turned into records; more is refused, not cut.
MAX_REPORTS: Final = 2048
MAX_MEASUREMENTS: Final = 1024

SUPPORTED_VERSIONS: Final = (2, 3, 4)

#: The sets of E2SM-KPM definitions ("dialects") a node's bytes are read with, in the order
#: they are tried when a node's bytes do not decode under the one it was taken for:
#: "v3" (KPM v03.00, also v04.00 and the v2.02/v2.03 nodes that send v3-era structures, such
#: as srsRAN's gNB), "v2" (KPM v02.00: 4-octet TimeStamp, opaque UE-Identity), "flexric-v3"
#: and "flexric-v2" (FlexRIC's KPM v03.00/v02.03 model that OAI's gNB links: the v3 text with
#: seven extension markers moved; v02.03's header has the 4-octet TimeStamp), "onf-v2" (KPM
#: v02.00.03 of onos-e2-sm and Radisys: subscriptID, cellObjID, KPM node list, kpmNodeID).
DIALECTS: Final = ("v3", "v2", "flexric-v3", "flexric-v2", "onf-v2")

#: Seconds between the NTP epoch (1900) and the Unix epoch (1970): KPM's TimeStamp is NTP.
NTP_UNIX_OFFSET: Final = 2_208_988_800

LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Compiled:
    """The compiled modules: E2AP's PDU object and one E2SM-KPM module class per text."""

    pdu: Any  # E2AP-PDU
    v2: Any  # E2SM-KPM-v2-IEs module class
    v3: Any
    flexric: Any  # E2SM-KPM-FlexRIC-IEs: v3 with seven extension markers moved (see its .asn)
    onf: Any  # E2SM-KPM-ONF-v2-IEs: KPM v02.00.03 of the ONF/Radisys lineage


@cache
def compiled() -> Compiled:
    """Load the compiled modules once (about 0.3 s, see the bench); later calls are free."""
    from pycrate_asn1dir import E2AP

    from xapp.adapters.e2.asn1 import _kpm_flexric, _kpm_onf_v2, _kpm_v2, _kpm_v3

    v2: ModuleType = _kpm_v2
    v3: ModuleType = _kpm_v3
    flexric: ModuleType = _kpm_flexric
    onf: ModuleType = _kpm_onf_v2
    codecs = Compiled(E2AP.E2AP_PDU_Descriptions.E2AP_PDU, v2.E2SM_KPM_v2_IEs,
                      v3.E2SM_KPM_v3_IEs, flexric.E2SM_KPM_FlexRIC_IEs,
                      onf.E2SM_KPM_ONF_v2_IEs)
    # from_aper re-walks the whole decoded value to check constraints the APER structure already
    # enforced (it costs two thirds of a format 3 decode).  Only the KPM modules' objects skip
    # it (instance attributes, nested ones included: extension additions such as format 3 are
    # open types, decoded by their own from_aper); the values used are range-checked by
    # the decoders (kpm_decode).
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
    compiled()


def default_dialect(kpm_version: int) -> str:
    """The dialect a node of ``kpm_version`` is read with until its bytes say otherwise."""
    return "v2" if kpm_version == 2 else "v3"


def dialect_modules(dialect: str) -> tuple[Any, Any]:
    """(indication header module, message/action definition module) of ``dialect``."""
    c = compiled()
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


def decode(obj: Any, data: bytes, what: str) -> Any:
    """``obj`` decoded from ``data`` (APER), the caller holding :data:`LOCK`; E2DecodeError if
    not."""
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


def need_bytes(data: object, limit: int, what: str) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise E2DecodeError(f"{what}: expected bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise E2DecodeError(f"{what}: empty")
    if len(data) > limit:
        raise E2DecodeError(f"{what}: {len(data)} bytes, more than the {limit} accepted")
    return bytes(data)


def encode(obj: Any, value: Any, what: str) -> bytes:
    try:
        obj.set_val(value)
        return bytes(obj.to_aper())
    except Exception as exc:
        raise ValueError(f"{what}: cannot be encoded ({type(exc).__name__}: {exc})"[:300]) from None

