"""The weights messages (``mcw.weights.v2``): validated and encoded a batch at a time."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from xapp.adapters.mqtt.classes_encoder import check_classes, check_size, classes_objects
from xapp.adapters.mqtt.payloads import (
    CAP_MAX_MBPS,
    MAX_WEIGHT,
    MODES,
    SCHEMA_IDS,
    WATS,
    PayloadError,
    check,
)
from xapp.adapters.mqtt.topics import weights_topic
from xapp.core.caps import CAP_MIN_MBPS
from xapp.core.forecast import DIRECTIONS
from xapp.core.ports import Choice, DirectionBatch, PublishResult, WeightBatch
from xapp.core.weights import WeightDecision


@dataclass
class EncodedWeights:
    """The weights messages of a batch: ``payloads[n]`` is row ``rows[n]``'s message, with
    version ``versions[n]``; ``refused`` maps the other rows to why they may not be sent."""

    rows: list[int]
    versions: list[int]
    payloads: list[bytes]
    refused: dict[int, PayloadError]

    def result(self, batch: WeightBatch) -> PublishResult:
        """The publisher's answer for ``batch``: versions of the rows sent, errors of the rest."""
        ids = batch.cpe_ids
        return PublishResult(
            versions=dict(zip([ids[i] for i in self.rows], self.versions, strict=True)),
            errors={ids[i]: exc for i, exc in self.refused.items()})


_MAX_SAFE_INT: Final = 2**53 - 1
_ENCODE_FLOAT: Final = float.__repr__  # what json.dumps writes for a finite float


def encode_weights_batch(batch: WeightBatch, issued_at_ms: int,
                         take_versions: Callable[[list[str]], list[int]]) -> EncodedWeights:
    """Validate and encode the ``mcw.weights.v2`` message of every row of ``batch``: one per
    CPE, its ``dl`` and ``ul`` sets under one version and one lease.

    The one way weights messages are made (the MQTT and in-memory publishers, and
    :func:`build_weights`).  The schema's constraints are checked over the whole batch at once
    (per direction: weights 0..255 with one above 0, known WATs and mode; lease 1..3600 s, the
    cpe_id pattern, versions and times below 2^53), and each message is written from a fixed
    template in sorted key order: byte-identical to
    :func:`~xapp.adapters.mqtt.payloads.encode` of the document, which validates against the
    schema (``tests/xapp/adapters/mqtt/test_weights_encoder.py`` checks both, property-based,
    against the reference validator).  Rows that may not be sent (either
    direction invalid) are refused and take no version; ``take_versions`` is called once with
    the cpe_ids of the others, in order.
    """
    n = len(batch)
    refused: dict[int, PayloadError] = {}
    lease = batch.lease_s
    unknown = sorted(set(batch.wats) - set(WATS))
    problem = (f"weights: unknown WAT {unknown}" if unknown
               else None if isinstance(lease, (int, float)) and not isinstance(lease, bool)
               and 1 <= lease <= 3600 else f"lease_s: {lease!r} is not within 1..3600")
    if problem is None and not 0 <= issued_at_ms <= _MAX_SAFE_INT:
        problem = f"issued_at_ms: {issued_at_ms} is out of range"
    if problem is not None:
        return EncodedWeights([], [], [], {i: PayloadError("schema", problem) for i in range(n)})
    for name in DIRECTIONS:
        _check_direction(batch.direction(name), name, refused)
    check_size(batch, refused)
    ids = batch.cpe_ids
    for i, cpe_id in enumerate(ids):
        try:
            weights_topic(cpe_id)
        except PayloadError as exc:
            refused[i] = exc
        except TypeError:
            refused[i] = PayloadError("bad-cpe-id", f"{cpe_id!r} is not a valid cpe_id")
    rows = [i for i in range(n) if i not in refused] if refused else list(range(n))
    versions = take_versions([ids[i] for i in rows])
    # A version store corrupted or at its end (looked for row by row only when min or max
    # says a version is out of range).
    if versions and (min(versions) < 1 or max(versions) > _MAX_SAFE_INT):
        for i, v in zip(rows, versions, strict=True):
            if not 1 <= v <= _MAX_SAFE_INT:
                refused[i] = PayloadError("schema", f"version: {v} is out of range")
    if len(refused) > n - len(rows):
        keep = [(i, v) for i, v in zip(rows, versions, strict=True) if i not in refused]
        rows, versions = [i for i, _ in keep], [v for _, v in keep]
    lease_text = _ENCODE_FLOAT(lease) if isinstance(lease, float) else str(int(lease))
    head = (f'"issued_at_ms":{int(issued_at_ms)},"lease_s":{lease_text},'
            f'"schema":"{SCHEMA_IDS["weights"]}"')
    payloads = _messages(batch, np.array(rows, dtype=np.intp), versions, head)
    return EncodedWeights(rows, versions, payloads, refused)


def _messages(batch: WeightBatch, sel: NDArray[np.intp], versions: list[int], head: str
              ) -> list[bytes]:
    """The messages of rows ``sel`` (``versions`` in the same order), in that order.

    A tick's messages differ in few ways: which WATs each set names, its mode and reason.
    Rows alike in all of these in both directions share one format string of the whole
    message (one ``format`` call per message, with the cpe_id, the weights and the version);
    a row with rate caps or traffic classes in either direction is written from its two
    direction objects.
    """
    n = len(sel)
    out: list[bytes] = [b""] * n
    if n == 0:
        return out
    wats = batch.wats
    order = sorted(range(len(wats)), key=lambda j: wats[j])
    ids = batch.cpe_ids
    version = np.array(versions, dtype=np.int64)
    capped = np.zeros(n, dtype=bool)
    for d in (batch.dl, batch.ul):
        if d.caps_mbps is not None:
            capped |= ~np.isnan(np.asarray(d.caps_mbps, dtype=np.float64)[sel]).all(axis=1)
        if d.classes is not None:
            capped |= d.classes.counts()[sel] > 0
    at_caps = np.flatnonzero(capped)
    if len(at_caps):
        some = sel[at_caps]
        dl = _direction_objects(batch.dl, wats, some)
        ul = _direction_objects(batch.ul, wats, some)
        for b, a in enumerate(at_caps.tolist()):
            out[a] = (f'{{"cpe_id":"{ids[int(sel[a])]}","dl":{dl[b]},{head},"ul":{ul[b]},'
                      f'"version":{versions[a]}}}').encode()
        if len(at_caps) == n:
            return out
    plain = np.flatnonzero(~capped)
    rows = sel[plain]
    pick = rows.tolist()
    # Per direction: a code of the WATs named (bit b: the b-th WAT in sorted order) and of
    # the (mode, reason) pair, numbered in C (dict.fromkeys, map) rather than row by row.
    bits = 1 << np.arange(len(order))
    pairs = []
    for d in (batch.dl, batch.ul):
        modes, reasons = np.asarray(d.modes, dtype=object), np.asarray(d.reasons, dtype=object)
        pairs.append(list(zip(modes[rows].tolist(), reasons[rows].tolist(), strict=True)))
    heads = {pair: code for code, pair in
             enumerate(dict.fromkeys(pairs[0]) | dict.fromkeys(pairs[1]))}
    codes = []
    for d, pair in zip((batch.dl, batch.ul), pairs, strict=True):
        codes += [d.present[rows][:, order] @ bits,
                  np.fromiter(map(heads.__getitem__, pair), dtype=np.int64, count=len(pair))]
    p, h = 1 << len(order), len(heads)
    key = ((codes[0] * p + codes[2]) * h + codes[1]) * h + codes[3]
    by_group = np.argsort(key, kind="stable")
    ordered = key[by_group]
    ends = [*(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(key)]
    head_of = list(heads)
    # Bytes formatting with %: a third of str.format and encode (ids are ASCII by the
    # cpe_id pattern, reasons ASCII as json.dumps escapes them, names and modes known).
    ids_b = np.array("\0".join([ids[i] for i in pick]).encode().split(b"\0"), dtype=object)
    literal = head.encode().replace(b"%", b"%%")
    start = 0
    for end in ends:
        at = by_group[start:end]
        start = end
        first = int(at[0])
        parts, columns = [], []
        for name, d, pat, txt in (("dl", batch.dl, codes[0], codes[1]),
                                  ("ul", batch.ul, codes[2], codes[3])):
            cols = [order[b] for b in range(len(order)) if int(pat[first]) >> b & 1]
            mode, reason = head_of[int(txt[first])]
            fixed = (f'"{name}":{{"mode":"{mode}","reason":{json.dumps(reason[:256])},'
                     '"weights":{')
            parts.append(fixed.encode().replace(b"%", b"%%")
                         + ",".join(f'"{wats[j]}":%d' for j in cols).encode() + b"}}")
            columns += d.weights[rows[at]][:, cols].T.tolist()
        fmt = b'{"cpe_id":"%s",' + parts[0] + b"," + literal + b"," + parts[1] + b',"version":%d}'
        texts = map(fmt.__mod__, zip(ids_b[at].tolist(), *columns,
                                     version[plain[at]].tolist(), strict=True))
        for a, t in zip(plain[at].tolist(), texts, strict=True):
            out[a] = t
    return out


def _check_direction(d: DirectionBatch, name: str, refused: dict[int, PayloadError]) -> None:
    """Refuse the rows whose set of direction ``name`` may not be sent (first reason wins)."""
    w, present = d.weights, d.present
    for i in np.flatnonzero(~(present & (w > 0)).any(axis=1)).tolist():
        refused.setdefault(i, PayloadError("schema", f"{name}.weights: no WAT has a weight "
                                           "above 0"))
    for i in np.flatnonzero((present & ((w < 0) | (w > MAX_WEIGHT))).any(axis=1)).tolist():
        refused.setdefault(i, PayloadError("schema", f"{name}.weights: "
                                           f"{w[i][present[i]].tolist()} are not all within "
                                           f"0..{MAX_WEIGHT}"))
    for i, mode in enumerate(d.modes):
        if mode not in MODES:
            refused.setdefault(i, PayloadError("schema", f"{name}.mode: {mode!r} is not one "
                                               f"of {list(MODES)}"))
    check_classes(d, name, refused)
    if d.caps_mbps is None:
        return
    caps = np.asarray(d.caps_mbps, dtype=np.float64)
    has = ~np.isnan(caps)
    # The schema's bounds, and the contract that only a WAT with a weight above 0 is capped
    # (weight 0 is off, not capped: a cap there would contradict the set).
    with np.errstate(invalid="ignore"):
        bad = has & ~((caps >= CAP_MIN_MBPS) & (caps <= CAP_MAX_MBPS))
    for i in np.flatnonzero(bad.any(axis=1)).tolist():
        refused.setdefault(i, PayloadError("schema", f"{name}.caps_mbps: "
                                           f"{caps[i][has[i]].tolist()} are not all within "
                                           f"[{CAP_MIN_MBPS:g}, {CAP_MAX_MBPS:g}]"))
    for i in np.flatnonzero((has & ~(present & (w > 0))).any(axis=1)).tolist():
        refused.setdefault(i, PayloadError("schema", f"{name}.caps_mbps: a cap on a WAT "
                                           "that is not in the set or has weight 0"))


def _direction_objects(d: DirectionBatch, wats: tuple[str, ...], sel: NDArray[np.intp]
                       ) -> list[str]:
    """The ``{"mode":..,"reason":..,"weights":{..}}`` object of rows ``sel`` of one direction,
    in sorted key order; one format string per presence pattern (few)."""
    order = sorted(range(len(wats)), key=lambda j: wats[j])
    pattern = d.present[sel][:, order] @ (1 << np.arange(len(order)))
    inner: list[str] = [""] * len(sel)
    for code in np.unique(pattern).tolist():
        cols = [order[b] for b in range(len(order)) if code >> b & 1]
        fmt = ",".join(f'"{wats[j]}":{{}}' for j in cols)
        at = np.flatnonzero(pattern == code)
        for a, vals in zip(at.tolist(), d.weights[sel[at]][:, cols].tolist(), strict=True):
            inner[a] = fmt.format(*vals)
    # One head per (mode, reason): a tick has few of either.
    heads: dict[tuple[str, str], str] = {}
    modes, texts = d.modes, d.reasons
    caps = _caps_objects(d, wats, sel, order)
    classes = classes_objects(d, wats, sel)
    out = []
    for a, i in enumerate(sel.tolist()):
        key = (modes[i], texts[i])
        head = heads.get(key)
        if head is None:
            head = heads[key] = (f'"mode":"{key[0]}","reason":{json.dumps(key[1][:256])},'
                                 '"weights":{')
        out.append("{" + (caps[a] if caps else "") + (classes[a] if classes else "")
                   + head + inner[a] + "}}")
    return out


def _caps_objects(d: DirectionBatch, wats: tuple[str, ...], sel: NDArray[np.intp],
                  order: list[int]) -> list[str]:
    """Per row of ``sel``: ``"caps_mbps":{..},`` (sorted keys; the first key of the direction
    object) or "" for a row without caps; an empty list when no row has any."""
    if d.caps_mbps is None:
        return []
    caps = np.asarray(d.caps_mbps, dtype=np.float64)[sel][:, order]
    has = ~np.isnan(caps)
    if not has.any():
        return []
    out = [""] * len(sel)
    names = [wats[j] for j in order]
    for a in np.flatnonzero(has.any(axis=1)).tolist():
        # float.__repr__ is what json.dumps writes for a finite float.
        out[a] = '"caps_mbps":{' + ",".join(
            f'"{names[b]}":{_ENCODE_FLOAT(float(v))}'
            for b, (v, h) in enumerate(zip(caps[a].tolist(), has[a].tolist(), strict=True))
            if h) + "},"
    return out


def single_batch(cpe_id: str, dl: Choice, ul: Choice | None, lease_s: float) -> WeightBatch:
    """A batch of one CPE (``ul`` None: the same as ``dl``); a WAT no message may name raises
    :class:`PayloadError`."""
    try:
        return WeightBatch.of([(cpe_id, dl, ul if ul is not None else dl)], lease_s)
    except ValueError as exc:
        raise PayloadError("schema", f"weights: {exc}") from None


def build_weights(cpe_id: str, version: int, decision: WeightDecision, *, mode: str,
                  lease_s: float, issued_at_ms: int, ul: Choice | None = None
                  ) -> dict[str, Any]:
    """The ``mcw.weights.v2`` document of one CPE (the batch path with one row, checked
    against the schema again): ``dl`` is ``decision`` under ``mode``, ``ul`` the same unless
    given as ``(decision, mode)``.

    Raises :class:`PayloadError` for weights that may never be sent (all zero, out of range,
    unknown WAT) so nothing invalid leaves the xApp.
    """
    out = encode_weights_batch(single_batch(cpe_id, (decision, mode), ul, lease_s),
                               issued_at_ms, lambda ids: [version] * len(ids))
    if out.refused:
        raise out.refused[0]
    doc: dict[str, Any] = json.loads(out.payloads[0])
    check("weights", doc)
    return doc
