"""The traffic classes of one direction for many CPEs, column-wise: what the loop decided, what
it publishes and what it keeps in force (issue 35).

A row is one CPE's classes in one direction: ``specs[i]`` says what they are (name, match, mode,
urgency, in order; ``()``: the row has none, one rule for all traffic), and a block of arrays
(class x WAT) what the loop decided for each: weights, usability, caps (NaN: none).  Class
``c`` of row ``i`` is ``specs[i][c]`` and ``weights[i, c]``; blocks are :data:`MAX_CLASSES` deep
whatever a row uses, so rows move between tables by vector assignment.  ``ClassSet`` records
(:mod:`xapp.core.traffic`) are made from a row only where one leaves the core: the message
(:meth:`ClassColumns.sets`) and the stored record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from xapp.core.rules import MAX_RULES
from xapp.core.traffic import ClassSet, TrafficMatch

#: Classes per direction a row holds at most (a policy's rules: the wire's limit).
MAX_CLASSES: Final = MAX_RULES

Mask = NDArray[np.bool_]


@dataclass(frozen=True)
class ClassSpec:
    """What a class is, as sent: its rule's name and match, its mode and urgency."""

    name: str
    match: TrafficMatch
    mode: str
    urgent: bool


#: The specs of a row without classes.
NONE: Final[tuple[ClassSpec, ...]] = ()


@dataclass
class _Block:
    """The arrays of rows that have (or had) classes."""

    specs: NDArray[np.object_]  # (n,) tuple[ClassSpec, ...]
    weights: NDArray[np.int64]  # (n, MAX_CLASSES, k)
    usable: NDArray[np.bool_]  # (n, MAX_CLASSES, k)
    caps: NDArray[np.float64]  # (n, MAX_CLASSES, k), NaN: no cap
    reasons: NDArray[np.object_]  # (n, MAX_CLASSES)

    @classmethod
    def empty(cls, n: int, k: int) -> _Block:
        return cls(_nones(n), np.zeros((n, MAX_CLASSES, k), dtype=np.int64),
                   np.zeros((n, MAX_CLASSES, k), dtype=bool),
                   np.full((n, MAX_CLASSES, k), np.nan),
                   np.full((n, MAX_CLASSES), "", dtype=object))


class ClassColumns:
    """Classes of ``n`` rows over ``k`` WATs (see the module docstring).

    Rows without classes cost nothing until a row has some: the arrays are made when first
    written (the fleet of a policy without rules never makes them, so the loop's tick is what
    it was before classes)."""

    def __init__(self, n: int, k: int, block: _Block | None = None) -> None:
        self._n, self._k, self._block = n, k, block

    @classmethod
    def empty(cls, n: int, k: int) -> ClassColumns:
        """``n`` rows without classes."""
        return cls(n, k)

    @classmethod
    def concat(cls, parts: Sequence[ClassColumns]) -> ClassColumns:
        n, k = sum(len(p) for p in parts), parts[0]._k
        if all(p._block is None for p in parts):
            return cls(n, k)
        blocks = [p._arrays() for p in parts]
        return cls(n, k, _Block(*(np.concatenate([getattr(b, f) for b in blocks])
                                  for f in ("specs", "weights", "usable", "caps", "reasons"))))

    def _arrays(self) -> _Block:
        if self._block is None:
            self._block = _Block.empty(self._n, self._k)
        return self._block

    # The arrays, made on first use.
    @property
    def specs(self) -> NDArray[np.object_]:
        return self._arrays().specs

    @property
    def weights(self) -> NDArray[np.int64]:
        return self._arrays().weights

    @property
    def usable(self) -> NDArray[np.bool_]:
        return self._arrays().usable

    @property
    def caps(self) -> NDArray[np.float64]:
        return self._arrays().caps

    @property
    def reasons(self) -> NDArray[np.object_]:
        return self._arrays().reasons

    def __len__(self) -> int:
        return self._n

    def counts(self, rows: NDArray[np.intp] | None = None) -> NDArray[np.int64]:
        """Classes per row (of ``rows``, or all)."""
        n = self._n if rows is None else len(rows)
        if self._block is None:
            return np.zeros(n, dtype=np.int64)
        specs = (self._block.specs if rows is None else self._block.specs[rows]).tolist()
        return np.fromiter(map(len, specs), dtype=np.int64, count=n)

    def any(self, upto: int | None = None) -> bool:
        """Some row (of the first ``upto``, or all) has classes."""
        return self._block is not None and any(self._block.specs[:upto].tolist())

    def subset(self, at: NDArray[np.intp]) -> ClassColumns:
        """Rows ``at`` (copies)."""
        b = self._block
        if b is None:
            return ClassColumns(len(at), self._k)
        return ClassColumns(len(at), self._k, _Block(b.specs[at], b.weights[at], b.usable[at],
                                                     b.caps[at], b.reasons[at]))

    def put(self, at: NDArray[np.intp] | Mask, new: ClassColumns) -> None:
        """Rows ``at`` take the rows of ``new``, in order."""
        if new._block is None:
            self.clear(at)
            return
        b, n = self._arrays(), new._block
        b.specs[at] = n.specs
        b.weights[at] = n.weights
        b.usable[at] = n.usable
        b.caps[at] = n.caps
        b.reasons[at] = n.reasons

    def clear(self, at: NDArray[np.intp] | Mask) -> None:
        """Rows ``at`` lose their classes."""
        b = self._block
        if b is None:
            return
        b.specs[at] = _nones(len(b.specs[at]))
        b.weights[at] = 0
        b.usable[at] = False
        b.caps[at] = np.nan
        b.reasons[at] = ""

    def grown(self, size: int) -> ClassColumns:
        """The rows, then rows without classes up to ``size``."""
        return ClassColumns.concat([self, ClassColumns(size - self._n, self._k)])

    def sets(self, i: int, wats: tuple[str, ...], present: Mask) -> tuple[ClassSet, ...]:
        """Row ``i``'s classes as records, each naming the WATs ``present`` (the row's set's)."""
        b = self._block
        if b is None:
            return ()
        cols = np.flatnonzero(present).tolist()
        out = []
        for c, spec in enumerate(b.specs[i]):
            caps = b.caps[i, c]
            out.append(ClassSet(spec.name, spec.match, spec.mode,
                                {wats[j]: int(b.weights[i, c, j]) for j in cols},
                                str(b.reasons[i, c]),
                                {wats[j]: float(caps[j]) for j in cols if np.isfinite(caps[j])},
                                spec.urgent))
        return tuple(out)

    def restore(self, r: int, sets: Sequence[ClassSet], wats: tuple[str, ...]) -> None:
        """Row ``r`` from stored records (a restart); usability is taken as weight > 0, the
        best a record knows."""
        self.clear(np.array([r]))
        if not sets:
            return
        b = self._arrays()
        b.specs[r] = tuple(ClassSpec(s.name, s.match, s.mode, s.urgent)
                           for s in sets[:MAX_CLASSES])
        for c, s in enumerate(sets[:MAX_CLASSES]):
            for j, wat in enumerate(wats):
                if wat in s.weights:
                    b.weights[r, c, j] = s.weights[wat]
                    b.usable[r, c, j] = s.weights[wat] > 0
                if wat in s.caps_mbps:
                    b.caps[r, c, j] = s.caps_mbps[wat]
            b.reasons[r, c] = s.reason


def _nones(n: int) -> NDArray[np.object_]:
    out = np.empty(n, dtype=object)
    out.fill(NONE)  # an object per element (a list of tuples would make a 2-D array)
    return out


def same_specs(old: NDArray[np.object_], new: NDArray[np.object_]) -> Mask:
    """Row by row: the same classes (the same object, the common case, or equal)."""
    return np.fromiter((a is b or a == b for a, b in zip(old.tolist(), new.tolist(),
                                                          strict=True)),
                       dtype=bool, count=len(old))
