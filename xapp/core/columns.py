"""One direction's set for each message of a tick, as columns changed in place.

Every message carries both directions' sets of its CPE.  A direction's :class:`Columns` start
as the sets in force (:meth:`Columns.in_force`), take the sets decided this tick
(:meth:`Columns.put`), where the direction has no set of its own take the other direction's
(:meth:`Columns.follow`) without the WATs its own policy excludes (:meth:`Columns.exclude`),
and go to the publisher as a :class:`~xapp.core.ports.DirectionBatch` (:meth:`Columns.batch`).
What a set in force may carry again depends on its applier now (:class:`Appliers`): caps while
it is rate-caps, classes while it takes as many.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core.caps import caps_in_force
from xapp.core.class_columns import ClassColumns
from xapp.core.fleet import FleetTable
from xapp.core.policy import KNOWN_WATS
from xapp.core.ports import DirectionBatch

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]


@dataclass(frozen=True)
class Appliers:
    """What the appliers of one direction take this tick, by fleet row."""

    #: Rows whose applier is rate-caps; None: none is and no caps are in force.
    rate_capped: Mask | None = None
    #: How many classes each row's applier takes; None: none takes any and none is in force.
    room: NDArray[np.int64] | None = None

    def classes_in_force(self, classes: ClassColumns, rows: NDArray[np.intp]) -> ClassColumns:
        """The classes in force at ``rows`` where their applier still takes them (their caps
        while it is still rate-caps)."""
        out = classes.subset(rows)
        if self.room is None or not out.any():
            out.clear(np.arange(len(out)))
            return out
        out.clear(self.room[rows] < out.counts())
        if self.rate_capped is None:
            out.caps[:] = np.nan
        else:
            out.caps[~self.rate_capped[rows]] = np.nan
        return out


@dataclass
class Columns:
    """One direction's set for each message of a tick, a row per message, a column per WAT."""

    weights: NDArray[np.int64]
    present: NDArray[np.bool_]
    usable: NDArray[np.bool_]
    aggregate: Array
    modes: NDArray[np.object_]
    reasons: NDArray[np.object_]
    sources: NDArray[np.object_]
    caps: Array  # NaN: no cap
    classes: ClassColumns

    @classmethod
    def in_force(cls, fleet: FleetTable, rows: NDArray[np.intp], appliers: Appliers) -> Columns:
        """The sets in force at ``rows``, with their caps and classes while the applier still
        takes them."""
        caps = caps_in_force(fleet.caps, rows, appliers.rate_capped)
        return cls(fleet.weights[rows], fleet.present[rows], fleet.usable[rows],
                   fleet.aggregate[rows], fleet.mode[rows], fleet.reason[rows],
                   fleet.source[rows],
                   np.full(fleet.weights[rows].shape, np.nan) if caps is None else caps,
                   appliers.classes_in_force(fleet.classes, rows))

    def put(self, at: NDArray[np.intp], new: Columns) -> None:
        """Positions ``at`` take the sets of ``new`` (its row ``i`` goes to ``at[i]``)."""
        self.weights[at] = new.weights
        self.present[at] = new.present
        self.usable[at] = new.usable
        self.aggregate[at] = new.aggregate
        self.modes[at] = new.modes
        self.reasons[at] = new.reasons
        self.sources[at] = new.sources
        self.caps[at] = new.caps
        self.classes.put(at, new.classes)

    def follow(self, mask: NDArray[np.bool_], other: Columns, other_name: str) -> None:
        """Where ``mask``: the other direction's set (the reason says so)."""
        if not mask.any():
            return
        self.weights[mask] = other.weights[mask]
        self.present[mask] = other.present[mask]
        self.usable[mask] = other.usable[mask]
        self.aggregate[mask] = other.aggregate[mask]
        self.modes[mask] = other.modes[mask]
        self.sources[mask] = other.sources[mask]
        self.reasons[mask] = [f"follows {other_name}: {r}" for r in other.reasons[mask].tolist()]
        # Caps come from a direction's own forecasts, classes from its own rules (a cgroup
        # means nothing on the downlink): a set that follows has neither.
        self.caps[mask] = np.nan
        self.classes.clear(mask)

    def exclude(self, at: NDArray[np.intp], excluded: Mask) -> None:
        """Positions ``at`` lose the WATs ``excluded`` marks (one row of it per position); a
        position left with no weight keeps its set as it is, and its reason says why."""
        if not excluded.any():
            return
        left = np.where(excluded, 0, self.weights[at])
        empty: Mask = np.asarray(~(left > 0).any(axis=1), dtype=bool)
        self.weights[at[~empty]] = left[~empty]
        self.usable[at[~empty]] = self.usable[at[~empty]] & ~excluded[~empty]
        for i, row, nothing in zip(at.tolist(), excluded, empty.tolist(), strict=True):
            if row.any():
                names = ", ".join(w for w, x in zip(KNOWN_WATS, row.tolist(), strict=True) if x)
                self.reasons[i] = (f"{self.reasons[i]} (as it is: its own policy excludes "
                                   f"all of it, {names})" if nothing
                                   else f"{self.reasons[i]} (without excluded {names})")

    def subset(self, at: NDArray[np.intp]) -> Columns:
        """The sets at positions ``at`` (copies)."""
        return Columns(self.weights[at], self.present[at], self.usable[at], self.aggregate[at],
                       self.modes[at], self.reasons[at], self.sources[at], self.caps[at],
                       self.classes.subset(at))

    def batch(self) -> DirectionBatch:
        """The sets as the publisher takes them: no caps (classes) at all when none is set."""
        caps = self.caps if np.isfinite(self.caps).any() else None
        return DirectionBatch(self.weights, self.present, self.usable, self.aggregate,
                              self.modes.tolist(), self.reasons.tolist(),
                              self.sources.tolist(), caps,
                              self.classes if self.classes.any() else None)
