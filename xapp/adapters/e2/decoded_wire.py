"""A :class:`Decoded` as JSON: the decoder process's answer, and the main process's check of it.

The main process parses what the decoder process sends with ``json`` (no ``pickle`` of
anything a node sent), NaN and Infinity refused, and checks every field's type, that the
outcome and dialects are ones it knows and that each value is a finite number, before it
builds a record: a malformed answer is a :class:`WireError`, nothing else.
"""

from __future__ import annotations

import json
import math
from typing import Any

from xapp.adapters.e2 import aper
from xapp.adapters.e2.indication_decoder import CHECKS, DECODE_OUTCOMES, Decoded
from xapp.adapters.e2.records import KpmIndication, KpmReport, RicRequestId, UeId


def _ue_wire(ue: UeId | None) -> list[Any] | None:
    if ue is None:
        return None
    return [ue.amf_ue_ngap_id, ue.guami, ue.gnb_cu_ue_f1ap_id, ue.ran_ue_id, ue.c_rnti]


def encode_decoded(d: Decoded) -> bytes:
    """``d`` as compact JSON (the decoder process's answer).  Reports are columnar: each
    distinct list of measurement names once, each report ``[list index, values, UE, cell]``
    (every UE of a format 3 indication has the same names)."""
    kpm = d.kpm
    wire_kpm = None
    if kpm is not None:
        tables: dict[tuple[str, ...], int] = {}
        reports = []
        for r in kpm.reports:
            names = tuple(r.values)
            index = tables.setdefault(names, len(tables))
            reports.append([index, list(r.values.values()), _ue_wire(r.ue), r.cell])
        wire_kpm = [kpm.kpm_version, kpm.format, kpm.collect_start_ms, kpm.granularity_ms,
                    kpm.sender_name, kpm.dialect, list(tables), reports]
    doc: list[Any] = [
        d.outcome, d.detail,
        None if d.request is None else [d.request.requestor, d.request.instance],
        d.ran_function_id, d.meid, d.node, d.known, d.check, wire_kpm]
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


class WireError(ValueError):
    """An answer of the decoder process that is not a well-formed :class:`Decoded`."""


def _reject_constant(name: str) -> Any:
    raise WireError(f"{name} is not a number here")


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise WireError(f"{what}: expected an integer, got {type(v).__name__}")
    return v


def _opt_int(v: Any, what: str) -> int | None:
    return None if v is None else _int(v, what)


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise WireError(f"{what}: expected a string, got {type(v).__name__}")
    return v


def _opt_str(v: Any, what: str) -> str | None:
    return None if v is None else _str(v, what)


def _list(v: Any, what: str, n: int | None = None) -> list[Any]:
    if not isinstance(v, list) or (n is not None and len(v) != n):
        raise WireError(f"{what}: expected a list{'' if n is None else f' of {n}'}")
    return v


def _reports(tables: Any, items: Any) -> tuple[KpmReport, ...]:
    """The reports of an answer (see :func:`encode_decoded`), one loop with the checks
    inline: an indication of 100 UEs is read on the main interpreter."""
    names = []
    for table in _list(tables, "names"):
        if not isinstance(table, list) or any(n.__class__ is not str for n in table):
            raise WireError("names: expected lists of strings")
        names.append(table)
    out = []
    isfinite = math.isfinite
    for item in _list(items, "reports"):
        if not isinstance(item, list) or len(item) != 4:
            raise WireError("report: expected [names, values, UE, cell]")
        index, values, ue, cell = item
        if index.__class__ is not int or not 0 <= index < len(names):
            raise WireError("report: names index out of range")
        if not isinstance(values, list) or len(values) != len(names[index]):
            raise WireError("report values: one per name expected")
        for value in values:
            if value.__class__ not in (int, float) or not isfinite(value):
                raise WireError("report value: expected a finite number")
        uid = None
        if ue is not None:
            if not isinstance(ue, list) or len(ue) != 5:
                raise WireError("UE id: expected a list of 5")
            amf, guami, f1ap, ran, crnti = ue
            for v in (amf, f1ap, crnti):
                if v is not None and v.__class__ is not int:
                    raise WireError("UE id: expected integers")
            for v in (guami, ran):
                if v is not None and v.__class__ is not str:
                    raise WireError("UE id: expected strings")
            uid = UeId(amf, guami, f1ap, ran, crnti)
        if cell is not None and cell.__class__ is not str:
            raise WireError("cell: expected a string")
        out.append(KpmReport(dict(zip(names[index], values, strict=True)), uid, cell))
    return tuple(out)


def decode_decoded(data: bytes) -> Decoded:
    """The :class:`Decoded` the decoder process sent, every field's type checked; raises
    :class:`WireError` (nothing else) when it is not one."""
    try:
        doc = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}"[:300]) from None
    try:
        outcome, detail, request, fn, meid, node, known, check, kpm = _list(doc, "answer", 9)
        outcome = _str(outcome, "outcome")
        if outcome not in DECODE_OUTCOMES or check not in CHECKS:
            raise WireError(f"outcome {outcome!r} or check {check!r} unknown")
        if known is not None and known not in aper.DIALECTS:
            raise WireError(f"dialect {known!r} unknown")
        req = None
        if request is not None:
            requestor, instance = _list(request, "request", 2)
            req = RicRequestId(_int(requestor, "requestor"), _int(instance, "instance"))
        ind = None
        if kpm is not None:
            version, fmt, start, period, sender, dialect, tables, reports = _list(
                kpm, "KPM", 8)
            if dialect not in aper.DIALECTS:
                raise WireError(f"dialect {dialect!r} unknown")
            ind = KpmIndication(
                _int(version, "KPM version"), _int(fmt, "format"), _opt_int(start, "start"),
                _opt_int(period, "granularity"), _opt_str(sender, "sender"),
                _reports(tables, reports), dialect)
        if outcome == "decoded" and (ind is None or req is None):
            raise WireError("decoded without the indication")
        return Decoded(outcome, _str(detail, "detail"), req, _opt_int(fn, "RAN function"),
                       _opt_str(meid, "meid"), _str(node, "node"), ind, known, check)
    except (TypeError, ValueError) as exc:  # WireError is a ValueError; bad unpacking too
        if isinstance(exc, WireError):
            raise
        raise WireError(f"malformed answer: {exc}"[:300]) from None
