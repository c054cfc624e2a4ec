"""The shipped control loop on the twin's network: the ``xapp`` policy of ``mcw twin``.

:class:`LoopDriver` is a :class:`twin.fluid.DuplexLoop` that runs :class:`xapp.core.loop.
ControlLoop`, the code ``mcw run`` runs, through in-memory adapters, with the fluid model of
both directions as the network between them:

* **agents** report what their telemetry carries for each control period and direction, as
  the sender of that direction does (an MPTCP scheduler decides at the sender): the proxy's
  agent for ``dl``, the CPE's agent for ``ul``.  Per (CPE, WAT, direction): delivered Mbps and
  the cwnd-limited fraction (``saturated``) as means over the period, the mean RTT the sender
  measured over the steps the WAT was up, ``up`` at the period's last step; plus, in both
  rows, the radio KPIs of that step (:func:`twin.kpis.radio_kpis`: SINR, CQI, MCS, SNR, ...:
  one link, both directions) for estimators that read them.  The reports go into the intake
  (:class:`xapp.core.intake.LatestKpis`) as MQTT telemetry does in the xApp;
* the **loop** ticks at the end of the period (its clock is simulated time) under a
  :class:`~xapp.core.policy_book.PolicyBook` whose default policy carries the twin's options,
  and decides both directions;
* the **publisher** (:class:`xapp.adapters.lab.MemoryPublisher`) builds and validates every
  ``mcw.weights.v2`` message (one per CPE, ``dl`` and ``ul`` sets) as the MQTT publisher does;
  the proxy's agent applies ``dl``, the CPE's agent ``ul``, each from the next step on, and each
  reverts to safe weights (all 1) when the lease runs out without a refresh.

Backends: by default every agent is WRR (:func:`twin.fluid.deliver`).  With ``backend``
``rate-caps`` the agents run ``mptcp-shares`` (:mod:`twin.rate_caps`): the CPE's on its egress
(``ul``), the proxy's per CPE and WAT on its own (``dl``).  They report ``semantics``
``rate-caps``, so the loop sends ``caps_mbps`` with both sets, and they apply the message's caps
(or, without, caps from their configured link rates: the largest capacity each WAT's trace
reaches, what an operator would write down as its nominal rate).

Traffic classes (issue 35): the ``rate-caps`` agents report ``capabilities.max_classes`` 8, as
``mptcp-shares`` with HTB does, so the loop sends a policy's rules as ``classes`` with both
sets exactly as in service, and the agents apply them (:mod:`twin.class_queues`) to the
scenario's flows (:mod:`twin.traffic`; without a mix, one backlogged transfer), recording what
each flow got (:attr:`LoopDriver.stats`, :mod:`twin.class_stats`).  ``instance`` is an A1
policy of type 20101 created over the default policy by the xApp's own A1 handler
(:mod:`twin.a1_file`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from twin.a1_file import policy_book
from twin.class_queues import Applied, share
from twin.class_stats import FlowStats
from twin.fluid import Observation, deliver
from twin.rate_caps import agent_caps, deliver_caps
from twin.scenarios import Scenario
from twin.traffic import BULK_ALONE
from xapp.adapters.lab import MemoryPublisher, NullSink
from xapp.adapters.sdl import SdlStateStore
from xapp.core.class_columns import MAX_CLASSES
from xapp.core.decisions import DecideBatch, decide_batch
from xapp.core.forecast import CapacityEstimator, KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.loop import ControlLoop, LoopSettings, TickReport
from xapp.core.traffic import ClassSet

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Weights an agent applies when it has none or its lease ran out (plain round-robin).
SAFE_WEIGHT = 1
#: The agents' backend: ``wrr`` (the 5G-CLARITY kernel) or ``rate-caps`` (mptcp-shares).
BACKENDS = ("wrr", "rate-caps")


class _Semantics:
    """:class:`xapp.core.ports.BackendSemantics` of the simulated agents: every CPE's
    direction is rate-caps when its applier is."""

    def __init__(self, cpes: frozenset[str], directions: tuple[str, ...]) -> None:
        self.cpes = cpes
        self.directions = directions

    def rate_caps(self, direction: str) -> frozenset[str]:
        return self.cpes if direction in self.directions else frozenset()

    def max_classes(self, direction: str) -> dict[str, int]:
        # mptcp-shares with HTB takes 8 classes (payload.MaxClasses); WRR none.
        return dict.fromkeys(self.cpes, MAX_CLASSES) if direction in self.directions else {}


class LoopDriver:
    """Runs the shipped :class:`ControlLoop` once per control period of a twin simulation.

    Parameters
    ----------
    estimator : CapacityEstimator
        The loop's capacity estimator.
    policy : dict
        The default policy (the A1 payload form: ``hysteresis_pct``, ``max_weight``, ...).
    period_steps : int
        Control period in simulation steps.
    radio_kpis : bool, default=True
        Add the synthetic radio KPIs to the agents' reports; an estimator that ignores them
        (the EWMA) runs faster without.
    kpi_seed : int, default=0
        Seed of the radio KPIs' measurement noise.
    lease_s : float, default=30.0
        Lease of the weights messages, as ``controls.loop.lease_s``.
    backend : {"wrr", "rate-caps"}, default="wrr"
        The agents' backend, in both directions (the CPE's ``ul``, the proxy's ``dl``).
    instance : mapping, optional
        An A1 policy of type 20101 in force for every CPE over ``policy``; raises
        :class:`twin.a1_file.PolicyFileError` when the xApp would refuse it.
    """

    def __init__(self, estimator: CapacityEstimator, policy: dict[str, object],
                 period_steps: int, radio_kpis: bool = True, kpi_seed: int = 0,
                 lease_s: float = 30.0, decide: DecideBatch = decide_batch,
                 backend: str = "wrr", instance: Mapping[str, Any] | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; known: {list(BACKENDS)}")
        self.backend = backend
        #: Directions applied with rate caps.
        self.capped: tuple[str, ...] = ("dl", "ul") if backend == "rate-caps" else ()
        self.estimator = estimator
        self.policy = policy
        self.period_steps = period_steps
        self.radio_kpis = radio_kpis
        self.kpi_seed = kpi_seed
        self.lease_s = lease_s
        self.decide = decide
        self.book = policy_book(policy, instance)
        self.reports: list[TickReport] = []
        #: What each flow got per direction (scenarios with a traffic mix); None: no mix.
        self.stats: dict[str, FlowStats] | None = None

    def start(self, scenario: Scenario) -> dict[str, IntArray]:
        self.scenario = scenario
        self.directions = scenario.directions
        n, k = scenario.n_cpes, len(scenario.wats)
        self.names = [f"cpe{i}" for i in range(n)]
        self._index = {name: i for i, name in enumerate(self.names)}
        self._cols = {w: j for j, w in enumerate(scenario.wats)}
        # One row per (direction, CPE, WAT): the directions' blocks one after the other.
        m = len(self.directions)
        self.cpe = np.tile(np.repeat(np.array(self.names), k), m)
        self.wat = np.tile(np.array(scenario.wats), n * m)
        self.direction = np.repeat(np.array(self.directions, dtype="<U2"), n * k)
        #: Weights each direction's sender applies: the proxy's agent ``dl``, the CPE's ``ul``.
        self.weights: dict[str, IntArray] = {
            d: np.full((n, k), SAFE_WEIGHT, dtype=np.int64) for d in self.directions}
        self.expires = {d: np.full(n, np.inf) for d in self.directions}
        #: The caps of the message each agent applies (NaN: none), per direction.
        self.caps: dict[str, Array] = {d: np.full((n, k), np.nan) for d in self.directions}
        #: Each agent's configured link rates: the largest capacity of the WAT's trace.
        self.link_mbps: dict[str, Array] = {
            d: np.maximum(scenario.toward(d).capacity_mbps.max(axis=0), 1e-3)
            for d in self.directions}
        self.traffic = scenario.traffic or BULK_ALONE
        flows = self.traffic.flows
        #: The classes each agent applies (the message's), per direction and CPE.
        self.classes: dict[str, list[tuple[ClassSet, ...]]] = {
            d: [()] * n for d in self.directions}
        self.applied = {d: Applied.none(n, k, len(flows)) for d in self.directions}
        if scenario.traffic is not None:
            self.stats = {d: FlowStats(flows, scenario.wats) for d in self.directions}
        self._t0 = 0  # the first step of the period the agents deliver next
        self.intake = LatestKpis()
        self.publisher = MemoryPublisher(clock=lambda: self._now)
        self._now = 0.0
        dt = scenario.dt_s
        self.loop = ControlLoop(
            self.intake, self.estimator, self.publisher, NullSink(),
            self.book.resolver, SdlStateStore(),
            settings=LoopSettings(control_period_s=self.period_steps * dt,
                                  kpi_max_age_s=max(5.0, 3 * self.period_steps * dt),
                                  lease_s=self.lease_s),
            decide=self.decide,
            semantics=_Semantics(frozenset(self.names), self.capped))
        radio = self._radio_table(scenario) if self.radio_kpis else {}
        # Both directions' rows carry the link's radio KPIs.
        self._kpis = {name: np.concatenate([col] * m, axis=1) for name, col in radio.items()}
        tables = [self._transport_tables(scenario.toward(d)) for d in self.directions]
        self._rtt_table = np.concatenate([rtt for rtt, _ in tables], axis=1)
        self._up_table = np.concatenate([up for _, up in tables], axis=1)
        return {d: w.copy() for d, w in self.weights.items()}

    def update(self, obs: Mapping[str, Observation]) -> dict[str, IntArray]:
        t1 = obs[self.directions[0]].t1
        self._now = t1 * self.scenario.dt_s
        self.intake.update(self.frame(obs))
        self.reports.append(self.loop.tick(self._now))
        self._apply(self.publisher.take())
        self._t0 = t1
        return {d: w.copy() for d, w in self.weights.items()}

    def _apply(self, messages: list[dict[str, object]]) -> None:
        """The agents apply their messages (the proxy's ``dl``, the CPE's ``ul``); expired
        leases fall back to safe weights."""
        changed: set[str] = set()
        for doc in messages:
            i = self._index[str(doc["cpe_id"])]
            lease = doc["lease_s"]
            assert isinstance(lease, int | float)
            for d in self.directions:
                part = doc[d]
                assert isinstance(part, dict)
                row = np.zeros(len(self._cols), dtype=np.int64)
                for wat, w in part["weights"].items():
                    row[self._cols[wat]] = int(w)
                self.weights[d][i] = row
                self.expires[d][i] = self._now + float(lease)
                caps = np.full(len(self._cols), np.nan)
                if d in self.capped:  # a WRR agent ignores caps
                    for wat, c in part.get("caps_mbps", {}).items():
                        caps[self._cols[wat]] = float(c)
                self.caps[d][i] = caps
                sets = tuple(ClassSet.from_dict(c) for c in part.get("classes", []))
                if sets or self.classes[d][i]:
                    self.classes[d][i] = sets
                    changed.add(d)
        for d in self.directions:
            expired = self.expires[d] <= self._now
            if expired.any():
                self.weights[d][expired] = SAFE_WEIGHT
                self.caps[d][expired] = np.nan  # safe weights never carry caps
                self.expires[d][expired] = np.inf
                for cpe in np.flatnonzero(expired).tolist():  # nor classes
                    if self.classes[d][cpe]:
                        self.classes[d][cpe] = ()
                        changed.add(d)
        for d in changed:
            self.applied[d] = Applied.of(self.classes[d], self.scenario.wats,
                                         self.traffic.flows, d)
            if self.stats is not None:
                self.stats[d].classes = [self.classes[d][0][j - 1].name if j else ""
                                         for j in self.applied[d].leaf[0].tolist()]

    def deliver(self, direction: str, capacity: Array, weights: NDArray[np.integer[Any]]
                ) -> tuple[Array, Array, NDArray[np.bool_]]:
        """:data:`twin.fluid.Deliver` of the simulated agents: rate caps on the directions
        whose agents run them (:mod:`twin.rate_caps`), with the classes they hold and the
        scenario's flows (:mod:`twin.class_queues`), WRR elsewhere.  The block is the period
        that starts where the last update ended."""
        if direction not in self.capped:
            return deliver(capacity, weights)
        caps = agent_caps(weights, self.caps[direction], self.link_mbps[direction])
        applied = self.applied[direction]
        if self.stats is None and not applied.any:
            return deliver_caps(capacity, weights, caps)  # one flow, one leaf: the same
        got = share(capacity, weights, caps, applied, self.traffic.flows,
                    self.traffic.buffer_ms)
        if self.stats is not None:
            rtt = self.scenario.rtt(direction)[self._t0:self._t0 + len(capacity)]
            self.stats[direction].add(got, rtt)
        return got.delivered, got.aggregate, got.saturated

    # --- what the agents report ---------------------------------------------------------------

    def _last_steps(self, steps: int) -> NDArray[np.intp]:
        """Last step of each control period (period i covers [i * P, (i + 1) * P))."""
        per = self.period_steps
        return np.minimum(np.arange(per, steps + per, per), steps) - 1

    def _transport_tables(self, scenario: Scenario) -> tuple[Array, Array]:
        """Per-period mean RTT over the steps the WAT was up, and ``up`` at the period's last
        step, (periods, n * k): they do not depend on the weights, so one vectorised pass
        replaces a few small array operations every period."""
        steps, n, k = scenario.rtt_ms.shape
        per = self.period_steps
        last = self._last_steps(steps)
        full = steps // per
        sums = np.zeros((len(last), n * k))
        counts = np.zeros((len(last), n * k))
        chunk = max(1, 2_000_000 // max(1, n * k * per))  # bound the temporaries
        for a in range(0, len(last), chunk):
            b = min(len(last), a + chunk)
            block = scenario.rtt_ms[a * per:min(steps, b * per)].reshape(-1, n * k)
            finite = np.isfinite(block)
            z = np.where(finite, block, 0.0)
            stop = min(b, full) - a  # whole periods of this chunk
            if stop > 0:
                sums[a:a + stop] = z[:stop * per].reshape(stop, per, -1).sum(axis=1)
                counts[a:a + stop] = finite[:stop * per].reshape(stop, per, -1).sum(axis=1)
            if b > full:  # the last, shorter period
                sums[full] = z[(full - a) * per:].sum(axis=0)
                counts[full] = finite[(full - a) * per:].sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            rtt = np.where(counts > 0, sums / np.maximum(counts, 1.0), np.nan)
        up = (scenario.capacity_mbps[last] > 0).reshape(len(last), n * k).astype(np.float64)
        return rtt, up

    def _radio_table(self, scenario: Scenario) -> dict[str, Array]:
        """Radio KPI columns (periods, n * k) at each period's last step, NaN where the WAT
        does not report the field; computed once, so a report is a row lookup."""
        import twin.kpis  # lazily: pandas is not needed by the other policies

        steps, n, k = scenario.capacity_mbps.shape
        last = self._last_steps(steps)
        sub = replace(scenario, capacity_mbps=scenario.capacity_mbps[last],
                      rtt_ms=scenario.rtt_ms[last], reverse=None,
                      context={key: np.asarray(v)[last] for key, v in scenario.context.items()})
        kpis = twin.kpis.radio_kpis(sub, np.random.default_rng(self.kpi_seed))
        table: dict[str, Array] = {}
        for j, w in enumerate(scenario.wats):
            for name, arr in kpis.get(w, {}).items():
                col = table.setdefault(name, np.full((len(last), n * k), np.nan))
                col[:, j::k] = arr
        return table

    def frame(self, obs: Mapping[str, Observation]) -> KpiFrame:
        """The agents' reports for the period, per direction: means over its steps, and the
        radio KPIs of its last step."""
        t1 = obs[self.directions[0]].t1
        row = (t1 - 1) // self.period_steps
        values = {
            "delivered_mbps": np.concatenate(
                [obs[d].delivered_mbps.mean(axis=0).ravel() for d in self.directions]),
            "rtt_ms": self._rtt_table[row],
            "saturated": np.concatenate(
                [obs[d].saturated.mean(axis=0).ravel() for d in self.directions]),
            "up": self._up_table[row],
        }
        for name, col in self._kpis.items():
            values[name] = col[row]
        return KpiFrame(time_s=t1 * self.scenario.dt_s, cpe=self.cpe, wat=self.wat,
                        values=values, direction=self.direction)
