"""The control loop: KPIs in, capacity forecasts, per-CPE weights out, every control period.

This is the only code that turns forecasts into published weights: ``mcw run`` drives it with
the real adapters, the twin, ``mcw demo`` and the benches with in-memory ones.  One
:meth:`ControlLoop.tick`:

1. reads the newest KPIs of every (cpe, wat) from the :class:`~xapp.core.ports.KpiSource` (the
   in-memory :class:`~xapp.core.intake.LatestKpis`: no I/O on the tick);
2. forecasts next-period capacities for all rows at once with the
   :class:`~xapp.core.forecast.CapacityEstimator` and writes them to the sink;
3. decides every *due* CPE at once (:func:`xapp.core.decisions.decide_batch`, one call per
   effective A1 policy): a CPE is due when its policy's ``update_period_s`` has elapsed, its
   policy changed, or a publish is owed.  Hysteresis holds against the decision in force, or
   is skipped after a policy change;
4. publishes one batch through the :class:`~xapp.core.ports.WeightPublisher`: CPEs whose
   weights or mode changed, whose publish is owed, and every CPE whose weights in force are half
   a lease old (the agent reverts to safe weights when its lease runs out);
5. records what was published in the :class:`~xapp.core.fleet.FleetTable` and the
   :class:`~xapp.core.ports.StateStore`, and writes the weights to the sink.

Rules decided once (README, "The control loop"):

* a WAT reported with **no usable forecast** (NaN, negative) that is not reported down is
  *tried* at the CPE's smallest forecast, so it carries a small share and gets measured; left at
  0 it would never be measured again (the censoring trap).  A CPE with no forecast at all tries
  every reported WAT at 1 Mbps: plain round-robin until something is known;
* a WAT whose ``up`` column is 0 is not usable;
* a CPE with no KPI rows is left alone: its lease runs out on the agent, which is right when the
  xApp no longer knows anything about it;
* when the policy leaves no usable WAT, the weights in force stay (and keep their lease).

Everything here is synchronous and clock-free (``now_s`` is passed in).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from xapp.core.decisions import ERROR, NO_USABLE, OK, DecideBatch, decide_batch
from xapp.core.fleet import FleetTable
from xapp.core.forecast import CapacityEstimator, KpiFrame
from xapp.core.policy import KNOWN_WATS, Policy
from xapp.core.policy_book import PolicyResolver
from xapp.core.ports import (
    KpiSource,
    Published,
    PublishResult,
    StateStore,
    TelemetrySink,
    WeightBatch,
    WeightPublisher,
)
from xapp.core.weights import WeightError

log = logging.getLogger(__name__)

Array = NDArray[np.float64]


@dataclass
class LoopSettings:
    """Knobs of the loop that a config reload may change between ticks."""

    control_period_s: float = 1.0
    kpi_max_age_s: float = 5.0
    lease_s: float = 30.0
    #: Re-send unchanged weights once this fraction of the lease has passed.
    refresh_fraction: float = 0.5


@dataclass
class TickReport:
    """What one tick did (returned for tests, handed to ``on_tick`` for metrics)."""

    time_s: float
    rows: int = 0
    cpes: int = 0
    decided: int = 0
    changed: int = 0
    held: int = 0
    no_usable: int = 0
    errors: int = 0
    published: dict[str, int] = field(default_factory=dict)
    publish_errors: int = 0
    skipped_rows: dict[str, int] = field(default_factory=dict)
    model_version: str = ""
    duration_s: float = 0.0


@dataclass(frozen=True)
class _RowMap:
    """How the rows of a frame map onto CPEs and WAT columns (cached while rows persist)."""

    cpe_ids: list[str]
    pos: NDArray[np.intp]  # frame row -> position among cpe_ids
    col: NDArray[np.intp]  # frame row -> WAT column, -1 for an unknown WAT
    fleet_rows: NDArray[np.intp]  # position -> FleetTable row
    unknown: int
    duplicates: int


@dataclass(frozen=True)
class _Group:
    policy: Policy
    source: str
    positions: NDArray[np.intp]


class ControlLoop:
    """Runs ticks over injected ports; call :meth:`tick` from one thread at a time.

    Parameters
    ----------
    kpis, estimator, publisher, sink
        The loop's ports and model (see :mod:`xapp.core.ports`).  ``sink`` may be None.
    policies : callable
        Returns the current :class:`~xapp.core.policy_book.PolicyResolver`.
    state : StateStore
        Per-CPE records of what was published; read when a CPE is first seen (restart).
    model_version : callable, default=lambda: "unknown"
        The version of the model ``estimator`` runs (it may hot-reload between ticks).
    settings : LoopSettings, default=LoopSettings()
    on_tick : callable or None
        Called with every :class:`TickReport` (metrics).
    publisher_connects : callable or None
        The publisher's count of successful broker connections; when it grows after the first,
        every CPE's weights are re-sent (the broker may have lost its retained messages).
    decide : callable, default=decide_batch
        How a group of CPEs under one policy is decided; the benches pass
        :func:`~xapp.core.decisions.decide_per_cpe` for their baseline.
    """

    def __init__(self, kpis: KpiSource, estimator: CapacityEstimator,
                 publisher: WeightPublisher, sink: TelemetrySink | None,
                 policies: Callable[[], PolicyResolver], state: StateStore, *,
                 model_version: Callable[[], str] = lambda: "unknown",
                 settings: LoopSettings | None = None,
                 on_tick: Callable[[TickReport], None] | None = None,
                 publisher_connects: Callable[[], int] | None = None,
                 decide: DecideBatch = decide_batch) -> None:
        self.kpis = kpis
        self.estimator = estimator
        self.publisher = publisher
        self.sink = sink
        self.policies = policies
        self.state = state
        self.model_version = model_version
        self.settings = settings or LoopSettings()
        self.on_tick = on_tick
        self.publisher_connects = publisher_connects
        self.decide = decide
        self.fleet = FleetTable(state.cpe)
        self._connects_seen: int | None = None
        self._rowmap: tuple[object, object, _RowMap] | None = None
        self._groups: tuple[PolicyResolver, NDArray[np.intp], list[_Group]] | None = None
        self._last_tick_monotonic: float | None = None
        self._lock = threading.Lock()

    @property
    def last_tick_monotonic(self) -> float | None:
        """``time.monotonic()`` at the end of the last tick that ran (liveness)."""
        return self._last_tick_monotonic

    def tick(self, now_s: float) -> TickReport:
        """Run one control period at wall time ``now_s`` (seconds since the epoch)."""
        with self._lock:
            started = time.perf_counter()
            report = TickReport(time_s=now_s)
            try:
                self._tick(now_s, report)
            finally:
                report.duration_s = time.perf_counter() - started
                self._last_tick_monotonic = time.monotonic()
                if self.on_tick is not None:
                    self.on_tick(report)
            log.debug("tick %.3f: %d rows, %d CPEs, %d decided, %d published in %.1f ms",
                      now_s, report.rows, report.cpes, report.decided, len(report.published),
                      report.duration_s * 1e3)
            return report

    # --- one tick ---------------------------------------------------------------------------

    def _tick(self, now_s: float, report: TickReport) -> None:
        s = self.settings
        self._check_reconnect()
        frame = self.kpis.latest(now_s, s.kpi_max_age_s)
        report.rows = len(frame)
        version = self.model_version()
        report.model_version = version
        self.state.set_model_version(version)
        if len(frame) == 0:
            return
        forecast = self.estimator.step(frame)
        if len(forecast.median_mbps) != len(frame) or len(forecast.lower_mbps) != len(frame):
            raise WeightError("estimator returned forecasts not aligned with the KPI rows")
        if self.sink is not None:
            try:
                self.sink.write_forecasts(frame, forecast, version)
            except Exception:
                log.exception("writing forecasts failed")
        rm = self._row_map(frame)
        report.cpes = len(rm.cpe_ids)
        cap, low, present, up, rtt = self._inputs(frame, rm, np.asarray(forecast.median_mbps),
                                                  np.asarray(forecast.lower_mbps), report)
        out = _Outgoing()
        for group in self._policy_groups(rm):
            self._decide_group(group, rm, now_s, cap, low, present, up, rtt, report, out)
        if out.rows:
            self._publish(out, now_s, report)

    def _check_reconnect(self) -> None:
        if self.publisher_connects is None:
            return
        connects = self.publisher_connects()
        seen, self._connects_seen = self._connects_seen, connects
        if seen is not None and connects > seen and seen > 0:
            n = len(self.fleet)
            log.info("publisher reconnected; re-sending the weights of %d CPEs", n)
            self.fleet.unpublished[:n] |= self.fleet.has[:n]

    def _row_map(self, frame: KpiFrame) -> _RowMap:
        cached = self._rowmap
        if cached is not None and cached[0] is frame.cpe and cached[1] is frame.wat:
            return cached[2]
        ids, pos = np.unique(frame.cpe.astype(str), return_inverse=True)
        wat_names, wat_pos = np.unique(frame.wat.astype(str), return_inverse=True)
        known = {w: j for j, w in enumerate(KNOWN_WATS)}
        col = np.array([known.get(w, -1) for w in wat_names.tolist()], dtype=np.intp)[wat_pos]
        ok = col >= 0
        pairs = pos[ok] * len(KNOWN_WATS) + col[ok]
        duplicates = int(len(pairs) - len(np.unique(pairs)))
        cpe_ids = ids.tolist()
        rm = _RowMap(cpe_ids=cpe_ids, pos=pos.astype(np.intp), col=col,
                     fleet_rows=self.fleet.rows(cpe_ids), unknown=int((~ok).sum()),
                     duplicates=duplicates)
        self._rowmap = (frame.cpe, frame.wat, rm)
        return rm

    def _inputs(self, frame: KpiFrame, rm: _RowMap, median: Array, lower: Array,
                report: TickReport) -> tuple[Array, Array, NDArray[np.bool_],
                                             NDArray[np.bool_], Array]:
        """Dense (CPE, WAT) arrays of capacity, lower bound, presence, up and RTT."""
        m, k = len(rm.cpe_ids), len(KNOWN_WATS)
        ok = rm.col >= 0
        p, c = rm.pos[ok], rm.col[ok]
        cap = np.full((m, k), np.nan)
        low = np.full((m, k), np.nan)
        rtt = np.full((m, k), np.nan)
        up_col = np.full((m, k), np.nan)
        present = np.zeros((m, k), dtype=bool)
        cap[p, c] = median[ok]
        low[p, c] = lower[ok]
        rtt[p, c] = frame.column("rtt_ms")[ok]
        up_col[p, c] = frame.column("up")[ok]
        present[p, c] = True
        skipped = report.skipped_rows
        if rm.unknown:
            skipped["unknown_wat"] = rm.unknown
        if rm.duplicates:
            skipped["duplicate"] = rm.duplicates
        up = present & (up_col != 0)
        good = np.isfinite(cap) & (cap >= 0)
        missing = present & ~good
        if missing.any():
            skipped["no_forecast"] = int(missing.sum())
            # Tried at the CPE's smallest forecast (1 Mbps when it has none), so it is measured.
            known = np.where(good & (cap > 0), cap, np.inf).min(axis=1, keepdims=True)
            trial = np.where(np.isfinite(known), known, 1.0)
            cap = np.where(missing, np.where(up, trial, 0.0), cap)
            low = np.where(missing, cap, low)
        low = np.where(np.isfinite(low), np.clip(low, 0.0, cap), cap)
        cap = np.where(present, cap, 0.0)
        low = np.where(present, low, 0.0)
        rtt = np.where(np.isfinite(rtt) & (rtt >= 0), rtt, np.nan)
        return cap, low, present, up, rtt

    def _policy_groups(self, rm: _RowMap) -> list[_Group]:
        resolver = self.policies()
        cached = self._groups
        if cached is not None and cached[0] is resolver and cached[1] is rm.fleet_rows:
            return cached[2]
        by_key: dict[tuple[int, str], tuple[Policy, list[int]]] = {}
        for i, cpe_id in enumerate(rm.cpe_ids):
            policy, source = resolver.for_cpe(cpe_id)
            by_key.setdefault((id(policy), source), (policy, []))[1].append(i)
        groups = [_Group(policy, source, np.array(pos, dtype=np.intp))
                  for (_, source), (policy, pos) in by_key.items()]
        self._groups = (resolver, rm.fleet_rows, groups)
        return groups

    def _decide_group(self, g: _Group, rm: _RowMap, now_s: float, cap: Array, low: Array,
                      present: NDArray[np.bool_], up: NDArray[np.bool_], rtt: Array,
                      report: TickReport, out: _Outgoing) -> None:
        s, fleet, policy = self.settings, self.fleet, g.policy
        rows = rm.fleet_rows[g.positions]
        changed_policy = fleet.policy_changed(rows, policy)
        last = fleet.decided_s[rows]
        # Half a control period of slack, so tick jitter does not turn a 1 s update period
        # into 2 s.
        due = (np.isnan(last) | changed_policy | fleet.unpublished[rows]
               | (now_s - last >= policy.update_period_s - s.control_period_s / 2))
        refresh_at = s.lease_s * s.refresh_fraction
        # CPEs not due keep their weights; those half a lease old are re-sent as they are.
        out.in_force(fleet, rows[~due & fleet.has[rows]
                                 & (now_s - fleet.published_s[rows] >= refresh_at)])
        idx = g.positions[due]
        if len(idx) == 0:
            return
        r_due = rows[due]
        d = self.decide(KNOWN_WATS, cap[idx], low[idx], present[idx], up[idx], rtt[idx],
                        policy, fleet.weights[r_due], fleet.present[r_due], fleet.usable[r_due],
                        fleet.has[r_due] & ~changed_policy[due])
        ok, no_usable, error = d.status == OK, d.status == NO_USABLE, d.status == ERROR
        fleet.decided_s[r_due[ok | no_usable]] = now_s
        fleet.applied[r_due[ok]] = policy
        report.decided += int(ok.sum())
        report.changed += int((ok & d.changed).sum())
        report.held += int((ok & ~d.changed).sum())
        report.no_usable += int(no_usable.sum())
        report.errors += int(error.sum())
        for i in np.flatnonzero(error).tolist():
            log.error("CPE %s: weights not computed: %s", fleet.ids[r_due[i]], d.reason[i])
        # Publish what changed, what is owed, a new mode, and what is half a lease old.
        owed = fleet.unpublished[r_due]
        stale = now_s - fleet.published_s[r_due] >= refresh_at
        mode = policy.mode.value
        differs = ((d.weights != fleet.weights[r_due]) | (present[idx] != fleet.present[r_due])
                   ).any(axis=1) | (fleet.mode[r_due] != mode)
        send = np.flatnonzero(ok & (d.changed | ~fleet.has[r_due] | owed | differs | stale))
        out.add(r_due[send], d.weights[send], present[idx[send]], d.usable[send],
                d.aggregate[send], [mode] * len(send), d.reason[send].tolist(),
                [g.source] * len(send))
        # No usable WAT: the weights in force stay; re-send them if owed or half a lease old.
        out.in_force(fleet, r_due[no_usable & fleet.has[r_due] & (owed | stale)])

    def _publish(self, out: _Outgoing, now_s: float, report: TickReport) -> None:
        fleet = self.fleet
        rows = np.concatenate(out.rows)
        batch = WeightBatch(
            [fleet.ids[r] for r in rows.tolist()], np.concatenate(out.weights),
            np.concatenate(out.present), np.concatenate(out.usable),
            np.concatenate(out.aggregate), out.modes, out.reasons, self.settings.lease_s)
        # One hand-over per tick: the publisher encodes and queues the whole batch at once.
        try:
            result = self.publisher.publish_many(batch)
        except Exception as failure:  # nothing was queued: every CPE of the batch is retried
            result = PublishResult(errors={cpe_id: failure for cpe_id in batch.cpe_ids})
        sent = np.ones(len(rows), dtype=bool)
        if result.errors:
            for i, cpe_id in enumerate(batch.cpe_ids):
                error = result.errors.get(cpe_id)
                if error is not None:
                    sent[i] = False
                    report.publish_errors += 1
                    log.error("publishing weights of CPE %s failed: %s", cpe_id, error)
            fleet.unpublished[rows[~sent]] = True
            batch = batch.subset(np.flatnonzero(sent))
            sources = [src for src, ok in zip(out.sources, sent.tolist(), strict=True) if ok]
            rows = rows[sent]
        else:
            sources = out.sources
        report.published = result.versions
        if len(rows) == 0:
            return
        versions = np.array([result.versions[c] for c in batch.cpe_ids], dtype=np.int64)
        fleet.store(rows, batch, versions, sources, now_s)
        published = Published(batch, versions, sources, now_s)
        self.state.put_published(published)
        if self.sink is not None:
            try:
                self.sink.write_weights(published)
            except Exception:
                log.exception("writing weights failed")


class _Outgoing:
    """The parts of one tick's publish, gathered group by group, joined once."""

    def __init__(self) -> None:
        self.rows: list[NDArray[np.intp]] = []
        self.weights: list[NDArray[np.int64]] = []
        self.present: list[NDArray[np.bool_]] = []
        self.usable: list[NDArray[np.bool_]] = []
        self.aggregate: list[Array] = []
        self.modes: list[str] = []
        self.reasons: list[str] = []
        self.sources: list[str] = []

    def add(self, rows: NDArray[np.intp], weights: NDArray[np.int64],
            present: NDArray[np.bool_], usable: NDArray[np.bool_], aggregate: Array,
            modes: list[str], reasons: list[str], sources: list[str]) -> None:
        if len(rows) == 0:
            return
        self.rows.append(rows)
        self.weights.append(weights)
        self.present.append(present)
        self.usable.append(usable)
        self.aggregate.append(aggregate)
        self.modes += modes
        self.reasons += reasons
        self.sources += sources

    def in_force(self, fleet: FleetTable, rows: NDArray[np.intp]) -> None:
        """Re-send the decisions in force at ``rows`` as they are."""
        self.add(rows, fleet.weights[rows], fleet.present[rows], fleet.usable[rows],
                 fleet.aggregate[rows], fleet.mode[rows].tolist(), fleet.reason[rows].tolist(),
                 fleet.source[rows].tolist())
