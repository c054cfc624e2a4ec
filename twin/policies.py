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
``lagged-oracle``
    The oracle one control period late (:func:`lagged_oracle_plan`): the best weights for the
    previous period's mean true capacities.  ``mcw twin`` reports its ratio to the oracle as
    ``lagged_oracle_ratio``: the headroom left for a causal controller at that period.
``equal``
    Plain round-robin with ``cwnd_limited=N``: all weights 1.
``fixed:A,B,C``
    Constant weights, one per WAT in scenario order (nr, wifi, lifi).
``xapp``
    The product's loop: :class:`twin.loop_driver.LoopDriver` runs the shipped
    :class:`xapp.core.loop.ControlLoop` every control period (default 1 s) through in-memory
    adapters, with the fluid model as the network: the agents report the subflow signals
    (delivered Mbps, RTT, cwnd-limited fraction, link up) and the radio KPIs, the loop
    forecasts with the estimator (``ewma``, ``ewma-naive`` or ``model``), decides under the
    default policy (hysteresis ``--hysteresis``, ``max_weight``, ``update_period_s`` = the
    period) and publishes validated weights messages, which the agents apply.  The loop steers
    both directions at once (one ``mcw.weights.v2`` message per CPE, ``dl`` applied by the
    proxy's agent, ``ul`` by the CPE's); the result is that of the scenario's direction, the
    other's is in ``extra["directions"]``.

Every policy runs on the direction the scenario is viewed in
(:meth:`twin.scenarios.Scenario.toward`): the oracles, probes and fixed weights of ``ul`` see
the uplink capacities.  ``dl`` is the paper's direction and the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from twin.a1_file import PolicyFileError
from twin.fluid import (
    Plan,
    SimResult,
    simulate_duplex,
    simulate_plan,
)
from twin.loop_driver import BACKENDS, LoopDriver
from twin.scenarios import Scenario
from xapp.core.ewma import EwmaEstimator
from xapp.core.exploration import ExploringEstimator
from xapp.core.forecast import CapacityEstimator
from xapp.core.weights import (
    optimal_weights_batch,
)

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Above this many (step, CPE) rows the oracle is recomputed once per control period.
ORACLE_ROWS = 400_000
ESTIMATORS = ("ewma", "ewma-naive", "model")
POLICIES = ("oracle", "lagged-oracle", "probe", "probe-replay", "equal", "fixed:A,B,C", "xapp")


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
    #: The agents' backend (``wrr`` or ``rate-caps``: :mod:`twin.rate_caps`), both
    #: directions; the xapp policy only.
    backend: str = "wrr"
    #: An A1 policy of type 20101 in force over the defaults (:mod:`twin.a1_file`); the xapp
    #: policy only.
    a1_policy: Mapping[str, Any] | None = None


def make_estimator(name: str) -> CapacityEstimator:
    """The estimator called ``name``; ``model`` is the shipped artifact, as ``mcw run``
    loads it."""
    if name == "ewma":
        return EwmaEstimator()
    if name == "ewma-naive":  # the history-only EWMA the design brief warns about
        return EwmaEstimator(censoring=False, explore_pct=0.0, explore_max_pct=0.0)
    if name == "model":
        from xapp.model import load_estimator  # scikit-learn only when asked for

        try:
            est = load_estimator()
        except Exception as exc:  # a missing, damaged or incompatible artifact
            raise TwinPolicyError(f"--estimator model: cannot load the model: {exc}") from exc
        return ExploringEstimator(est)  # as the xApp runs it: see xapp.core.exploration
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


def lagged_oracle_plan(scenario: Scenario, opts: TwinOptions) -> Plan:
    """The oracle one control period late: each period gets the best weights for the previous
    period's mean true capacities (the first period plain round-robin, as the xapp starts).

    What a controller with perfect knowledge of the last period, and none of the next, can
    do; a robust controller can still beat it by hedging (e.g. a volatile WAT's lower bound).
    """
    steps, n, k = scenario.capacity_mbps.shape
    per = max(1, round(opts.period_s / scenario.dt_s))
    m = -(-steps // per)
    pad = m * per - steps
    cap = scenario.capacity_mbps
    if pad:
        cap = np.concatenate([cap, np.repeat(cap[-1:], pad, axis=0)])
    means = cap.reshape(m, per, n, k).mean(axis=1, dtype=np.float64)
    w = np.ones((m, n, k), dtype=np.int16)
    chunk = max(1, 200_000 // n)
    for a in range(0, m - 1, chunk):
        b = min(m - 1, a + chunk)
        w[a + 1:b + 1] = optimal_weights_batch(means[a:b].reshape(-1, k),
                                               opts.max_weight).reshape(-1, n, k)
    dead = ~w.any(axis=-1)
    w[dead] = 1
    return Plan(weights=np.repeat(w, per, axis=0)[:steps])


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


def loop_policy(opts: TwinOptions) -> dict[str, object]:
    """The loop's default policy for the twin's options (the A1 payload form)."""
    return {"mode": "load_balancing", "max_weight": opts.max_weight,
            "hysteresis_pct": opts.hysteresis_pct, "update_period_s": opts.period_s}


def run_policy(scenario: Scenario, name: str, opts: TwinOptions | None = None,
               progress: bool = False, estimator: CapacityEstimator | None = None
               ) -> SimResult:
    """Simulate ``scenario`` under the policy ``name`` (see the module docstring)."""
    opts = opts or TwinOptions()
    k = len(scenario.wats)
    if opts.backend not in BACKENDS:
        raise TwinPolicyError(f"unknown backend {opts.backend!r}; known: {list(BACKENDS)}")
    if opts.backend != "wrr" and name != "xapp":
        raise TwinPolicyError(f"backend {opts.backend} runs with the xapp policy only (the "
                              "other policies and the oracle are WRR's)")
    if opts.a1_policy is not None and name != "xapp":
        raise TwinPolicyError("an A1 policy steers the xapp policy only")
    if name == "xapp" and scenario.traffic is not None and opts.backend != "rate-caps":
        raise TwinPolicyError("a traffic mix is applied per class by the rate-caps agents "
                              "(mptcp-shares) only: use backend rate-caps")
    if name == "oracle":
        res = simulate_plan(scenario, oracle_plan(scenario, opts), name)
        res.extra["oracle_stride_s"] = oracle_stride(scenario, opts) * scenario.dt_s
        return res
    if name == "lagged-oracle":
        return simulate_plan(scenario, lagged_oracle_plan(scenario, opts), name)
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
        est = estimator if estimator is not None else make_estimator(opts.estimator)
        # The EWMA reads throughput only: skip building radio KPIs it would ignore.
        try:
            driver = LoopDriver(est, loop_policy(opts), round(opts.period_s / scenario.dt_s),
                                radio_kpis=not isinstance(est, EwmaEstimator),
                                backend=opts.backend, instance=opts.a1_policy)
        except PolicyFileError as exc:
            raise TwinPolicyError(str(exc)) from None
        # The loop decides both directions each tick; the result is the view's direction.
        results = simulate_duplex(scenario, driver, name, progress=progress,
                                  transport=driver.deliver)
        res = results[scenario.direction]
        res.extra["directions"] = results
        res.extra["estimator"] = opts.estimator if estimator is None else type(estimator).__name__
        res.extra["driver"] = driver
        res.extra["backend"] = opts.backend
        if driver.stats is not None:  # a traffic mix: what each flow got
            for d, r in results.items():
                r.extra["flows"] = driver.stats[d].summary()
        return res
    raise TwinPolicyError(f"unknown policy {name!r}; known: {list(POLICIES)}")


def run_with_oracle(scenario: Scenario, name: str, opts: TwinOptions | None = None,
                    progress: bool = False, estimator: CapacityEstimator | None = None
                    ) -> SimResult:
    """Like :func:`run_policy`, with ``oracle_mbps`` filled from an oracle run and
    ``extra["lagged_oracle_mbps"]`` (CPE- and time-mean) from a lagged-oracle run."""
    opts = opts or TwinOptions()
    res = run_policy(scenario, name, opts, progress=progress, estimator=estimator)
    # The oracles are WRR's: under rate caps the best split is every WAT uncapped, and the
    # capacity sum (ratio_to_capacity_sum) is the reference.
    wrr = replace(opts, backend="wrr", a1_policy=None)
    oracle = res if name == "oracle" else run_policy(scenario, "oracle", wrr)
    lagged = res if name == "lagged-oracle" else run_policy(scenario, "lagged-oracle", wrr)
    res.oracle_mbps = oracle.aggregate_mbps
    res.extra.setdefault("oracle_stride_s", oracle.extra.get("oracle_stride_s"))
    res.extra["lagged_oracle_mbps"] = float(lagged.aggregate_mbps.mean())
    res.extra["lagged_oracle_period_s"] = max(1, round(opts.period_s / scenario.dt_s)) * \
        scenario.dt_s
    return res


def summary(res: SimResult) -> dict[str, Any]:
    """The JSON summary of a run (time- and CPE-averaged)."""
    agg = float(res.aggregate_mbps.mean())
    cap = float(res.capacity_sum_mbps.mean())
    oracle = float(res.oracle_mbps.mean()) if res.oracle_mbps is not None else float("nan")
    per_wat = res.per_wat_mean_mbps.mean(axis=0)
    out: dict[str, Any] = {
        "scenario": res.scenario,
        "direction": res.direction,
        "policy": res.policy,
        "n_cpes": int(res.aggregate_mbps.shape[1]),
        "duration_s": round(res.aggregate_mbps.shape[0] * res.dt_s, 3),
        "aggregate_mbps": round(agg, 3),
        "oracle_mbps": round(oracle, 3),
        "capacity_sum_mbps": round(cap, 3),
        "ratio_to_oracle": round(agg / oracle, 4) if oracle > 0 else None,
        "ratio_to_capacity_sum": round(agg / cap, 4) if cap > 0 else None,
        "lagged_oracle_ratio": None,
        "per_wat_mbps": {w: round(float(v), 3) for w, v in zip(res.wats, per_wat, strict=True)},
        "weight_updates": round(float(res.weight_updates.mean()), 3),
    }
    lagged = res.extra.get("lagged_oracle_mbps")
    if isinstance(lagged, float) and oracle > 0:
        out["lagged_oracle_mbps"] = round(lagged, 3)
        out["lagged_oracle_ratio"] = round(lagged / oracle, 4)
    for key in ("estimator", "backend", "oracle_stride_s", "lagged_oracle_period_s", "flows"):
        if res.extra.get(key) is not None:
            out[key] = res.extra[key]
    return out
