"""Prometheus metrics of ``mcw run``, on a registry of their own (one per process, or per test).

Names follow Prometheus conventions: ``mcw_`` prefix, ``_total`` counters, seconds for time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from xapp.core.loop import TickReport

#: Control ticks take milliseconds for a few CPEs and up to seconds for 10,000.
_TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Metrics:
    """The counters and gauges the loop, the A1 handler, SDL and the HTTP server update."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.ticks = Counter("mcw_ticks_total", "Control loop ticks run.", registry=r)
        self.tick_errors = Counter("mcw_tick_errors_total",
                                   "Control loop ticks that failed (KPI source or model).",
                                   registry=r)
        self.tick_duration = Histogram("mcw_tick_duration_seconds",
                                       "Wall time of one control tick.", buckets=_TICK_BUCKETS,
                                       registry=r)
        self.decisions = Counter("mcw_decisions_total",
                                 "Per-CPE weight decisions by result (changed, held, "
                                 "no_usable_wat, error).", ["result"], registry=r)
        self.classes_withheld = Counter(
            "mcw_classes_withheld_total",
            "Sets published without their policy's traffic classes because the applier takes "
            "fewer (capabilities.max_classes): the default rule alone, for all its traffic.",
            registry=r)
        self.publishes = Counter("mcw_publishes_total",
                                 "Weight messages handed to the publisher by result.",
                                 ["result"], registry=r)
        self.a1_requests = Counter("mcw_a1_requests_total",
                                   "A1 policy requests by operation and answered status.",
                                   ["operation", "status"], registry=r)
        self.sdl_errors = Counter("mcw_sdl_errors_total", "Failed SDL synchronisation passes.",
                                  registry=r)
        self.kpi_rows_skipped = Counter("mcw_kpi_rows_skipped_total",
                                        "KPI rows the loop could not use, by reason.",
                                        ["reason"], registry=r)
        self.cpes = Gauge("mcw_cpes", "CPEs seen in the last tick.", registry=r)
        self.ready = Gauge("mcw_ready", "1 when every dependency is reachable.", registry=r)
        self.dependency_up = Gauge("mcw_dependency_up",
                                   "1 when the dependency answered the last readiness check.",
                                   ["dependency"], registry=r)
        self.clock_skew = Gauge("mcw_clock_skew_seconds",
                                "This host's wall clock minus SDL Redis' clock (the fleet's "
                                "reference for weights' issue times) at the last reading; "
                                "NaN before one.", registry=r)
        self.clock_skew.set(float("nan"))

    def record_tick(self, report: TickReport) -> None:
        """Count one control tick (the loop's ``on_tick``)."""
        self.ticks.inc()
        self.tick_duration.observe(report.duration_s)
        self.cpes.set(report.cpes)
        for reason, n in report.skipped_rows.items():
            self.kpi_rows_skipped.labels(reason=reason).inc(n)
        for result, n in (("changed", report.changed), ("held", report.held),
                          ("no_usable_wat", report.no_usable), ("error", report.errors)):
            if n:
                self.decisions.labels(result=result).inc(n)
        if report.classes_withheld:
            self.classes_withheld.inc(report.classes_withheld)
        if report.published:
            self.publishes.labels(result="ok").inc(len(report.published))
        if report.publish_errors:
            self.publishes.labels(result="error").inc(report.publish_errors)

    def observe_a1(self, operation: str, status: str) -> None:
        self.a1_requests.labels(operation=operation, status=status).inc()

    def exposition(self) -> bytes:
        """The text exposition format for ``/metrics``."""
        return generate_latest(self.registry)
