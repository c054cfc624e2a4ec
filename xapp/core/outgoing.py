"""What one tick sends: each direction's sets gathered group by group (:class:`Outgoing`), and
the messages they make (:func:`message_sets`), one per CPE with both directions' sets.

A CPE goes out when either direction has a set for it.  The direction that has none goes with
its set in force; a direction with no set of its own (no KPI rows, or no usable WAT) goes as the
other's, without the WATs its own policy excludes (the rules are in :mod:`xapp.core.loop`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from xapp.core.caps import caps_in_force
from xapp.core.class_columns import ClassColumns
from xapp.core.columns import Appliers, Columns
from xapp.core.fleet import FleetTable
from xapp.core.forecast import DIRECTIONS
from xapp.core.policy import KNOWN_WATS
from xapp.core.policy_book import PolicyResolver

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]


@dataclass
class Outgoing:
    """The sets of one direction of one tick's publish, gathered group by group (a part per
    :meth:`add`)."""

    rows: list[NDArray[np.intp]] = field(default_factory=list)
    weights: list[NDArray[np.int64]] = field(default_factory=list)
    present: list[NDArray[np.bool_]] = field(default_factory=list)
    usable: list[NDArray[np.bool_]] = field(default_factory=list)
    aggregate: list[Array] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    #: Per part: its caps (NaN: none), or None when the part has none at all.
    caps: list[Array | None] = field(default_factory=list)
    #: Per part: its classes, or None when the part has none at all.
    classes: list[ClassColumns | None] = field(default_factory=list)

    def add(self, rows: NDArray[np.intp], weights: NDArray[np.int64],
            present: NDArray[np.bool_], usable: NDArray[np.bool_], aggregate: Array,
            modes: list[str], reasons: list[str], sources: list[str],
            caps: Array | None = None, classes: ClassColumns | None = None) -> None:
        """The sets of fleet rows ``rows`` (nothing when there are none)."""
        if len(rows) == 0:
            return
        self.caps.append(caps)
        self.classes.append(classes)
        self.rows.append(rows)
        self.weights.append(weights)
        self.present.append(present)
        self.usable.append(usable)
        self.aggregate.append(aggregate)
        self.modes += modes
        self.reasons += reasons
        self.sources += sources

    def in_force(self, fleet: FleetTable, rows: NDArray[np.intp], appliers: Appliers) -> None:
        """Re-send the decisions in force at ``rows`` as they are (with their caps and classes
        while the applier still takes them)."""
        if len(rows) == 0:
            return
        self.add(rows, fleet.weights[rows], fleet.present[rows], fleet.usable[rows],
                 fleet.aggregate[rows], fleet.mode[rows].tolist(), fleet.reason[rows].tolist(),
                 fleet.source[rows].tolist(),
                 caps_in_force(fleet.caps, rows, appliers.rate_capped),
                 appliers.classes_in_force(fleet.classes, rows))

    def columns(self) -> Columns:
        """Every part in order as one block (at least one part); a part without caps
        (classes) has NaN caps (no classes)."""
        return Columns(np.concatenate(self.weights), np.concatenate(self.present),
                       np.concatenate(self.usable), np.concatenate(self.aggregate),
                       np.array(self.modes, dtype=object), np.array(self.reasons, dtype=object),
                       np.array(self.sources, dtype=object),
                       np.concatenate([np.full(w.shape, np.nan) if c is None else c
                                       for w, c in zip(self.weights, self.caps, strict=True)]),
                       ClassColumns.concat([
                           ClassColumns.empty(*w.shape) if c is None else c
                           for w, c in zip(self.weights, self.classes, strict=True)]))


@dataclass(frozen=True)
class MessageSets:
    """The messages of one tick: a fleet row per message, both directions' sets."""

    rows: NDArray[np.intp]
    sets: dict[str, Columns]
    #: Per direction and message: the set is the other direction's.
    follows: dict[str, Mask]


def message_sets(fleets: Mapping[str, FleetTable], out: Mapping[str, Outgoing],
                 lent: Mapping[str, Outgoing], seen: Mapping[str, NDArray[np.intp]],
                 appliers: Mapping[str, Appliers],
                 policies: Callable[[], PolicyResolver]) -> MessageSets:
    """The fleet rows of the messages to send, each direction's set for them and whether it
    follows the other direction (both sets go in every message).

    Per direction: ``out`` holds the sets decided from its own KPI rows, ``lent`` those decided
    from the other direction's; ``seen`` the fleet rows of the CPEs with KPI rows of it this
    tick; ``appliers`` what each fleet row's applier takes (caps, classes).  ``policies`` gives
    the policies in force (asked only when a set is copied from the other direction)."""
    # A mask over the fleet's rows rather than np.unique: no sort, the same sorted rows.
    sending = np.zeros(len(fleets["ul"]), dtype=bool)
    for o in (*out.values(), *lent.values()):
        for part in o.rows:
            sending[part] = True
    rows = np.flatnonzero(sending)
    cols: dict[str, Columns] = {}
    own: dict[str, NDArray[np.bool_]] = {}
    decided: dict[str, NDArray[np.bool_]] = {}
    for d in DIRECTIONS:
        fleet = fleets[d]
        c = Columns.in_force(fleet, rows, appliers[d])
        fresh = {}
        for name, o in (("own", out[d]), ("lent", lent[d])):
            fresh[name] = np.zeros(len(rows), dtype=bool)
            if o.rows:
                at = np.searchsorted(rows, np.concatenate(o.rows))
                c.put(at, o.columns())
                fresh[name][at] = True
        has_rows = np.zeros(len(fleet), dtype=bool)
        has_rows[seen[d]] = True
        own[d] = fresh["own"] | (fleet.has[rows] & ~fleet.follows[rows] & has_rows[rows])
        # A set decided under this direction's policy from the other's forecasts, now or in
        # force: it goes as it is.
        decided[d] = fresh["lent"] | (fleet.has[rows] & fleet.follows[rows])
        cols[d] = c
    follows: dict[str, NDArray[np.bool_]] = {}
    for d, other in zip(DIRECTIONS, DIRECTIONS[::-1], strict=True):
        follows[d] = ~own[d] & own[other]
        # What is left has no decision under its own policy: none of its WATs usable (a floor
        # no WAT meets, or the CPE has only WATs it excludes).  It goes as the other's set
        # without the WATs its own policy excludes, or as it is when that leaves nothing: a
        # message needs both sets, and holding it back would stop steering the other
        # direction too (issue 33).
        copied = follows[d] & ~decided[d]
        cols[d].follow(copied, cols[other], other)
        if copied.any():
            cols[d].exclude(np.flatnonzero(copied),
                            excluded_wats(policies(), d, fleets[d].ids, rows[copied]))
    # Neither direction has a set of its own (cannot happen while every row sent comes from a
    # decision of some direction): only what is in force in both may go again.  A set left
    # with no weight at all cannot go either.
    orphan = (~own["dl"] & ~own["ul"]) | ~(cols["dl"].weights > 0).any(axis=1) \
        | ~(cols["ul"].weights > 0).any(axis=1)
    keep = ~orphan | (fleets["dl"].has[rows] & fleets["ul"].has[rows])
    if not keep.all():
        at = np.flatnonzero(keep)
        rows = rows[at]
        cols = {d: c.subset(at) for d, c in cols.items()}
        follows = {d: f[at] for d, f in follows.items()}
    return MessageSets(rows, cols, follows)


def excluded_wats(resolver: PolicyResolver, direction: str, ids: list[str],
                  rows: NDArray[np.intp]) -> Mask:
    """(rows, WAT) the effective policy of ``direction`` excludes, per fleet row (``ids``:
    the CPE of each fleet row)."""
    out = np.zeros((len(rows), len(KNOWN_WATS)), dtype=bool)
    for i, r in enumerate(rows.tolist()):
        excluded = resolver.for_cpe(ids[r])[0].for_direction(direction).excluded
        out[i] = [w in excluded for w in KNOWN_WATS]
    return out
