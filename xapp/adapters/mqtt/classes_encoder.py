"""The traffic classes of the weights messages (``classes`` of ``mcw.weights.v2``): checked and
written from a batch's class columns.

A tick may send thousands of rows with the same few classes, so the parts that do not change
from row to row are made once: each class's match, mode, name and urgency (one object, shared by
the rows of a policy), each reason, and the weights' format per set of WATs named.  A row's part
is then one format of its weights per class, and its caps where it has any.  The output is
byte-identical to :func:`~xapp.adapters.mqtt.payloads.encode` of the document
(``tests/xapp/adapters/mqtt/test_classes.py``).
"""

from __future__ import annotations

import json
from typing import Final

import numpy as np
from numpy.typing import NDArray

from xapp.adapters.mqtt.payloads import CAP_MAX_MBPS, MAX_WEIGHT, MODES, PayloadError
from xapp.core.caps import CAP_MIN_MBPS
from xapp.core.class_columns import MAX_CLASSES, ClassSpec
from xapp.core.ports import DirectionBatch, WeightBatch
from xapp.core.traffic import (
    MESSAGE_BASE_BYTES,
    MESSAGE_BYTES_MAX,
    RULE_NAME_RE,
    class_bytes_max,
)

_ENCODE_FLOAT: Final = float.__repr__  # what json.dumps writes for a finite float


def check_classes(d: DirectionBatch, name: str, refused: dict[int, PayloadError]) -> None:
    """Refuse the rows whose classes of direction ``name`` may not be sent: the schema's
    ``$defs/class`` on what the arrays hold (the matches were checked when the policy was), and
    the contract that only a WAT with a weight above 0 is capped."""
    c = d.classes
    if c is None or not c.any():
        return
    counts = c.counts()
    used = np.arange(MAX_CLASSES)[None, :] < counts[:, None]  # (n, classes)
    present = d.present[:, None, :]
    w = c.weights
    problems: list[tuple[NDArray[np.bool_], str]] = [
        (used & ~(present & (w > 0)).any(axis=2), "a class has no WAT with a weight above 0"),
        (used[:, :, None] & present & ((w < 0) | (w > MAX_WEIGHT)),
         f"class weights are not all within 0..{MAX_WEIGHT}"),
    ]
    with np.errstate(invalid="ignore"):
        has = used[:, :, None] & ~np.isnan(c.caps)
        problems += [
            (has & ~((c.caps >= CAP_MIN_MBPS) & (c.caps <= CAP_MAX_MBPS)),
             f"class caps are not all within [{CAP_MIN_MBPS:g}, {CAP_MAX_MBPS:g}]"),
            (has & ~(present & (w > 0)), "a class caps a WAT that is not in the set or has "
                                         "weight 0"),
        ]
    for bad, why in problems:
        flat = bad.reshape(len(bad), -1).any(axis=1)
        for i in np.flatnonzero(flat).tolist():
            refused.setdefault(i, PayloadError("schema", f"{name}.classes: {why}"))
    # The rows of a policy share one tuple of specs: each is checked once.
    verdicts: dict[int, str | None] = {}
    specs = c.specs
    for i in np.flatnonzero(counts > 0).tolist():
        row: tuple[ClassSpec, ...] = specs[i]
        if id(row) not in verdicts:
            verdicts[id(row)] = _specs_problem(row)
        verdict = verdicts[id(row)]
        if verdict is not None:
            refused.setdefault(i, PayloadError("schema", f"{name}.classes: {verdict}"))


def check_size(batch: WeightBatch, refused: dict[int, PayloadError]) -> None:
    """Refuse the rows whose classes could make a message larger than the channel carries
    (:data:`~xapp.core.traffic.MESSAGE_BYTES_MAX`; a policy that could is refused when given,
    so this only guards the broker connection against what should not happen)."""
    sizes: dict[int, int] = {}
    total = np.zeros(len(batch), dtype=np.int64)
    for d in (batch.dl, batch.ul):
        c = d.classes
        if c is None or not c.any():
            continue
        specs = c.specs.tolist()
        for i in np.flatnonzero(c.counts() > 0).tolist():
            row: tuple[ClassSpec, ...] = specs[i]
            if id(row) not in sizes:
                sizes[id(row)] = sum(class_bytes_max(s.name, s.match, s.mode) for s in row)
            total[i] += sizes[id(row)]
    for i in np.flatnonzero(total + MESSAGE_BASE_BYTES > MESSAGE_BYTES_MAX).tolist():
        refused.setdefault(i, PayloadError("too-large", f"classes of {int(total[i])} bytes "
                                           f"at most: the message could exceed "
                                           f"{MESSAGE_BYTES_MAX} bytes"))


def _specs_problem(specs: tuple[ClassSpec, ...]) -> str | None:
    names = [s.name for s in specs]
    if len(specs) > MAX_CLASSES or len(set(names)) != len(names):
        return f"more than {MAX_CLASSES}, or a name twice"
    if not all(RULE_NAME_RE.fullmatch(s.name) and s.mode in MODES and not s.match.empty
               for s in specs):
        return "a name, mode or match the schema refuses"
    return None


def classes_objects(d: DirectionBatch, wats: tuple[str, ...], sel: NDArray[np.intp]
                    ) -> list[str]:
    """Per row of ``sel``: ``"classes":[..],`` (sorted keys; after ``caps_mbps``, before
    ``mode``) or "" for a row without classes; an empty list when no row has any."""
    c = d.classes
    if c is None or not c.any():
        return []
    order = sorted(range(len(wats)), key=lambda j: wats[j])
    all_counts = c.counts(sel)
    # Only the rows with classes, and only as many classes deep as the deepest of them.
    at = np.flatnonzero(all_counts > 0)
    rows, depth = sel[at], int(all_counts.max())
    counts = all_counts[at].tolist()
    present = d.present[rows][:, order]
    codes = (present @ (1 << np.arange(len(order)))).tolist()
    weights = c.weights[rows, :depth][:, :, order].tolist()
    caps_arr = c.caps[rows, :depth][:, :, order]
    capped: list[list[bool]] = np.asarray(
        (~np.isnan(caps_arr) & present[:, None, :]).any(axis=2), dtype=bool).tolist()
    caps = caps_arr.tolist()
    reasons = c.reasons[rows, :depth].tolist()
    specs = c.specs[rows].tolist()
    names = [wats[j] for j in order]
    heads: dict[int, str] = {}
    texts: dict[str, str] = {}
    formats: dict[int, tuple[str, list[int]]] = {}
    out = [""] * len(sel)
    for a, pos in enumerate(at.tolist()):
        code = codes[a]
        fmt = formats.get(code)
        if fmt is None:
            cols = [b for b in range(len(order)) if code >> b & 1]
            fmt = formats[code] = (",".join(f'"{names[b]}":%d' for b in cols), cols)
        parts = []
        for k in range(counts[a]):
            spec = specs[a][k]
            head = heads.get(id(spec))
            if head is None:
                head = heads[id(spec)] = _head(spec)
            reason = reasons[a][k]
            text = texts.get(reason)
            if text is None:
                text = texts[reason] = json.dumps(reason[:256])
            cap = _caps(names, fmt[1], caps[a][k]) if capped[a][k] else ""
            row = weights[a][k]
            parts.append("{" + cap + head + '"reason":' + text
                         + (',"urgent":true' if spec.urgent else "") + ',"weights":{'
                         + fmt[0] % tuple(row[b] for b in fmt[1]) + "}}")
        out[pos] = '"classes":[' + ",".join(parts) + "],"
    return out


def _head(spec: ClassSpec) -> str:
    """The keys of a class that are its rule's: match, mode and name (sorted order)."""
    match = json.dumps(spec.match.wire(), separators=(",", ":"), sort_keys=True)
    return f'"match":{match},"mode":"{spec.mode}","name":"{spec.name}",'


def _caps(names: list[str], cols: list[int], caps: list[float]) -> str:
    """``"caps_mbps":{..},`` of a class (the WATs of its set with a cap)."""
    return '"caps_mbps":{' + ",".join(
        f'"{names[b]}":{_ENCODE_FLOAT(float(caps[b]))}' for b in cols
        if caps[b] == caps[b]) + "},"
