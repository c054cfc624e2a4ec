"""The small interfaces between the control loop and its I/O.

Each has one real implementation tested against the real server (InfluxDB, Mosquitto, Redis)
and can be replaced by a plain in-memory object in tests of the loop itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from xapp.estimator import CapacityForecast, KpiFrame
from xapp.weights import WeightDecision


class KpiSource(Protocol):
    """Where the loop reads the latest per-(cpe, wat) KPIs each tick (InfluxDB ``wat_kpi``)."""

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        """The newest row per (cpe, wat) no older than ``max_age_s``; fields NaN if missing."""
        ...


class TelemetrySink(Protocol):
    """Where KPIs, forecasts and weights are written for dashboards and retraining."""

    def write_kpis(self, frame: KpiFrame) -> None: ...

    def write_forecasts(self, frame: KpiFrame, forecast: CapacityForecast,
                        model_version: str) -> None: ...

    def write_weights(self, time_s: float, weights: Mapping[str, tuple[int, WeightDecision]]
                      ) -> None:
        """``weights`` maps cpe_id to (published version, decision)."""
        ...


class WeightPublisher(Protocol):
    """Delivers weights to CPE agents (MQTT ``mcw/v1/cpe/{cpe_id}/weights``)."""

    def publish(self, cpe_id: str, decision: WeightDecision, *, mode: str,
                lease_s: float) -> int:
        """Queue the CPE's latest weights; returns the version it was given (grows per CPE)."""
        ...
