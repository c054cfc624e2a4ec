"""How the rows of a tick's KPI frame map onto CPEs, directions and WAT columns, and the dense
(CPE, WAT) inputs of one direction's decisions made from them (:class:`RowMap`, :func:`inputs`).

The loop caches a :class:`RowMap` while the frame's row arrays persist (the in-memory intake
keeps them between ticks when no CPE came or went).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core.caps import CAP_MAX_MBPS
from xapp.core.decisions import Inputs
from xapp.core.ewma import CAPPED_COLUMN
from xapp.core.fleet import FleetTable
from xapp.core.forecast import DIRECTIONS, KpiFrame
from xapp.core.policy import KNOWN_WATS
from xapp.core.thresholds import LOSS_COLUMN
from xapp.core.weights import WeightError

Array = NDArray[np.float64]


@dataclass(frozen=True)
class DirRows:
    """The frame rows of one direction and where they go."""

    rows: NDArray[np.intp]  # frame rows of this direction
    pos: NDArray[np.intp]  # -> position among cpe_ids
    col: NDArray[np.intp]  # -> WAT column, -1 for an unknown WAT
    seen: NDArray[np.bool_]  # position -> the CPE has rows of this direction


@dataclass(frozen=True)
class RowMap:
    """How the rows of a frame map onto CPEs, directions and WAT columns (cached while rows
    persist)."""

    cpe_ids: list[str]
    fleet_rows: NDArray[np.intp]  # position -> FleetTable row (the same in both tables)
    dirs: dict[str, DirRows]
    unknown: int
    duplicates: int


def row_map(frame: KpiFrame, fleets: Iterable[FleetTable]) -> RowMap:
    """How the rows of ``frame`` map onto CPEs (adding new ones to ``fleets``), directions
    and WAT columns."""
    ids, pos = np.unique(frame.cpe.astype(str), return_inverse=True)
    pos = pos.astype(np.intp)
    wat_names, wat_pos = np.unique(frame.wat.astype(str), return_inverse=True)
    known = {w: j for j, w in enumerate(KNOWN_WATS)}
    col = np.array([known.get(w, -1) for w in wat_names.tolist()], dtype=np.intp)[wat_pos]
    ok = col >= 0
    k = len(KNOWN_WATS)
    direction = (frame.direction if frame.direction is not None
                 else np.full(len(frame), "", dtype="<U2"))
    dcode = np.searchsorted(np.array(DIRECTIONS), direction)
    pairs = (pos[ok] * len(DIRECTIONS) + dcode[ok]) * k + col[ok]
    duplicates = int(len(pairs) - len(np.unique(pairs)))
    cpe_ids = ids.tolist()
    fleet_rows = [fleet.rows(cpe_ids) for fleet in fleets]
    if any(not np.array_equal(fleet_rows[0], r) for r in fleet_rows[1:]):
        raise WeightError("the per-direction fleet tables disagree on CPE rows")
    dirs = {}
    for d in DIRECTIONS:
        rows = np.flatnonzero(direction == d).astype(np.intp)
        seen = np.zeros(len(cpe_ids), dtype=bool)
        seen[pos[rows]] = True
        dirs[d] = DirRows(rows, pos[rows], col[rows], seen)
    return RowMap(cpe_ids=cpe_ids, fleet_rows=fleet_rows[0], dirs=dirs,
                  unknown=int((~ok).sum()), duplicates=duplicates)


def with_caps_in_force(frame: KpiFrame, rm: RowMap, fleets: Mapping[str, FleetTable]
                       ) -> KpiFrame:
    """``frame`` with the column :data:`CAPPED_COLUMN`: 1 on the rows whose WAT the set in force
    for their CPE and direction caps (a rate cap below :data:`~xapp.core.caps.CAP_MAX_MBPS`),
    else 0.  The estimators probe a capped WAT more sparingly (:mod:`xapp.core.ewma`)."""
    capped = np.zeros(len(frame))
    for d, dr in rm.dirs.items():
        ok = dr.col >= 0
        caps = fleets[d].caps[rm.fleet_rows[dr.pos[ok]], dr.col[ok]]
        capped[dr.rows[ok]] = np.isfinite(caps) & (caps < CAP_MAX_MBPS)
    return dataclasses.replace(frame, values={**frame.values, CAPPED_COLUMN: capped})


def inputs(frame: KpiFrame, rm: RowMap, dr: DirRows, median: Array, lower: Array,
           skipped: dict[str, int]) -> Inputs:
    """Dense (CPE, WAT) arrays of capacity, lower bound, presence, up, RTT and loss of the
    rows of one direction (``median`` and ``lower``: the frame's forecasts); rows the loop
    cannot use are counted in ``skipped`` by reason."""
    m, k = len(rm.cpe_ids), len(KNOWN_WATS)
    ok = dr.col >= 0
    fr, p, c = dr.rows[ok], dr.pos[ok], dr.col[ok]
    cap = np.full((m, k), np.nan)
    low = np.full((m, k), np.nan)
    rtt = np.full((m, k), np.nan)
    loss = np.full((m, k), np.nan)
    up_col = np.full((m, k), np.nan)
    present = np.zeros((m, k), dtype=bool)
    cap[p, c] = median[fr]
    low[p, c] = lower[fr]
    rtt[p, c] = frame.column("rtt_ms")[fr]
    loss[p, c] = frame.column(LOSS_COLUMN)[fr]
    up_col[p, c] = frame.column("up")[fr]
    present[p, c] = True
    if rm.unknown:
        skipped["unknown_wat"] = rm.unknown
    if rm.duplicates:
        skipped["duplicate"] = rm.duplicates
    up = present & (up_col != 0)
    good = np.isfinite(cap) & (cap >= 0)
    missing = present & ~good
    if missing.any():
        skipped["no_forecast"] = skipped.get("no_forecast", 0) + int(missing.sum())
        # Tried at the CPE's smallest forecast (1 Mbps when it has none), so it is measured.
        known = np.where(good & (cap > 0), cap, np.inf).min(axis=1, keepdims=True)
        trial = np.where(np.isfinite(known), known, 1.0)
        cap = np.where(missing, np.where(up, trial, 0.0), cap)
        low = np.where(missing, cap, low)
    low = np.where(np.isfinite(low), np.clip(low, 0.0, cap), cap)
    cap = np.where(present, cap, 0.0)
    low = np.where(present, low, 0.0)
    rtt = np.where(np.isfinite(rtt) & (rtt >= 0), rtt, np.nan)
    loss = np.where(np.isfinite(loss) & (loss >= 0) & (loss <= 100), loss, np.nan)
    return Inputs(cap, low, present, up, rtt, loss)
