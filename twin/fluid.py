"""Fluid model of one MPTCP connection per CPE under WRR with ``cwnd_limited=N``.

With weights ``w`` a WRR round sends exactly ``w_i`` packets on WAT *i*, so the connection runs
at ``T(w) = min over used WATs of C_i * sum(w) / w_i``
(:func:`xapp.core.weights.fluid_aggregate_batch`)
and WAT *i* delivers ``T * w_i / sum(w)``.  The WAT reaching the minimum is the bottleneck: its
subflow is cwnd-limited (it carried all it could); every other WAT carries less than it could.

Assumptions, each a simplification the reader should know:

* a WAT whose capacity is 0 (out of range, blocked) is skipped by the scheduler, as if its weight
  were 0: MPTCP stops scheduling on a failed subflow and the CPE agent reacts to a link going
  down within tens of milliseconds, so a dead WAT does not stall the connection for a whole
  control period (the recovery delay of section 6.4 is not modelled);
* the application is backlogged (iperf3-like) and buffers do not smooth capacity across steps;
* weights decided from the observations of steps ``[t0, t1)`` are in force from step ``t1``.

Open-loop policies give a whole :class:`Plan` up front and are simulated in one vectorised pass;
closed-loop ones (:class:`DuplexLoop`) are called once per control period with what happened in
it.  All arrays are ``(steps, n_cpes, k)`` in the scenario's WAT order.

Each direction is its own connection of this model (a backlogged transfer from the proxy to the
CPE for ``dl``, from the CPE to the proxy for ``ul``), with that direction's capacities and its
own weights: an MPTCP scheduler decides at the sender, the proxy for ``dl`` and the CPE for
``ul``.  :func:`simulate_duplex` runs both under one controller (:class:`DuplexLoop`), as the
xApp's loop decides both sets each tick; the open-loop policies run on one direction's view of
the scenario (:meth:`twin.scenarios.Scenario.toward`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from twin.scenarios import Scenario

Array = NDArray[np.float64]
IntArray = NDArray[np.integer[Any]]

#: A WAT within this fraction of the bottleneck rate also counts as cwnd-limited.
SATURATION_TOLERANCE = 0.01
#: Keep full per-step traces only up to this many (step, cpe) rows (memory).
TRACE_ROWS = 2_000_000


@dataclass(frozen=True)
class Plan:
    """Weights over time from an open-loop policy."""

    weights: IntArray  # (steps, n, k)
    #: Fraction of each WAT's capacity the connection may use (probe traffic); None means 1.
    available: Array | None = None


@dataclass(frozen=True)
class Observation:
    """What happened to the connection during steps ``[t0, t1)``."""

    t0: int
    t1: int
    delivered_mbps: Array  # (b, n, k)
    saturated: NDArray[np.bool_]  # (b, n, k): the subflow was cwnd-limited
    rtt_ms: Array  # (b, n, k), NaN where the WAT is down
    up: NDArray[np.bool_]  # (b, n, k)


class DuplexLoop(Protocol):
    """A policy that steers both directions at once (weights per direction)."""

    period_steps: int

    def start(self, scenario: Scenario) -> Mapping[str, IntArray]:
        """Weights (n, k) per direction in force from step 0."""
        ...

    def update(self, obs: Mapping[str, Observation]) -> Mapping[str, IntArray]:
        """Weights (n, k) per direction in force from step ``t1`` of the observations (one
        per direction, of the same steps)."""
        ...


@dataclass
class SimResult:
    """Outcome of one simulation; traces are None for runs too large to keep them."""

    scenario: str
    policy: str
    dt_s: float
    wats: tuple[str, ...]
    #: The direction simulated (``dl``: proxy to CPE; ``ul``: CPE to proxy).
    direction: str
    aggregate_mbps: Array  # (steps, n)
    oracle_mbps: Array | None  # (steps, n), filled by the caller that ran the oracle
    capacity_sum_mbps: Array  # (steps, n)
    per_wat_mean_mbps: Array  # (n, k): time-average delivered per WAT
    weight_updates: NDArray[np.int64]  # (n,)
    weights: NDArray[np.int16] | None = None  # (steps, n, k)
    delivered_mbps: NDArray[np.float32] | None = None  # (steps, n, k)
    extra: dict[str, object] = field(default_factory=dict)


def deliver(capacity: Array, weights: IntArray
            ) -> tuple[Array, Array, NDArray[np.bool_]]:
    """Per-WAT delivered rate, aggregate T and the cwnd-limited mask for arrays (..., k).

    ``weights`` has the shape of ``capacity`` or broadcasts to it (one set held for a block).
    T is :func:`xapp.core.weights.fluid_aggregate_batch`'s formula, computed here once so that the
    per-WAT rates are reused for the cwnd-limited mask (this runs every control period).
    """
    w = np.where(capacity > 0, weights, 0)
    total = w.sum(axis=-1, keepdims=True)
    wf = w.astype(np.float64)
    used = w > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(used, capacity * total / wf, np.inf)
        share = np.where(total > 0, wf / total, 0.0)
    t = rate.min(axis=-1, keepdims=True)
    t = np.where(np.isfinite(t), t, 0.0)
    saturated = used & (rate <= t * (1.0 + SATURATION_TOLERANCE))
    return t * share, t[..., 0], saturated


def _count_updates(prev: IntArray | None, block: IntArray) -> NDArray[np.int64]:
    """Number of steps in ``block`` (b, n, k) whose weights differ from the step before."""
    changed = np.any(block[1:] != block[:-1], axis=-1).sum(axis=0)
    if prev is not None:
        changed = changed + np.any(block[0] != prev, axis=-1)
    return np.asarray(changed, dtype=np.int64)


class _Recorder:
    """Accumulates the outcome block by block without keeping more than asked."""

    def __init__(self, scenario: Scenario, policy: str) -> None:
        steps, n, k = scenario.capacity_mbps.shape
        self.scenario = scenario
        self.policy = policy
        self.keep = steps * n <= TRACE_ROWS
        self.aggregate = np.zeros((steps, n))
        self.per_wat = np.zeros((n, k))
        self.updates = np.zeros(n, dtype=np.int64)
        self.weights = np.zeros((steps, n, k), dtype=np.int16) if self.keep else None
        self.delivered = np.zeros((steps, n, k), dtype=np.float32) if self.keep else None
        self.last: IntArray | None = None

    def add(self, t0: int, t1: int, weights: IntArray, delivered: Array, agg: Array,
            held: IntArray | None = None) -> None:
        """Record steps [t0, t1); ``held`` (n, k): the weights were these for every step."""
        self.aggregate[t0:t1] = agg
        self.per_wat += delivered.sum(axis=0)
        if held is None:
            self.updates += _count_updates(self.last, weights)
            self.last = weights[-1]
        else:  # one comparison instead of one per step
            if self.last is not None:
                self.updates += np.any(held != self.last, axis=-1)
            self.last = held
        if self.weights is not None and self.delivered is not None:
            self.weights[t0:t1] = weights
            self.delivered[t0:t1] = delivered

    def result(self) -> SimResult:
        s = self.scenario
        return SimResult(
            scenario=s.name, policy=self.policy, dt_s=s.dt_s, wats=s.wats,
            direction=s.direction,
            aggregate_mbps=self.aggregate, oracle_mbps=None,
            capacity_sum_mbps=s.capacity_mbps.sum(axis=-1),
            per_wat_mean_mbps=self.per_wat / s.steps, weight_updates=self.updates,
            weights=self.weights, delivered_mbps=self.delivered,
        )


def simulate_plan(scenario: Scenario, plan: Plan, policy: str, block_steps: int = 250
                  ) -> SimResult:
    """Run an open-loop plan (vectorised over CPEs, in time blocks to bound memory)."""
    rec = _Recorder(scenario, policy)
    cap = scenario.capacity_mbps
    if plan.weights.shape != cap.shape:
        raise ValueError(f"plan weights {plan.weights.shape} do not match scenario {cap.shape}")
    for t0 in range(0, scenario.steps, block_steps):
        t1 = min(scenario.steps, t0 + block_steps)
        c = cap[t0:t1]
        if plan.available is not None:
            c = c * plan.available[t0:t1]
        w = plan.weights[t0:t1]
        delivered, agg, _ = deliver(c, w)
        rec.add(t0, t1, w, delivered, agg)
    return rec.result()


#: How a direction's connection delivers for a block of steps under the weights in force:
#: ``(direction, capacity (b, n, k), weights (n, k)) -> (delivered, aggregate, saturated)``.
Deliver = Callable[[str, Array, IntArray], tuple[Array, Array, NDArray[np.bool_]]]


def wrr_deliver(_direction: str, capacity: Array, weights: IntArray
                ) -> tuple[Array, Array, NDArray[np.bool_]]:
    """:func:`deliver` in both directions: WRR agents everywhere."""
    return deliver(capacity, weights)


def simulate_duplex(scenario: Scenario, controller: DuplexLoop, policy: str,
                    progress: bool = False, transport: Deliver = wrr_deliver
                    ) -> dict[str, SimResult]:
    """Run a policy steering both directions: one ``controller.update`` per control period
    with what each direction's connection delivered; one result per direction.
    ``transport`` is how the agents' backends turn weights into rates (WRR by default; the
    rate-caps backend: :meth:`twin.loop_driver.LoopDriver.deliver`)."""
    views = {d: scenario.toward(d) for d in scenario.directions}
    recs = {d: _Recorder(v, policy) for d, v in views.items()}
    start = controller.start(scenario)
    weights = {d: np.asarray(start[d], dtype=np.int64) for d in views}
    period = max(1, int(controller.period_steps))
    starts = range(0, scenario.steps, period)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(starts), desc=f"{scenario.name}/{policy}", unit="period",
                   leave=False, disable=None)
    for t0 in starts:
        t1 = min(scenario.steps, t0 + period)
        obs: dict[str, Observation] = {}
        for d, view in views.items():
            c = view.capacity_mbps[t0:t1]
            delivered, agg, saturated = transport(d, c, weights[d])
            recs[d].add(t0, t1, weights[d], delivered, agg, held=weights[d])
            obs[d] = Observation(t0=t0, t1=t1, delivered_mbps=delivered, saturated=saturated,
                                 rtt_ms=view.rtt_ms[t0:t1], up=c > 0)
        new = controller.update(obs)
        weights = {d: np.asarray(new[d], dtype=np.int64) for d in views}
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return {d: rec.result() for d, rec in recs.items()}
