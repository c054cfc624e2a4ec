"""Agent telemetry fans out to the loop's intake and to InfluxDB's write buffer."""

from __future__ import annotations

import numpy as np

from xapp.app.wiring.telemetry import AgentTelemetry
from xapp.core.forecast import KpiFrame
from xapp.core.intake import LatestKpis


class Sink:
    def __init__(self) -> None:
        self.frames: list[KpiFrame] = []

    def write_kpis(self, frame: KpiFrame) -> None:
        self.frames.append(frame)

    def write_forecasts(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("telemetry writes KPIs only")

    def write_weights(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("telemetry writes KPIs only")


def frame(t: float) -> KpiFrame:
    return KpiFrame(time_s=t, cpe=np.array(["cpe-1"]), wat=np.array(["nr"]),
                    values={"delivered_mbps": np.array([42.0])}, direction=np.array(["dl"]))


def test_a_frame_reaches_the_intake_and_the_sink() -> None:
    intake, sink = LatestKpis(), Sink()
    AgentTelemetry(intake, sink)(frame(100.0))
    assert [f.time_s for f in sink.frames] == [100.0]
    latest = intake.latest(100.5, 5.0)
    assert latest.series.tolist() == ["cpe-1/dl"]
    assert latest.values["delivered_mbps"].tolist() == [42.0]


def test_without_a_sink_the_intake_alone() -> None:
    intake = LatestKpis()
    AgentTelemetry(intake, None)(frame(100.0))
    assert len(intake.latest(100.5, 5.0)) == 1
