"""The loop's per-CPE state of one direction: an array-backed table, a row per CPE, a column
per WAT.

A row holds the decision in force at the CPE's agent (the last *published* weights, their
version, usability, mode, policy source and time), plus what the loop needs between ticks: when
it last decided, under which policy, and whether a publish is owed.  Arrays instead of per-CPE
records make a tick over 10,000 CPEs a handful of vector operations.  New rows are seeded from
the :class:`~xapp.core.ports.StateStore` record, so a restarted xApp holds its hysteresis
against the weights the agents already have.  The loop keeps one table per direction (``dl``,
``ul``) and adds CPEs to both in the same order, so a CPE has the same row in each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from xapp.core.class_columns import ClassColumns
from xapp.core.policy import KNOWN_WATS, Policy
from xapp.core.ports import CpeRecord, DirectionBatch, row_decision
from xapp.core.rules import ClassRule
from xapp.core.weights import WeightDecision

_T = TypeVar("_T", bound=np.generic)


class FleetTable:
    """Per-CPE state of one direction of the control loop; not safe for concurrent use (the
    loop owns it).

    Parameters
    ----------
    restore : callable
        ``restore(cpe_id)`` gives the stored record of a CPE seen for the first time, or None.
    direction : {"dl", "ul"}, default="ul"
        The direction of the stored records this table restores.
    wats : tuple of str, default=KNOWN_WATS
        The WAT columns.
    """

    def __init__(self, restore: Callable[[str], CpeRecord | None], direction: str = "ul",
                 wats: tuple[str, ...] = KNOWN_WATS) -> None:
        self.wats = wats
        self.direction = direction
        self._restore = restore
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        k = len(wats)
        self.weights: NDArray[np.int64] = np.zeros((0, k), dtype=np.int64)
        self.present: NDArray[np.bool_] = np.zeros((0, k), dtype=bool)
        self.usable: NDArray[np.bool_] = np.zeros((0, k), dtype=bool)
        #: Rate caps sent with the set in force, NaN where none (:mod:`xapp.core.caps`).
        self.caps: NDArray[np.float64] = np.zeros((0, k))
        #: Traffic classes sent with the set in force (:mod:`xapp.core.classes`).
        self.classes = ClassColumns.empty(0, k)
        #: A decision is in force (published, or restored from the state store).
        self.has: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self.version: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.published_s: NDArray[np.float64] = np.zeros(0)
        self.aggregate: NDArray[np.float64] = np.zeros(0)
        #: When the loop last decided (NaN: never since start).
        self.decided_s: NDArray[np.float64] = np.zeros(0)
        #: A publish is owed (it failed, or the broker came back and may have lost it).
        self.unpublished: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        #: The policy the decision in force was made under (None: unknown, e.g. restored).
        self.applied: NDArray[np.object_] = np.zeros(0, dtype=object)
        #: The rules its classes were decided under (a tuple of ClassRule; None: unknown).  Not
        #: part of ``applied``: a direction's own policy leaves the rules out.
        self.rules_applied: NDArray[np.object_] = np.zeros(0, dtype=object)
        self.mode: NDArray[np.object_] = np.zeros(0, dtype=object)
        self.source: NDArray[np.object_] = np.zeros(0, dtype=object)
        self.reason: NDArray[np.object_] = np.zeros(0, dtype=object)
        #: The set in force was copied from the other direction (this one had nothing of its
        #: own to send), so it follows the other direction until it has.
        self.follows: NDArray[np.bool_] = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self.ids)

    def _grow(self, size: int) -> None:
        def more(old: NDArray[_T], fill: object) -> NDArray[_T]:
            new = np.full((size, *old.shape[1:]), fill, dtype=old.dtype)
            new[:len(old)] = old
            return new

        self.weights = more(self.weights, 0)
        self.present = more(self.present, False)
        self.usable = more(self.usable, False)
        self.caps = more(self.caps, np.nan)
        self.classes = self.classes.grown(size)
        self.has = more(self.has, False)
        self.version = more(self.version, 0)
        self.published_s = more(self.published_s, -np.inf)
        self.aggregate = more(self.aggregate, 0.0)
        self.decided_s = more(self.decided_s, np.nan)
        self.unpublished = more(self.unpublished, False)
        self.applied = more(self.applied, None)
        self.rules_applied = more(self.rules_applied, None)
        self.mode = more(self.mode, "")
        self.source = more(self.source, "")
        self.reason = more(self.reason, "")
        self.follows = more(self.follows, False)

    def rows(self, cpe_ids: Sequence[str]) -> NDArray[np.intp]:
        """The row of each CPE, adding (and restoring) CPEs seen for the first time."""
        out = np.empty(len(cpe_ids), dtype=np.intp)
        for i, cpe_id in enumerate(cpe_ids):
            r = self.index.get(cpe_id)
            if r is None:
                r = self._add(cpe_id)
            out[i] = r
        return out

    def _add(self, cpe_id: str) -> int:
        r = len(self.ids)
        if r >= len(self.has):
            self._grow(max(64, 2 * r))
        self.ids.append(cpe_id)
        self.index[cpe_id] = r
        stored = self._restore(cpe_id)
        if stored is not None:
            record = stored.direction(self.direction)
            for j, wat in enumerate(self.wats):
                if wat in record.weights:
                    self.present[r, j] = True
                    self.weights[r, j] = int(record.weights[wat])
                self.usable[r, j] = wat in record.usable
                if wat in record.caps_mbps:
                    self.caps[r, j] = float(record.caps_mbps[wat])
            self.classes.restore(r, record.classes, self.wats)
            self.has[r] = True
            self.version[r] = stored.version
            self.published_s[r] = stored.time_s
            self.aggregate[r] = record.aggregate_mbps
            self.mode[r], self.source[r] = record.mode, record.policy_source
            self.reason[r] = record.reason
        return r

    def reset(self, rows: NDArray[np.intp]) -> None:
        """Rows ``rows`` as if their CPEs had never been published or decided (their ids and
        row numbers stay)."""
        self.weights[rows] = 0
        self.present[rows] = False
        self.usable[rows] = False
        self.caps[rows] = np.nan
        self.classes.clear(rows)
        self.has[rows] = False
        self.version[rows] = 0
        self.published_s[rows] = -np.inf
        self.aggregate[rows] = 0.0
        self.decided_s[rows] = np.nan
        self.unpublished[rows] = False
        self.applied[rows] = None
        self.rules_applied[rows] = None
        self.mode[rows] = ""
        self.source[rows] = ""
        self.reason[rows] = ""
        self.follows[rows] = False

    def in_force(self, r: int) -> WeightDecision:
        """The decision in force at row ``r`` (as published)."""
        return row_decision(self.wats, self.weights[r], self.present[r], self.usable[r],
                            float(self.aggregate[r]), str(self.reason[r]))

    def store(self, rows: NDArray[np.intp], batch: DirectionBatch, versions: NDArray[np.int64],
              time_s: float, follows: NDArray[np.bool_] | None = None) -> None:
        """Record that row ``rows[i]`` published row ``i`` of ``batch`` (one vector
        assignment per column); ``follows[i]``: that set was the other direction's."""
        self.present[rows] = batch.present
        self.weights[rows] = np.where(batch.present, batch.weights, 0)
        self.usable[rows] = batch.usable & batch.present
        self.caps[rows] = np.nan if batch.caps_mbps is None else batch.caps_mbps
        if batch.classes is None:
            self.classes.clear(rows)
        else:
            self.classes.put(rows, batch.classes)
        self.has[rows] = True
        self.version[rows] = versions
        self.published_s[rows] = time_s
        self.aggregate[rows] = batch.aggregate_mbps
        self.mode[rows] = batch.modes
        self.source[rows] = batch.sources
        self.reason[rows] = batch.reasons
        self.unpublished[rows] = False
        self.follows[rows] = False if follows is None else follows

    def policy_changed(self, rows: NDArray[np.intp], policy: Policy) -> NDArray[np.bool_]:
        """Rows whose decision in force was made under a policy other than ``policy`` (rows
        with no known policy, e.g. restored after a restart, have not changed)."""
        return np.array([a is not None and a is not policy and a != policy
                         for a in self.applied[rows].tolist()], dtype=bool)

    def apply(self, rows: NDArray[np.intp], policy: Policy, rules: tuple[ClassRule, ...]
              ) -> None:
        """Rows ``rows`` were decided under ``policy`` and, for their classes, ``rules``."""
        self.applied[rows] = policy
        # One object per element: a tuple given as it is would be taken for a sequence.
        same = np.empty(len(rows), dtype=object)
        same.fill(rules)
        self.rules_applied[rows] = same

    def rules_changed(self, rows: NDArray[np.intp], rules: tuple[ClassRule, ...]
                      ) -> NDArray[np.bool_]:
        """Rows whose classes in force were decided under other rules (unknown: not)."""
        return np.array([a is not None and a is not rules and a != rules
                         for a in self.rules_applied[rows].tolist()], dtype=bool)
