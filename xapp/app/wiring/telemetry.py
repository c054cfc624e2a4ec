"""KPI frames as they arrive from the agents and the RAN: into the loop's intake and InfluxDB."""

from __future__ import annotations

from xapp.core.forecast import KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.ports import TelemetrySink


class AgentTelemetry:
    """Agent telemetry as it arrives (a batch at a time, on the subscriber's batch worker): into
    the intake the next tick reads, and into InfluxDB's write buffer (flushed by its own
    thread)."""

    def __init__(self, intake: LatestKpis, sink: TelemetrySink | None) -> None:
        self.intake = intake
        self.sink = sink

    def __call__(self, frame: KpiFrame) -> None:
        self.intake.update(frame)
        if self.sink is not None:
            self.sink.write_kpis(frame)
