"""One direction's set for each message of a tick, as columns changed in place.

Every message carries both directions' sets of its CPE.  A direction's :class:`Columns` start
as the sets in force (:meth:`Columns.in_force`), take the sets decided this tick
(:meth:`Columns.put`), where the direction has no set of its own take the other direction's
(:meth:`Columns.follow`) without the WATs its own policy excludes (:meth:`Columns.exclude`),
and go to the publisher as a :class:`~xapp.core.ports.DirectionBatch` (:meth:`Columns.batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core.caps import caps_in_force
from xapp.core.fleet import FleetTable
from xapp.core.policy import KNOWN_WATS
from xapp.core.ports import DirectionBatch

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]


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

    @classmethod
    def in_force(cls, fleet: FleetTable, rows: NDArray[np.intp], rate_capped: Mask | None
                 ) -> Columns:
        """The sets in force at ``rows``, with their caps while the applier is still
        rate-caps."""
        caps = caps_in_force(fleet.caps, rows, rate_capped)
        return cls(fleet.weights[rows], fleet.present[rows], fleet.usable[rows],
                   fleet.aggregate[rows], fleet.mode[rows], fleet.reason[rows],
                   fleet.source[rows],
                   np.full(fleet.weights[rows].shape, np.nan) if caps is None else caps)

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
        # Caps come from a direction's own forecasts; a set that follows has none.
        self.caps[mask] = np.nan

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
                       self.modes[at], self.reasons[at], self.sources[at], self.caps[at])

    def batch(self) -> DirectionBatch:
        """The sets as the publisher takes them: no caps at all when none is set."""
        caps = self.caps if np.isfinite(self.caps).any() else None
        return DirectionBatch(self.weights, self.present, self.usable, self.aggregate,
                              self.modes.tolist(), self.reasons.tolist(),
                              self.sources.tolist(), caps)
