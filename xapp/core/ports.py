"""The ports of the core: the small interfaces between the control loop and the outside.

Each has one real adapter tested against the real server (InfluxDB, Mosquitto, Redis) and an
in-memory one (:mod:`xapp.adapters.lab`) that the twin, the benches and the loop's tests drive
the same loop through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.weights import WeightDecision


class KpiSource(Protocol):
    """Where the loop reads the latest per-(cpe, wat) KPIs each tick (the in-memory
    :class:`~xapp.core.intake.LatestKpis` that the MQTT and InfluxDB intakes keep current)."""

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


@dataclass(frozen=True)
class CpeRecord:
    """What the xApp remembers about one CPE between ticks and across restarts."""

    version: int
    weights: Mapping[str, int]
    shares: Mapping[str, float]
    aggregate_mbps: float
    usable: tuple[str, ...]
    reason: str
    mode: str
    #: The instance id whose policy produced the weights ("default" without one).
    policy_source: str
    time_s: float

    @classmethod
    def from_decision(cls, version: int, decision: WeightDecision, *, mode: str,
                      policy_source: str, time_s: float) -> CpeRecord:
        return cls(version, dict(decision.weights), dict(decision.shares),
                   float(decision.aggregate_mbps), tuple(sorted(decision.usable)),
                   decision.reason, mode, policy_source, time_s)

    def decision(self) -> WeightDecision:
        """The decision in force, as the engine's ``previous`` argument."""
        return WeightDecision(weights=dict(self.weights), shares=dict(self.shares),
                              aggregate_mbps=self.aggregate_mbps, usable=frozenset(self.usable),
                              changed=False, reason=self.reason)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["weights"], doc["shares"] = dict(self.weights), dict(self.shares)
        doc["usable"] = list(self.usable)
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CpeRecord:
        return cls(int(doc["version"]), {str(k): int(v) for k, v in doc["weights"].items()},
                   {str(k): float(v) for k, v in doc.get("shares", {}).items()},
                   float(doc.get("aggregate_mbps", 0.0)), tuple(doc.get("usable", ())),
                   str(doc.get("reason", "")), str(doc.get("mode", "")),
                   str(doc.get("policy_source", "")), float(doc.get("time_s", 0.0)))


class StateStore(Protocol):
    """What the loop remembers across restarts: per-CPE records and the model version
    (:class:`xapp.adapters.sdl.StateStore`: memory mirrored to SDL)."""

    def cpe(self, cpe_id: str) -> CpeRecord | None: ...

    def cpes(self) -> dict[str, CpeRecord]: ...

    def put_cpes(self, records: Mapping[str, CpeRecord]) -> None: ...

    def set_model_version(self, version: str) -> None: ...
