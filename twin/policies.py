"""Weight policies of the twin, from the oracle to the paper's probes to the xApp's loop.

``oracle``
    The exact integer optimum for the *true* capacities of every step (a genie with no delay).
    For runs of more than :data:`ORACLE_ROWS` (step, CPE) rows it is recomputed once per control
    period from the capacities at the decision step and held in between (documented in the
    output as ``oracle_stride_s``); 10,000 CPEs x 2,500 steps would otherwise cost minutes.
``probe``
    The paper's method (section 6.5): every 10 s a 5 s iperf3 probe with 10 parallel TCP flows
    per WAT measures each WAT's capacity (the mean over the window), rounded to the nearest
    10 Mbps; weights proportional to those capacities (the engine's optimum for them) are set
    every 12 s from the latest finished probe; plain round-robin before the first update.
    Assumption on the connection's traffic during a probe: the probe's flows and the MPTCP
    subflow share each WAT as TCP flows do, so the connection gets ``1 / (10 + 1)`` of every
    WAT's capacity while a probe runs, and the probe still measures the whole capacity (the
    WRR-throttled subflow takes less than its fair share, the probe flows take the rest).
``probe-replay``
    The paper's *measured* run: the weights of an earlier probing pass replayed every 12 s on a
    connection without probe traffic.  The twin replays the same trace, so this is the
    optimistic bound of the method (the paper could not guarantee identical radio conditions).
``equal``
    Plain round-robin with ``cwnd_limited=N``: all weights 1.
``fixed:A,B,C``
    Constant weights, one per WAT in scenario order (nr, wifi, lifi).
``xapp``
    The product's loop: each control period (default 1 s) the subflow signals an agent reports
    (delivered Mbps, RTT, cwnd-limited fraction, link up) go to a capacity estimator
    (:class:`xapp.estimator.CapacityEstimator`: ``ewma``, ``ewma-naive`` or ``model``) and
    its forecasts to the weight engine with the policy's hysteresis.  A WAT that is up but has
    no estimate yet (it was down when the loop started) is tried at the CPE's smallest estimate,
    so it carries traffic and gets measured.  One CPE (or any policy beyond plain load
    balancing) uses :func:`xapp.weights.decide`; many CPEs use the vectorised exact optimum
    (:func:`xapp.weights.optimal_weights_batch`) with the same hysteresis rule.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from twin.fluid import (
    ClosedLoop,
    Observation,
    Plan,
    SimResult,
    simulate_closed,
    simulate_plan,
)
from twin.scenarios import Scenario
from xapp.estimator import CapacityEstimator, KpiFrame
from xapp.ewma import EwmaEstimator
from xapp.policy import Policy, SteeringMode
from xapp.weights import (
    NoUsableWatError,
    WatState,
    WeightDecision,
    decide,
    fluid_aggregate_batch,
    optimal_weights_batch,
)

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Above this many (step, CPE) rows the oracle is recomputed once per control period.
ORACLE_ROWS = 400_000
#: Up to this many CPEs the xapp policy runs the full engine (decide) per CPE.
DECIDE_MAX_CPES = 16
ESTIMATORS = ("ewma", "ewma-naive", "model")
POLICIES = ("oracle", "probe", "probe-replay", "equal", "fixed:A,B,C", "xapp")


class TwinPolicyError(ValueError):
    """An unknown policy or estimator, or options out of range."""


@dataclass(frozen=True)
class TwinOptions:
    """Knobs of the policies (defaults follow the paper and the xApp's defaults)."""

    estimator: str = "ewma"
    period_s: float = 1.0
    hysteresis_pct: float = 1.0
    max_weight: int = 100
    probe_period_s: float = 10.0
    probe_s: float = 5.0
    probe_update_s: float = 12.0
    probe_flows: int = 10
    probe_round_mbps: float = 10.0


def make_estimator(name: str) -> CapacityEstimator:
    """The estimator called ``name``; ``model`` loads :mod:`xapp.model` lazily."""
    if name == "ewma":
        return EwmaEstimator()
    if name == "ewma-naive":  # the history-only EWMA the design brief warns about
        return EwmaEstimator(censoring=False, explore_pct=0.0, explore_max_pct=0.0)
    if name == "model":
        try:
            module = importlib.import_module("xapp.model")
        except ImportError as exc:
            raise TwinPolicyError(f"--estimator model needs xapp.model: {exc}") from exc
        factory = getattr(module, "load_estimator", None)
        if factory is None:
            raise TwinPolicyError("xapp.model has no load_estimator(); cannot use --estimator "
                                  "model yet")
        est = factory()
        if not isinstance(est, CapacityEstimator):
            raise TwinPolicyError("xapp.model.load_estimator() did not return a "
                                  "CapacityEstimator")
        return est
    raise TwinPolicyError(f"unknown estimator {name!r}; known: {list(ESTIMATORS)}")


def parse_fixed(spec: str, k: int) -> IntArray:
    """Weights from ``fixed:A,B,C`` (one non-negative integer per WAT, not all zero)."""
    body = spec.split(":", 1)[1] if ":" in spec else ""
    try:
        values = [int(x) for x in body.split(",")]
    except ValueError as exc:
        raise TwinPolicyError(f"{spec!r}: weights must be integers, e.g. fixed:30,100,1") from exc
    if len(values) != k:
        raise TwinPolicyError(f"{spec!r}: need {k} weights (one per WAT), got {len(values)}")
    if any(v < 0 or v > 255 for v in values) or not any(values):
        raise TwinPolicyError(f"{spec!r}: weights must be in 0..255 and not all 0")
    return np.array(values, dtype=np.int64)


def oracle_stride(scenario: Scenario, opts: TwinOptions) -> int:
    if scenario.steps * scenario.n_cpes <= ORACLE_ROWS:
        return 1
    return max(1, round(opts.period_s / scenario.dt_s))


def oracle_plan(scenario: Scenario, opts: TwinOptions) -> Plan:
    steps, n, k = scenario.capacity_mbps.shape
    stride = oracle_stride(scenario, opts)
    idx = np.arange(0, steps, stride)
    w = np.zeros((len(idx), n, k), dtype=np.int16)
    chunk = max(1, 20_000 // n)
    for a in range(0, len(idx), chunk):
        rows = scenario.capacity_mbps[idx[a:a + chunk]].reshape(-1, k)
        w[a:a + chunk] = optimal_weights_batch(rows, opts.max_weight).reshape(-1, n, k)
    if stride > 1:
        w = np.repeat(w, stride, axis=0)[:steps]
    return Plan(weights=w)


def constant_plan(scenario: Scenario, weights: IntArray) -> Plan:
    w = np.broadcast_to(weights.astype(np.int16), scenario.capacity_mbps.shape)
    return Plan(weights=w)


def probe_plan(scenario: Scenario, opts: TwinOptions, online: bool = True) -> Plan:
    steps, n, k = scenario.capacity_mbps.shape
    dt = scenario.dt_s
    period = round(opts.probe_period_s / dt)
    dur = round(opts.probe_s / dt)
    upd = round(opts.probe_update_s / dt)
    if not 0 < dur <= period or upd <= 0:
        raise TwinPolicyError("probe timing must satisfy 0 < probe_s <= probe_period_s and "
                              "probe_update_s > 0")
    starts = np.arange(0, steps, period)
    ends = np.minimum(starts + dur, steps)
    cum = np.concatenate([np.zeros((1, n, k)), np.cumsum(scenario.capacity_mbps, axis=0)])
    measured = (cum[ends] - cum[starts]) / (ends - starts)[:, None, None].astype(np.float64)
    rounded = np.round(measured / opts.probe_round_mbps) * opts.probe_round_mbps
    wm = optimal_weights_batch(rounded.reshape(-1, k), opts.max_weight).reshape(-1, n, k)
    for m in range(len(wm)):  # a probe that saw nothing keeps the previous weights
        dead = ~wm[m].any(axis=1)
        wm[m][dead] = wm[m - 1][dead] if m else 1
    weights = np.ones((steps, n, k), dtype=np.int16)
    for tick in range(upd, steps, upd):
        done = (tick - dur) // period  # latest probe finished by this tick
        if done >= 0:
            weights[tick:tick + upd] = wm[min(done, len(wm) - 1)]
    available = None
    if online:
        factor = np.ones(steps)
        for a in starts:
            factor[a:a + dur] = 1.0 / (opts.probe_flows + 1)
        available = np.broadcast_to(factor[:, None, None], (steps, n, k))
    return Plan(weights=weights, available=available)


class XappController:
    """The xApp's closed loop: estimator + weight engine per control period.

    Parameters
    ----------
    estimator : CapacityEstimator
        Fed one :class:`KpiFrame` per period with columns ``delivered_mbps``, ``rtt_ms``,
        ``cwnd_limited`` and ``up`` (rows: every (cpe, wat)).
    policy : Policy
        Steering policy; its ``hysteresis_pct`` and ``max_weight`` apply.
    period_steps : int
        Control period in simulation steps.
    """

    def __init__(self, estimator: CapacityEstimator, policy: Policy, period_steps: int) -> None:
        self.estimator = estimator
        self.policy = policy
        self.period_steps = period_steps
        self.history: list[tuple[float, Array]] = []

    def start(self, scenario: Scenario) -> IntArray:
        self.scenario = scenario
        n, k = scenario.n_cpes, len(scenario.wats)
        self.cpe = np.repeat(np.array([f"cpe{i}" for i in range(n)]), k)
        self.wat = np.tile(np.array(scenario.wats), n)
        self.weights: IntArray = np.ones((n, k), dtype=np.int64)  # plain RR until we know more
        self.usable = np.ones((n, k), dtype=bool)
        self.decisions: list[WeightDecision | None] = [None] * n
        self.plain = (policy_is_plain(self.policy) and n > DECIDE_MAX_CPES)
        return self.weights.copy()

    def frame(self, obs: Observation) -> KpiFrame:
        """The KPIs an agent reports for the period: means over its steps."""
        rtt = obs.rtt_ms
        finite = np.isfinite(rtt)
        count = finite.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            rtt_mean = np.where(count > 0, np.where(finite, rtt, 0.0).sum(axis=0) / count, np.nan)
        values = {
            "delivered_mbps": obs.delivered_mbps.mean(axis=0).ravel(),
            "rtt_ms": rtt_mean.ravel(),
            "cwnd_limited": obs.saturated.mean(axis=0).ravel(),
            "up": obs.up[-1].astype(np.float64).ravel(),
        }
        return KpiFrame(time_s=obs.t1 * self.scenario.dt_s, cpe=self.cpe, wat=self.wat,
                        values=values)

    def update(self, obs: Observation) -> IntArray:
        frame = self.frame(obs)
        fc = self.estimator.step(frame)
        n, k = self.weights.shape
        up = obs.up[-1]
        median = fc.median_mbps.reshape(n, k).astype(np.float64)
        lower = np.minimum(fc.lower_mbps.reshape(n, k), median)
        median, lower = _try_unknown(median, lower, up)
        rtt = frame.values["rtt_ms"].reshape(n, k)
        self.history.append((float(frame.time_s), median.copy()))
        if self.plain:
            self._batch(lower, up)
        else:
            self._per_cpe(median, lower, up, rtt)
        return self.weights.copy()

    def _per_cpe(self, median: Array, lower: Array, up: NDArray[np.bool_], rtt: Array) -> None:
        wats = self.scenario.wats
        for i in range(len(median)):
            states = {
                w: WatState(capacity_mbps=float(median[i, j]), lower_mbps=float(lower[i, j]),
                            up=bool(up[i, j]),
                            rtt_ms=float(rtt[i, j]) if np.isfinite(rtt[i, j]) else None)
                for j, w in enumerate(wats)
            }
            try:
                d = decide(states, self.policy, self.decisions[i])
            except NoUsableWatError:
                continue  # keep the weights in force, as the xApp does
            self.decisions[i] = d
            self.weights[i] = [d.weights[w] for w in wats]

    def _batch(self, cons: Array, up: NDArray[np.bool_]) -> None:
        p = self.policy
        cons = np.where(up & (cons >= p.capacity_floor_mbps) & (cons > 0), cons, 0.0)
        usable = cons > 0
        new = optimal_weights_batch(cons, p.max_weight)
        t_new = fluid_aggregate_batch(cons, new)
        held_ok = (usable == self.usable).all(axis=1) & self.weights.any(axis=1)
        t_old = fluid_aggregate_batch(cons, np.where(usable, self.weights, 0))
        keep = held_ok & (t_new <= t_old * (1.0 + p.hysteresis_pct / 100.0))
        keep |= ~new.any(axis=1)  # nothing usable: keep the weights in force
        self.weights = np.where(keep[:, None], self.weights, new)
        self.usable = np.where(keep[:, None], self.usable, usable)


def policy_is_plain(p: Policy) -> bool:
    """True when the batch path reproduces decide(): load balancing without share limits."""
    return (p.mode is SteeringMode.LOAD_BALANCING and not p.min_share and not p.excluded
            and all(v >= 1.0 for v in p.max_share.values()))


def _try_unknown(median: Array, lower: Array, up: NDArray[np.bool_]) -> tuple[Array, Array]:
    """Give a WAT that is up but unknown (NaN) the CPE's smallest estimate, so it is tried."""
    finite = np.isfinite(median)
    if finite.all():
        return median, np.where(np.isfinite(lower), lower, 0.0)
    unknown = ~finite & up
    if not unknown.any():
        return np.where(finite, median, 0.0), np.where(np.isfinite(lower), lower, 0.0)
    known = np.where(np.isfinite(median) & (median > 0), median, np.inf)
    smallest = known.min(axis=1, keepdims=True)
    smallest = np.where(np.isfinite(smallest), smallest, 1.0)
    median = np.where(unknown, smallest, np.nan_to_num(median))
    lower = np.where(unknown, smallest, np.nan_to_num(lower))
    return median, lower


def run_policy(scenario: Scenario, name: str, opts: TwinOptions | None = None,
               progress: bool = False, estimator: CapacityEstimator | None = None
               ) -> SimResult:
    """Simulate ``scenario`` under the policy ``name`` (see the module docstring)."""
    opts = opts or TwinOptions()
    k = len(scenario.wats)
    if name == "oracle":
        res = simulate_plan(scenario, oracle_plan(scenario, opts), name)
        res.extra["oracle_stride_s"] = oracle_stride(scenario, opts) * scenario.dt_s
        return res
    if name == "equal":
        return simulate_plan(scenario, constant_plan(scenario, np.ones(k, np.int64)), name)
    if name.startswith("fixed"):
        return simulate_plan(scenario, constant_plan(scenario, parse_fixed(name, k)), name)
    if name in ("probe", "probe-replay"):
        plan = probe_plan(scenario, opts, online=name == "probe")
        return simulate_plan(scenario, plan, name)
    if name == "xapp":
        if opts.period_s < scenario.dt_s:
            raise TwinPolicyError(f"period_s must be >= the step {scenario.dt_s} s")
        policy = Policy(max_weight=opts.max_weight, hysteresis_pct=opts.hysteresis_pct,
                        update_period_s=opts.period_s)
        est = estimator if estimator is not None else make_estimator(opts.estimator)
        ctl = XappController(est, policy, round(opts.period_s / scenario.dt_s))
        controller: ClosedLoop = ctl
        res = simulate_closed(scenario, controller, name, progress=progress)
        res.extra["estimator"] = opts.estimator if estimator is None else type(estimator).__name__
        res.extra["controller"] = ctl
        return res
    raise TwinPolicyError(f"unknown policy {name!r}; known: {list(POLICIES)}")


def run_with_oracle(scenario: Scenario, name: str, opts: TwinOptions | None = None,
                    progress: bool = False) -> SimResult:
    """Like :func:`run_policy`, with ``oracle_mbps`` filled from an oracle run."""
    opts = opts or TwinOptions()
    res = run_policy(scenario, name, opts, progress=progress)
    oracle = res if name == "oracle" else run_policy(scenario, "oracle", opts)
    res.oracle_mbps = oracle.aggregate_mbps
    res.extra.setdefault("oracle_stride_s", oracle.extra.get("oracle_stride_s"))
    return res


def summary(res: SimResult) -> dict[str, Any]:
    """The JSON summary of a run (time- and CPE-averaged)."""
    agg = float(res.aggregate_mbps.mean())
    cap = float(res.capacity_sum_mbps.mean())
    oracle = float(res.oracle_mbps.mean()) if res.oracle_mbps is not None else float("nan")
    per_wat = res.per_wat_mean_mbps.mean(axis=0)
    out: dict[str, Any] = {
        "scenario": res.scenario,
        "policy": res.policy,
        "n_cpes": int(res.aggregate_mbps.shape[1]),
        "duration_s": round(res.aggregate_mbps.shape[0] * res.dt_s, 3),
        "aggregate_mbps": round(agg, 3),
        "oracle_mbps": round(oracle, 3),
        "capacity_sum_mbps": round(cap, 3),
        "ratio_to_oracle": round(agg / oracle, 4) if oracle > 0 else None,
        "ratio_to_capacity_sum": round(agg / cap, 4) if cap > 0 else None,
        "per_wat_mbps": {w: round(float(v), 3) for w, v in zip(res.wats, per_wat, strict=True)},
        "weight_updates": round(float(res.weight_updates.mean()), 3),
    }
    for key in ("estimator", "oracle_stride_s"):
        if res.extra.get(key) is not None:
            out[key] = res.extra[key]
    return out
