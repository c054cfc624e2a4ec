"""EWMA capacity estimator that knows delivered throughput is censored by the WRR weights.

Under WRR with ``cwnd_limited=N`` each WAT carries exactly its share ``w_i / sum(w)`` of the
connection, so only the *bottleneck* WAT (the one whose subflow is cwnd-limited: it carried all
it could) reports its capacity; every other WAT reports a lower bound.  A plain EWMA of delivered
throughput reads that lower bound as the capacity, gives the WAT a small weight, sees it carry
little, and locks itself in (the design brief's "trap").  This estimator breaks the loop:

* a **saturated** row (``saturated >= SATURATED_MIN``: the subflow was the bottleneck most of the
  period) is a measurement: ``est += alpha * (delivered - est)``, with ``alpha_down`` when the
  measurement is below the estimate (over-estimating is the expensive error under WRR);
* an **unsaturated** row is a lower bound, and the estimate explores upwards like TCP probes for
  bandwidth: ``est = max(delivered, est * (1 + g))`` capped at ``headroom * delivered``, where
  the growth ``g`` restarts at ``explore_pct`` after each saturated period and grows by
  ``explore_accel`` per unsaturated period up to ``explore_max_pct``.  A row never saturated
  yet knows nothing about its capacity and grows by ``slow_start_pct`` per period (like TCP's
  slow start, which doubles every RTT until the first loss), so a loop that starts from plain
  round-robin finds the capacities in a few periods rather than tens.
  A WAT that carried nothing (weight 0, or an agent with no traffic) still explores from its
  estimate, or a WAT dropped once would never be measured again; there ``headroom`` bounds the
  estimate by the WAT's last measurement instead (``headroom`` times it), since 0 delivered
  bounds nothing: unbounded, a run of such periods grows the estimate by half each period
  (``make e2e`` saw a Wi-Fi forecast reach 1.7e14 Mbit/s after 70 s of telemetry without KPIs).
  The optimism is bounded and self-correcting: a WAT whose estimate overshoots
  gets a larger weight, becomes the bottleneck, and its next (saturated) measurement pulls the
  estimate back; a WAT whose capacity rose keeps growing ever faster until it is found;
* on a **capped** row (column :data:`CAPPED_COLUMN`: a rate cap in force holds the WAT), a
  **probe that found nothing** waits before the next: exploration that ends in a measurement
  no more than :data:`REPROBE_FOUND` above where it started (the WAT's capacity has not moved)
  holds the estimate for ``reprobe_wait`` unsaturated periods, twice as long after each such
  probe up to ``reprobe_wait_max``, and a probe that found more (above where it started and
  above the level the waits held) restarts the count.  The cap follows the forecast, and
  each probe of a capped WAT ends with a period or two of the cap above the path, its queue in
  the network instead of at the agent: on the real stack (``bench/bench_realstack.py
  --scenario wifi-walk --policy rules_priority``, issue 35) NR's urgent cap rose from 0.9 of
  the last measurement to above the path every five periods, and the control loop's answers
  were late in just those periods.  A wait never holds a level a measurement fell short of:
  a probe that ends more than :data:`REPROBE_FOUND` under where it started, or a measurement
  that far under the estimate during a wait, ends the wait, and the WAT is probed again from
  its lowered estimate with its count kept (one period of head-of-line blocking on the real
  stack, NR delivering 9 of its 16 Mbit/s with its subflow saturated, had held NR's urgent cap
  at 9.4 Mbit/s for eight periods).  Rows that are not capped (a
  WRR share, an uncapped load-balancing WAT) explore without waiting: there a probe costs at
  most that period's split, and waiting cost the twin's wifi-walk 1.8 % of its aggregate.  The
  model, which reads the radio, still moves the forecast while the explorer waits
  (:mod:`xapp.core.exploration`);
* a row reported **down** (``up == 0``) forecasts 0 and keeps its estimate for when it returns;
* without a saturation column (NaN), rows are treated as saturated: the classic EWMA.

Frames carry the columns ``delivered_mbps`` (mean over the period), ``saturated`` (fraction
of the period the subflow was cwnd-limited, 0..1) and optionally ``up`` (1/0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from xapp.core.backoff import doubled
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.kpis import SATURATED_MIN

Array = NDArray[np.float64]

#: A probe found more when its measurement is above the estimate it started from by this much.
REPROBE_FOUND = 0.10
#: The frame column that marks a row whose WAT a rate cap in force holds (1; 0 or NaN: none):
#: set by the control loop (:func:`xapp.core.rowmap.with_caps_in_force`), not a KPI.
CAPPED_COLUMN = "capped"


class EwmaEstimator:
    """Per-(series, wat) EWMA (series: CPE and direction) of delivered throughput with
    censoring and bounded exploration.

    Parameters
    ----------
    alpha : float, default=0.5
        Weight of a new saturated measurement above the estimate, in (0, 1].
    alpha_down : float, default=0.8
        Weight of a new saturated measurement below the estimate, in (0, 1].
    explore_pct : float, default=2.0
        Growth of an unsaturated WAT's estimate in the first period after it was saturated,
        in percent (0 disables exploration).  Near an access point a walking CPE's Wi-Fi
        capacity drifts by a few percent per second (about 1 dB/s of path loss); exploring at
        a similar pace keeps a rising WAT's share close to its capacity.
    explore_accel : float, default=1.5
        Factor by which that growth increases for each further unsaturated period (>= 1).
    explore_max_pct : float, default=50.0
        Largest growth per period, in percent; also the growth of rows never saturated.
    headroom : float, default=4.0
        An unsaturated WAT's estimate never exceeds ``headroom`` times what it delivered, or,
        when it delivered nothing, ``headroom`` times its last measurement.
    censoring : bool, default=True
        False reads every measurement as the capacity (the history-only EWMA that locks in).
    lower_z : float, default=0.0
        The lower forecast is ``median - lower_z * sd`` of the saturated measurements.
    slow_start_pct : float, default=300.0
        Growth per period of a row never saturated yet, in percent (still capped by
        ``headroom`` times what it delivered); at most ``(headroom - 1) * 100`` is useful.
    reprobe_wait : int, default=4
        Unsaturated periods a row holds its estimate after a probe that found nothing (0: no
        wait); doubled after each further such probe.
    reprobe_wait_max : int, default=32
        The longest such wait, in periods.

    Attributes
    ----------
    keys_ : ndarray of str
        Row keys ``cpe/wat`` in the order of the last frame.
    estimate_ : ndarray of float
        Current capacity estimates (Mbps), NaN before a row's first measurement.
    anchor_ : ndarray of float
        Each row's last measurement (saturated, or its first row), Mbps; NaN before it.
    """

    keys_: NDArray[np.str_]
    estimate_: Array
    anchor_: Array
    var_: Array
    growth_: Array
    wait_: NDArray[np.int64]  # unsaturated periods left to hold the estimate
    backoff_: NDArray[np.int64]  # the wait after the next probe that finds nothing
    probing_: NDArray[np.bool_]  # exploring since its last measurement
    baseline_: Array  # the estimate the probe started from
    held_: Array  # the level the last probe that found nothing measured (NaN: none)

    def __init__(self, alpha: float = 0.5, alpha_down: float = 0.8, explore_pct: float = 2.0,
                 explore_accel: float = 1.5, explore_max_pct: float = 50.0,
                 headroom: float = 4.0, censoring: bool = True, lower_z: float = 0.0,
                 slow_start_pct: float = 300.0, reprobe_wait: int = 4,
                 reprobe_wait_max: int = 32) -> None:
        self.alpha = alpha
        self.alpha_down = alpha_down
        self.explore_pct = explore_pct
        self.explore_accel = explore_accel
        self.explore_max_pct = explore_max_pct
        self.headroom = headroom
        self.censoring = censoring
        self.lower_z = lower_z
        self.slow_start_pct = slow_start_pct
        self.reprobe_wait = reprobe_wait
        self.reprobe_wait_max = reprobe_wait_max
        self._cpe_ref: NDArray[np.str_] | None = None
        self._wat_ref: NDArray[np.str_] | None = None

    def _validate(self) -> None:
        for name in ("alpha", "alpha_down"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if not 0.0 <= self.explore_pct <= self.explore_max_pct <= 1000.0:
            raise ValueError("need 0 <= explore_pct <= explore_max_pct <= 1000, got "
                             f"{self.explore_pct} and {self.explore_max_pct}")
        if self.explore_accel < 1.0:
            raise ValueError(f"explore_accel must be >= 1, got {self.explore_accel}")
        if self.headroom < 1.0:
            raise ValueError(f"headroom must be >= 1, got {self.headroom}")
        if not 0.0 <= self.slow_start_pct <= 10_000.0:
            raise ValueError(f"slow_start_pct must be in [0, 10000], got {self.slow_start_pct}")
        if not 0 <= self.reprobe_wait <= self.reprobe_wait_max:
            raise ValueError("need 0 <= reprobe_wait <= reprobe_wait_max, got "
                             f"{self.reprobe_wait} and {self.reprobe_wait_max}")
        if self.lower_z < 0.0:
            raise ValueError(f"lower_z must be >= 0, got {self.lower_z}")

    def _align(self, frame: KpiFrame) -> None:
        """Reorder the state to the frame's rows (new rows start unknown)."""
        if frame.series is self._cpe_ref and frame.wat is self._wat_ref:
            return  # the same row arrays as last tick (the twin, the loop): same order
        self._cpe_ref, self._wat_ref = frame.series, frame.wat
        # Per series (CPE and direction): a WAT's dl and ul capacities are separate histories.
        keys = np.char.add(np.char.add(frame.series.astype(str), "/"), frame.wat.astype(str))
        if not hasattr(self, "keys_"):
            self._validate()
            self.keys_ = keys
            for name, blank in self._state_blanks():
                setattr(self, name, np.full(len(keys), blank))
            return
        if len(keys) == len(self.keys_) and np.array_equal(keys, self.keys_):
            return
        index = {k: i for i, k in enumerate(self.keys_.tolist())}
        old = np.array([index.get(k, -1) for k in keys.tolist()], dtype=np.int64)
        known = old >= 0
        for name, blank in self._state_blanks():
            now = np.full(len(keys), blank)
            now[known] = getattr(self, name)[old[known]]
            setattr(self, name, now)
        self.keys_ = keys

    def _state_blanks(self) -> tuple[tuple[str, Any], ...]:
        """Each per-row state array and its value for a row not seen before."""
        return (("estimate_", np.nan), ("anchor_", np.nan), ("var_", 0.0),
                ("growth_", self._start_growth()), ("wait_", np.int64(0)),
                ("backoff_", np.int64(0)),
                ("probing_", False), ("baseline_", np.nan), ("held_", np.nan))

    def _start_growth(self) -> float:
        return max(self.slow_start_pct, self.explore_max_pct) / 100.0

    def _judge_probes(self, meas: NDArray[np.bool_], d: Array, est: Array) -> None:
        """The wait after each probe that ``meas`` ends, and the end of a wait that a
        measurement well under the estimate interrupts (see the class docstring)."""
        ends = np.flatnonzero(meas & self.probing_)
        waiting = np.flatnonzero(meas & ~self.probing_ & (self.wait_ > 0))
        if len(ends):
            start = self.baseline_[ends]
            # Judged against the level the waits hold too, so finding it again after a
            # measurement that fell short is not finding more.
            more = d[ends] > np.fmax(start, self.held_[ends]) * (1.0 + REPROBE_FOUND)
            short = ~more & (d[ends] < start * (1.0 - REPROBE_FOUND))
            found, fell, same = ends[more], ends[short], ends[~more & ~short]
            self.backoff_[found] = 0
            self.held_[found] = np.nan
            self.wait_[found] = 0
            self.wait_[fell] = 0  # its count and the level held stay
            self.backoff_[same] = doubled(self.backoff_[same], self.reprobe_wait,
                                          self.reprobe_wait_max)
            self.held_[same] = d[same]
            self.wait_[same] = self.backoff_[same]
            self.probing_[ends] = False
        if len(waiting):
            fell = waiting[d[waiting] < est[waiting] * (1.0 - REPROBE_FOUND)]
            self.wait_[fell] = 0

    def step(self, frame: KpiFrame) -> CapacityForecast:
        """Ingest one control period and forecast the next one for the same rows."""
        self._align(frame)
        d = frame.column("delivered_mbps")
        sat_col = frame.column("saturated")
        up = frame.column("up")
        seen = np.isfinite(d) & (up != 0)
        saturated = ~np.isfinite(sat_col) | (sat_col >= SATURATED_MIN) | (not self.censoring)
        est = self.estimate_
        fresh = seen & ~np.isfinite(est)
        est[fresh] = d[fresh]

        meas = seen & saturated & ~fresh
        capped = frame.column(CAPPED_COLUMN) > 0
        self._judge_probes(meas, d, est)
        self.anchor_[fresh | meas] = d[fresh | meas]
        diff = d[meas] - est[meas]
        alpha = np.where(diff < 0, self.alpha_down, self.alpha)
        est[meas] += alpha * diff
        self.var_[meas] = (1.0 - alpha) * (self.var_[meas] + alpha * diff * diff)
        self.growth_[seen & saturated] = self.explore_pct / 100.0

        bound = seen & ~saturated & np.isfinite(est) & ~fresh
        if capped.any():  # only a capped row waits
            waiting = np.flatnonzero(bound & capped & (self.wait_ > 0))
            est[waiting] = np.maximum(est[waiting], d[waiting])
            self.wait_[waiting] -= 1
            self.growth_[waiting] = self.explore_pct / 100.0
            bound[waiting] = False
        # Every probe is judged, so a WAT capped since its probe started (an urgent class's,
        # whose first probe is before its cap) waits after it.
        starts = np.flatnonzero(bound & ~self.probing_)
        self.baseline_[starts] = est[starts]
        self.probing_ |= bound
        g = self.growth_[bound]
        db = d[bound]
        grown = np.maximum(db, est[bound] * (1.0 + g))
        # What bounds the optimism: what the WAT delivered, or when that was nothing, its last
        # measurement; never below where the estimate already is.
        basis = np.where(db > 0, db, self.anchor_[bound])
        cap = np.maximum(self.headroom * np.nan_to_num(basis, nan=0.0), est[bound])
        est[bound] = np.minimum(grown, cap)
        top = self.explore_max_pct / 100.0
        # Slow-start rows (growth above the exploration maximum) keep their growth.
        self.growth_[bound] = np.where(g > top, g, np.minimum(top, g * self.explore_accel))

        down = up == 0
        median = np.where(down, 0.0, est)
        lower = np.where(down, 0.0, np.maximum(0.0, est - self.lower_z * np.sqrt(self.var_)))
        return CapacityForecast(median_mbps=median.copy(), lower_mbps=lower)
