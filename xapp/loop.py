"""The control loop: KPIs in, capacity forecasts, per-CPE weights out, every control period.

One :meth:`ControlLoop.tick`:

1. reads the newest KPIs of every (cpe, wat) from the :class:`~xapp.interfaces.KpiSource`;
2. forecasts next-period capacities for all rows at once with the
   :class:`~xapp.estimator.CapacityEstimator` and writes them to the
   :class:`~xapp.interfaces.TelemetrySink`;
3. for each CPE whose policy's ``update_period_s`` has elapsed, runs
   :func:`xapp.weights.decide` under the CPE's effective A1 policy, with the decision in force as
   ``previous`` (hysteresis), or None when the policy changed;
4. publishes through the :class:`~xapp.interfaces.WeightPublisher` when the weights changed, the
   mode changed, an earlier publish failed, or half the lease has passed (the agent reverts to
   safe weights when its lease runs out, so unchanged weights are re-sent to keep it);
5. remembers what was published in the :class:`~xapp.ric.sdl_store.StateStore` (memory, mirrored
   to SDL) and writes the weights to the sink.

A CPE with no KPI rows this tick is left alone: its lease runs out on the agent, which is right
when the xApp no longer knows anything about it.  When the policy leaves no usable WAT
(:class:`~xapp.weights.NoUsableWatError`), the previous weights stay in force (and keep their
lease).  Everything here is synchronous and clock-free (``now_s`` is passed in), so tests drive it
with in-memory fakes.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from xapp.estimator import CapacityEstimator, CapacityForecast, KpiFrame
from xapp.interfaces import KpiSource, PublishResult, TelemetrySink, WeightPublisher, WeightUpdate
from xapp.policy import KNOWN_WATS, Policy
from xapp.ric.a1 import PolicyResolver
from xapp.ric.metrics import Metrics
from xapp.ric.sdl_store import CpeRecord, StateStore
from xapp.weights import NoUsableWatError, WatState, WeightDecision, WeightError, decide

log = logging.getLogger(__name__)


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
    """What one tick did (returned for tests and logged at DEBUG)."""

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


class ControlLoop:
    """Runs ticks over injected I/O; safe to call :meth:`tick` from one thread at a time.

    Parameters
    ----------
    kpis, estimator, publisher, sink
        The loop's I/O and model (see :mod:`xapp.interfaces`).  ``sink`` may be None.
    policies : callable
        Returns the current :class:`~xapp.ric.a1.PolicyResolver` (A1 instances and defaults).
    state : StateStore
        Per-CPE memory of what was published; restored from SDL after a restart.
    model_version : callable, default=lambda: "unknown"
        The version of the model ``estimator`` runs (it may hot-reload between ticks).
    settings : LoopSettings, default=LoopSettings()
    metrics : Metrics or None, default=None
    """

    def __init__(self, kpis: KpiSource, estimator: CapacityEstimator,
                 publisher: WeightPublisher, sink: TelemetrySink | None,
                 policies: Callable[[], PolicyResolver], state: StateStore, *,
                 model_version: Callable[[], str] = lambda: "unknown",
                 settings: LoopSettings | None = None, metrics: Metrics | None = None) -> None:
        self.kpis = kpis
        self.estimator = estimator
        self.publisher = publisher
        self.sink = sink
        self.policies = policies
        self.state = state
        self.model_version = model_version
        self.settings = settings or LoopSettings()
        self.metrics = metrics
        #: cpe -> policy of the decision in force (absent after a restart: hysteresis then
        #: applies against the restored weights instead of jumping).
        self._applied: dict[str, Policy] = {}
        self._last_decided: dict[str, float] = {}
        self._unpublished: set[str] = set()
        self._publisher_connects: int | None = None
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
                elapsed = time.perf_counter() - started
                self._last_tick_monotonic = time.monotonic()
                if self.metrics is not None:
                    self.metrics.ticks.inc()
                    self.metrics.tick_duration.observe(elapsed)
                    self.metrics.cpes.set(report.cpes)
                    for reason, n in report.skipped_rows.items():
                        self.metrics.kpi_rows_skipped.labels(reason=reason).inc(n)
            log.debug("tick %.3f: %d rows, %d CPEs, %d decided, %d published in %.1f ms",
                      now_s, report.rows, report.cpes, report.decided, len(report.published),
                      elapsed * 1e3)
            return report

    def _check_reconnect(self) -> None:
        """After the publisher reconnected, re-send every CPE's weights once.

        A broker that crashed (or failed over) may have lost its retained messages, and an
        agent that reconnects then finds no weights until the lease refresh, which may be many
        seconds away.  Re-sending costs one message per CPE (coalesced by the publisher).
        Publishers without ``stats.connects`` (files, fakes) are left alone.
        """
        connects = getattr(getattr(self.publisher, "stats", None), "connects", None)
        if not isinstance(connects, int):
            return
        seen, self._publisher_connects = self._publisher_connects, connects
        if seen is not None and connects > seen and seen > 0:
            cpes = self.state.cpes()
            log.info("publisher reconnected; re-sending the weights of %d CPEs", len(cpes))
            self._unpublished.update(cpes)

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
        per_cpe = self._wat_states(frame, forecast, report)
        report.cpes = len(per_cpe)
        resolver = self.policies()
        batch: list[WeightUpdate] = []
        sources: dict[str, tuple[str, WeightDecision, str]] = {}
        for cpe_id, states in per_cpe.items():
            policy, source = resolver.for_cpe(cpe_id)
            outcome = self._decide_one(cpe_id, states, policy, now_s, report)
            if outcome is None:
                continue
            decision, must_publish = outcome
            record = self.state.cpe(cpe_id)
            if not must_publish and record is not None \
                    and now_s - record.time_s < s.lease_s * s.refresh_fraction:
                continue
            batch.append((cpe_id, decision, policy.mode.value, s.lease_s))
            sources[cpe_id] = (source, decision, policy.mode.value)
        if not batch:
            return
        # One hand-over per tick: the publisher queues the whole batch with one wake-up.
        try:
            result = self.publisher.publish_many(batch)
        except Exception as failure:  # nothing was queued: every CPE of the batch is retried
            result = PublishResult(errors={cpe_id: failure for cpe_id, *_ in batch})
        published: dict[str, tuple[int, WeightDecision]] = {}
        records: dict[str, CpeRecord] = {}
        for cpe_id, error in result.errors.items():
            report.publish_errors += 1
            self._unpublished.add(cpe_id)
            log.error("publishing weights of CPE %s failed: %s", cpe_id, error)
            self._count_publish("error")
        for cpe_id, version_no in result.versions.items():
            source, decision, mode = sources[cpe_id]
            self._unpublished.discard(cpe_id)
            self._count_publish("ok")
            report.published[cpe_id] = version_no
            published[cpe_id] = (version_no, decision)
            records[cpe_id] = CpeRecord.from_decision(version_no, decision, mode=mode,
                                                      policy_source=source, time_s=now_s)
        if records:
            self.state.put_cpes(records)
        if published and self.sink is not None:
            try:
                self.sink.write_weights(now_s, published)
            except Exception:
                log.exception("writing weights failed")

    def _decide_one(self, cpe_id: str, states: dict[str, WatState], policy: Policy,
                    now_s: float, report: TickReport) -> tuple[WeightDecision, bool] | None:
        """The decision for one CPE and whether it must be published; None to leave it alone."""
        s = self.settings
        record = self.state.cpe(cpe_id)
        applied = self._applied.get(cpe_id)
        policy_changed = applied is not None and applied != policy
        last = self._last_decided.get(cpe_id)
        # Half a control period of slack, so tick jitter does not turn a 1 s update period
        # into 2 s.
        due = (last is None or policy_changed
               or now_s - last >= policy.update_period_s - s.control_period_s / 2)
        if not due and cpe_id not in self._unpublished:
            return None
        previous = None if (record is None or policy_changed) else record.decision()
        try:
            decision = decide(states, policy, previous)
        except NoUsableWatError as exc:
            report.no_usable += 1
            self._count_decision("no_usable_wat")
            log.debug("CPE %s: %s; previous weights stay", cpe_id, exc)
            self._last_decided[cpe_id] = now_s
            if record is None:
                return None
            return record.decision(), cpe_id in self._unpublished
        except WeightError as exc:
            report.errors += 1
            self._count_decision("error")
            log.error("CPE %s: weights not computed: %s", cpe_id, exc)
            return None
        self._last_decided[cpe_id] = now_s
        self._applied[cpe_id] = policy
        report.decided += 1
        if decision.changed:
            report.changed += 1
            self._count_decision("changed")
        else:
            report.held += 1
            self._count_decision("held")
        must = (decision.changed or record is None or cpe_id in self._unpublished
                or record.mode != policy.mode.value or record.weights != decision.weights)
        return decision, must

    def _wat_states(self, frame: KpiFrame, forecast: CapacityForecast,
                    report: TickReport) -> dict[str, dict[str, WatState]]:
        """Group rows by CPE into the engine's per-WAT states (conservative capacities)."""
        median = np.asarray(forecast.median_mbps, dtype=np.float64)
        lower = np.asarray(forecast.lower_mbps, dtype=np.float64)
        rtt = frame.column("rtt_ms")
        out: dict[str, dict[str, WatState]] = {}
        skipped = report.skipped_rows
        known = set(KNOWN_WATS)
        for i in range(len(frame)):
            cpe_id, wat = str(frame.cpe[i]), str(frame.wat[i])
            if wat not in known:
                skipped["unknown_wat"] = skipped.get("unknown_wat", 0) + 1
                continue
            states = out.setdefault(cpe_id, {})
            if wat in states:
                skipped["duplicate"] = skipped.get("duplicate", 0) + 1
            cap = float(median[i])
            if not math.isfinite(cap) or cap < 0:
                # No forecast for this WAT: it carries nothing this period, explicitly.
                skipped["no_forecast"] = skipped.get("no_forecast", 0) + 1
                states[wat] = WatState(capacity_mbps=0.0, up=False)
                continue
            lo = float(lower[i])
            lo_value = min(max(lo, 0.0), cap) if math.isfinite(lo) else None
            r = float(rtt[i])
            states[wat] = WatState(capacity_mbps=cap, lower_mbps=lo_value,
                                   rtt_ms=r if math.isfinite(r) and r >= 0 else None)
        return out

    def _count_decision(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.decisions.labels(result=result).inc()

    def _count_publish(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.publishes.labels(result=result).inc()


class LoopRunner:
    """Runs :meth:`ControlLoop.tick` every ``control_period_s`` in a thread until stopped.

    Ticks are scheduled on the monotonic clock; a tick that overruns makes the next one start at
    once rather than queueing up missed ones.  A failing tick is logged and counted, the loop
    carries on.
    """

    def __init__(self, loop: ControlLoop, clock: Callable[[], float] = time.time) -> None:
        self.loop = loop
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mcw-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        failing = 0
        while not self._stop.is_set():
            try:
                self.loop.tick(self._clock())
                if failing:
                    log.info("control ticks work again after %d failures", failing)
                failing = 0
            except Exception as exc:
                # A dependency outage fails every tick: the traceback once, then one line per
                # tick, so the log stays readable (the count is on /metrics).
                if failing == 0:
                    log.exception("control tick failed")
                else:
                    log.error("control tick failed again (%d in a row): %s", failing + 1, exc)
                failing += 1
                if self.loop.metrics is not None:
                    self.loop.metrics.tick_errors.inc()
            period = self.loop.settings.control_period_s
            next_at = max(next_at + period, time.monotonic())
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Ask the loop to stop after the current tick; True if it stopped within the timeout."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
