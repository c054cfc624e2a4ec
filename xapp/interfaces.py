"""The small interfaces between the control loop and its I/O.

Each has one real implementation tested against the real server (InfluxDB, Mosquitto, Redis)
and can be replaced by a plain in-memory object in tests of the loop itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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


#: One CPE's weights for a publish: (cpe_id, decision, steering mode, lease in seconds).
WeightUpdate = tuple[str, WeightDecision, str, float]


@dataclass
class PublishResult:
    """What a publisher did with each CPE of a batch."""

    #: cpe_id -> the version its weights were given (queued for delivery).
    versions: dict[str, int] = field(default_factory=dict)
    #: cpe_id -> why its weights were refused (nothing queued, no version used).
    errors: dict[str, Exception] = field(default_factory=dict)


class WeightPublisher(Protocol):
    """Delivers weights to CPE agents (MQTT ``mcw/v1/cpe/{cpe_id}/weights``)."""

    def publish_many(self, items: Iterable[WeightUpdate]) -> PublishResult:
        """Queue the latest weights of many CPEs (one control tick) at once.

        Versions grow per CPE.  A CPE whose weights are refused is reported in
        ``errors``; an exception means nothing was queued for any CPE of the batch.
        """
        ...
