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
class ClassColumns:
    """Classes of ``n`` rows (see the module docstring)."""

    specs: NDArray[np.object_]  # (n,) tuple[ClassSpec, ...]
    weights: NDArray[np.int64]  # (n, MAX_CLASSES, k)
    usable: NDArray[np.bool_]  # (n, MAX_CLASSES, k)
    caps: NDArray[np.float64]  # (n, MAX_CLASSES, k), NaN: no cap
    reasons: NDArray[np.object_]  # (n, MAX_CLASSES)

    @classmethod
    def empty(cls, n: int, k: int) -> ClassColumns:
        """``n`` rows without classes."""
        return cls(_nones(n), np.zeros((n, MAX_CLASSES, k), dtype=np.int64),
                   np.zeros((n, MAX_CLASSES, k), dtype=bool),
                   np.full((n, MAX_CLASSES, k), np.nan),
                   np.full((n, MAX_CLASSES), "", dtype=object))

    @classmethod
    def concat(cls, parts: Sequence[ClassColumns]) -> ClassColumns:
        return cls(np.concatenate([p.specs for p in parts]),
                   np.concatenate([p.weights for p in parts]),
                   np.concatenate([p.usable for p in parts]),
                   np.concatenate([p.caps for p in parts]),
                   np.concatenate([p.reasons for p in parts]))

    def __len__(self) -> int:
        return len(self.specs)

    def counts(self) -> NDArray[np.int64]:
        """Classes per row."""
        return np.fromiter(map(len, self.specs.tolist()), dtype=np.int64, count=len(self))

    def any(self) -> bool:
        """Some row has classes."""
        return any(self.specs.tolist())

    def subset(self, at: NDArray[np.intp]) -> ClassColumns:
        """Rows ``at`` (copies)."""
        return ClassColumns(self.specs[at], self.weights[at], self.usable[at], self.caps[at],
                            self.reasons[at])

    def put(self, at: NDArray[np.intp] | Mask, new: ClassColumns) -> None:
        """Rows ``at`` take the rows of ``new``, in order."""
        self.specs[at] = new.specs
        self.weights[at] = new.weights
        self.usable[at] = new.usable
        self.caps[at] = new.caps
        self.reasons[at] = new.reasons

    def clear(self, at: NDArray[np.intp] | Mask) -> None:
        """Rows ``at`` lose their classes."""
        n = len(self.specs[at])
        self.specs[at] = _nones(n)
        self.weights[at] = 0
        self.usable[at] = False
        self.caps[at] = np.nan
        self.reasons[at] = ""

    def grown(self, size: int) -> ClassColumns:
        """The rows, then rows without classes up to ``size``."""
        more = ClassColumns.empty(size - len(self), self.weights.shape[2])
        return ClassColumns.concat([self, more])

    def sets(self, i: int, wats: tuple[str, ...], present: Mask) -> tuple[ClassSet, ...]:
        """Row ``i``'s classes as records, each naming the WATs ``present`` (the row's set's)."""
        cols = np.flatnonzero(present).tolist()
        out = []
        for c, spec in enumerate(self.specs[i]):
            caps = self.caps[i, c]
            out.append(ClassSet(spec.name, spec.match, spec.mode,
                                {wats[j]: int(self.weights[i, c, j]) for j in cols},
                                str(self.reasons[i, c]),
                                {wats[j]: float(caps[j]) for j in cols if np.isfinite(caps[j])},
                                spec.urgent))
        return tuple(out)

    def restore(self, r: int, sets: Sequence[ClassSet], wats: tuple[str, ...]) -> None:
        """Row ``r`` from stored records (a restart); usability is taken as weight > 0, the
        best a record knows."""
        self.clear(np.array([r]))
        self.specs[r] = tuple(ClassSpec(s.name, s.match, s.mode, s.urgent)
                              for s in sets[:MAX_CLASSES])
        for c, s in enumerate(sets[:MAX_CLASSES]):
            for j, wat in enumerate(wats):
                if wat in s.weights:
                    self.weights[r, c, j] = s.weights[wat]
                    self.usable[r, c, j] = s.weights[wat] > 0
                if wat in s.caps_mbps:
                    self.caps[r, c, j] = s.caps_mbps[wat]
            self.reasons[r, c] = s.reason


def _nones(n: int) -> NDArray[np.object_]:
    out = np.empty(n, dtype=object)
    out.fill(NONE)  # an object per element (a list of tuples would make a 2-D array)
    return out


def same_specs(old: NDArray[np.object_], new: NDArray[np.object_]) -> Mask:
    """Row by row: the same classes (the same object, the common case, or equal)."""
    return np.fromiter((a is b or a == b for a, b in zip(old.tolist(), new.tolist(),
                                                          strict=True)),
                       dtype=bool, count=len(old))
