"""The ports of the core: the small interfaces between the control loop and the outside.

Each has one real adapter tested against the real server (InfluxDB, Mosquitto, Redis) and an
in-memory one (:mod:`xapp.adapters.lab`) that the twin, the benches and the loop's tests drive
the same loop through.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from xapp.core.class_columns import ClassColumns
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.policy import KNOWN_WATS
from xapp.core.traffic import ClassSet
from xapp.core.weights import WeightDecision


class KpiSource(Protocol):
    """Where the loop reads the latest per-(cpe, wat, direction) KPIs each tick (the in-memory
    :class:`~xapp.core.intake.LatestKpis` that the MQTT and InfluxDB intakes keep current)."""

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        """The newest row per (cpe, wat, direction) no older than ``max_age_s``; fields NaN if
        missing.  Rows without a direction apply to both (:meth:`KpiFrame.expanded`)."""
        ...


def row_decision(wats: tuple[str, ...], weights: NDArray[np.int64], present: NDArray[np.bool_],
                 usable: NDArray[np.bool_], aggregate_mbps: float, reason: str
                 ) -> WeightDecision:
    """One CPE's row of weight columns as a :class:`WeightDecision` (naming the present WATs)."""
    names = [w for w, p in zip(wats, present.tolist(), strict=True) if p]
    chosen = dict(zip(names, weights[present].tolist(), strict=True))
    total = sum(chosen.values()) or 1
    return WeightDecision(
        weights=chosen, shares={w: v / total for w, v in chosen.items()},
        aggregate_mbps=aggregate_mbps,
        usable=frozenset(w for w, u in zip(wats, (usable & present).tolist(), strict=True) if u),
        changed=False, reason=reason)


#: One direction's choice for a CPE: the decision and the steering mode it was made under.
Choice = tuple[WeightDecision, str]


@dataclass(frozen=True)
class DirectionBatch:
    """One direction's weights for the rows of a :class:`WeightBatch`, column-wise.

    Row ``i`` names WAT ``wats[j]`` in its set iff ``present[i, j]``; ``sources[i]`` is the
    A1 instance whose policy produced it ("default" without one).  ``caps_mbps`` (n, k) are the
    rate caps sent with the set (:mod:`xapp.core.caps`), NaN where a WAT has none; None: no
    row has any (every applier is WRR or on/off, and the message is as before).  ``classes``
    are the traffic classes sent with the set (:mod:`xapp.core.classes`); None: no row has any.
    """

    weights: NDArray[np.int64]  # (n, k)
    present: NDArray[np.bool_]  # (n, k)
    usable: NDArray[np.bool_]  # (n, k)
    aggregate_mbps: NDArray[np.float64]  # (n,)
    modes: Sequence[str]
    reasons: Sequence[str]
    sources: Sequence[str]
    caps_mbps: NDArray[np.float64] | None = None  # (n, k)
    classes: ClassColumns | None = None

    def __len__(self) -> int:
        return len(self.modes)

    @classmethod
    def of(cls, choices: Sequence[Choice], wats: tuple[str, ...],
           sources: Sequence[str] | None = None) -> DirectionBatch:
        """Columns from per-CPE ``(decision, mode)``; a WAT outside ``wats`` raises
        ValueError (a message can only name known WATs)."""
        n, k = len(choices), len(wats)
        col = {w: j for j, w in enumerate(wats)}
        weights = np.zeros((n, k), dtype=np.int64)
        present = np.zeros((n, k), dtype=bool)
        usable = np.zeros((n, k), dtype=bool)
        for i, (d, _) in enumerate(choices):
            for wat, w in d.weights.items():
                if wat not in col:
                    raise ValueError(f"unknown WAT {wat!r}; known: {list(wats)}")
                weights[i, col[wat]], present[i, col[wat]] = w, True
            usable[i] = [w in d.usable for w in wats]
        return cls(weights, present, usable,
                   np.array([d.aggregate_mbps for d, _ in choices], dtype=np.float64),
                   [m for _, m in choices], [d.reason for d, _ in choices],
                   list(sources) if sources is not None else ["default"] * n)

    def subset(self, idx: NDArray[np.intp]) -> DirectionBatch:
        """The rows ``idx``, in that order."""
        pick = idx.tolist()
        return DirectionBatch(self.weights[idx], self.present[idx], self.usable[idx],
                              self.aggregate_mbps[idx], [self.modes[i] for i in pick],
                              [self.reasons[i] for i in pick], [self.sources[i] for i in pick],
                              None if self.caps_mbps is None else self.caps_mbps[idx],
                              None if self.classes is None else self.classes.subset(idx))

    def caps(self, i: int, wats: tuple[str, ...]) -> dict[str, float]:
        """Row ``i``'s caps by WAT (empty: none)."""
        if self.caps_mbps is None:
            return {}
        row = self.caps_mbps[i]
        return {w: float(c) for w, c in zip(wats, row.tolist(), strict=True) if np.isfinite(c)}

    def class_sets(self, i: int, wats: tuple[str, ...]) -> tuple[ClassSet, ...]:
        """Row ``i``'s classes (empty: none)."""
        if self.classes is None:
            return ()
        return self.classes.sets(i, wats, self.present[i])


@dataclass(frozen=True)
class WeightBatch:
    """The weights of many CPEs to publish at once (one tick), one row per CPE, both
    directions: one ``mcw.weights.v2`` message per row, one version and one lease.

    Column-wise, so a tick over 10,000 CPEs makes no per-CPE objects on its way to the wire:
    the publishers validate and encode messages straight from these arrays.
    """

    cpe_ids: Sequence[str]
    dl: DirectionBatch
    ul: DirectionBatch
    lease_s: float
    wats: tuple[str, ...] = KNOWN_WATS

    def __post_init__(self) -> None:
        if not len(self.dl) == len(self.ul) == len(self.cpe_ids):
            raise ValueError("WeightBatch: dl, ul and cpe_ids must have one row per CPE")

    def __len__(self) -> int:
        return len(self.cpe_ids)

    def direction(self, name: str) -> DirectionBatch:
        """The ``dl`` or ``ul`` columns."""
        if name == "dl":
            return self.dl
        if name == "ul":
            return self.ul
        raise ValueError(f"unknown direction {name!r}")

    @classmethod
    def of(cls, items: Iterable[tuple[str, Choice, Choice]], lease_s: float,
           wats: tuple[str, ...] = KNOWN_WATS) -> WeightBatch:
        """A batch from per-CPE ``(cpe_id, (dl_decision, dl_mode), (ul_decision, ul_mode))``;
        a WAT outside ``wats`` raises ValueError."""
        rows = list(items)
        return cls([c for c, _, _ in rows], DirectionBatch.of([d for _, d, _ in rows], wats),
                   DirectionBatch.of([u for _, _, u in rows], wats), lease_s, wats)

    @classmethod
    def same(cls, items: Iterable[tuple[str, WeightDecision, str]], lease_s: float,
             wats: tuple[str, ...] = KNOWN_WATS) -> WeightBatch:
        """A batch whose ``dl`` and ``ul`` sets are the same ``(cpe_id, decision, mode)``."""
        return cls.of(((c, (d, m), (d, m)) for c, d, m in items), lease_s, wats)

    def decision(self, i: int, direction: str) -> WeightDecision:
        """Row ``i`` of one direction as the engine's record type (logs, tests, the API)."""
        d = self.direction(direction)
        return row_decision(self.wats, d.weights[i], d.present[i], d.usable[i],
                            float(d.aggregate_mbps[i]), d.reasons[i])

    def subset(self, idx: NDArray[np.intp]) -> WeightBatch:
        """The rows ``idx``, in that order."""
        pick = idx.tolist()
        return WeightBatch([self.cpe_ids[i] for i in pick], self.dl.subset(idx),
                           self.ul.subset(idx), self.lease_s, self.wats)


@dataclass(frozen=True)
class Published:
    """What one tick published: row ``i`` of ``batch`` got version ``versions[i]`` (both
    directions) at ``time_s``."""

    batch: WeightBatch
    versions: NDArray[np.int64]
    time_s: float

    def __len__(self) -> int:
        return len(self.batch)

    def record(self, i: int) -> CpeRecord:
        b = self.batch
        return CpeRecord(int(self.versions[i]), self.time_s, *(
            DirectionRecord.from_decision(b.decision(i, name), mode=d.modes[i],
                                          policy_source=d.sources[i],
                                          caps_mbps=d.caps(i, b.wats),
                                          classes=d.class_sets(i, b.wats))
            for name, d in (("dl", b.dl), ("ul", b.ul))))


class BackendSemantics(Protocol):
    """Which agents apply a direction with rate caps (``capabilities.semantics`` =
    ``rate-caps``): their sets carry ``caps_mbps`` (:mod:`xapp.core.caps`).  The MQTT
    subscriber implements it from the agents' states; the twin from its simulated agents."""

    def rate_caps(self, direction: str) -> Collection[str]:
        """The CPE ids whose ``direction`` (``ul``: the CPE agent; ``dl``: the proxy serving
        the CPE) is applied by a backend that reports ``rate-caps``; asked once per tick."""
        ...

    def max_classes(self, direction: str) -> Mapping[str, int]:
        """CPE id -> how many traffic classes the applier of its ``direction`` applies
        (``capabilities.max_classes``); a CPE not named applies none (its sets go without
        classes).  Asked once per tick."""
        ...


class TelemetrySink(Protocol):
    """Where KPIs, forecasts and weights are written for dashboards and retraining."""

    def write_kpis(self, frame: KpiFrame) -> None: ...

    def write_forecasts(self, frame: KpiFrame, forecast: CapacityForecast,
                        model_version: str) -> None: ...

    def write_weights(self, published: Published) -> None: ...


@dataclass
class PublishResult:
    """What a publisher did with each CPE of a batch."""

    #: cpe_id -> the version its weights were given (queued for delivery).
    versions: dict[str, int] = field(default_factory=dict)
    #: cpe_id -> why its weights were refused (nothing queued, no version used).
    errors: dict[str, Exception] = field(default_factory=dict)


class WeightPublisher(Protocol):
    """Delivers weights to the agents (MQTT ``mcw/v1/cpe/{cpe_id}/weights``: the CPE agent
    applies ``ul``, the proxy agent serving the CPE ``dl``)."""

    def publish_many(self, batch: WeightBatch) -> PublishResult:
        """Queue the latest weights of many CPEs (one control tick) at once.

        Versions grow per CPE.  A CPE whose weights are refused is reported in
        ``errors``; an exception means nothing was queued for any CPE of the batch.
        """
        ...


@dataclass(frozen=True)
class DirectionRecord:
    """The weights in force for one direction of a CPE."""

    weights: Mapping[str, int]
    shares: Mapping[str, float]
    aggregate_mbps: float
    usable: tuple[str, ...]
    reason: str
    mode: str
    #: The instance id whose policy produced the weights ("default" without one).
    policy_source: str
    #: Rate caps sent with the weights (empty: none; the applier is not rate-caps).
    caps_mbps: Mapping[str, float] = field(default_factory=dict)
    #: Traffic classes sent with the weights (empty: none).
    classes: tuple[ClassSet, ...] = ()

    @classmethod
    def from_decision(cls, decision: WeightDecision, *, mode: str, policy_source: str,
                      caps_mbps: Mapping[str, float] | None = None,
                      classes: tuple[ClassSet, ...] = ()) -> DirectionRecord:
        return cls(dict(decision.weights), dict(decision.shares),
                   float(decision.aggregate_mbps), tuple(sorted(decision.usable)),
                   decision.reason, mode, policy_source, dict(caps_mbps or {}), classes)

    def decision(self) -> WeightDecision:
        """The decision in force, as the engine's ``previous`` argument."""
        return WeightDecision(weights=dict(self.weights), shares=dict(self.shares),
                              aggregate_mbps=self.aggregate_mbps, usable=frozenset(self.usable),
                              changed=False, reason=self.reason)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["weights"], doc["shares"] = dict(self.weights), dict(self.shares)
        doc["usable"] = list(self.usable)
        # Only with caps (classes): records of WRR and on/off appliers (without rules) stay as
        # they were.
        if self.caps_mbps:
            doc["caps_mbps"] = dict(self.caps_mbps)
        else:
            doc.pop("caps_mbps", None)
        if self.classes:
            doc["classes"] = [c.to_dict() for c in self.classes]
        else:
            doc.pop("classes", None)
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> DirectionRecord:
        return cls({str(k): int(v) for k, v in doc["weights"].items()},
                   {str(k): float(v) for k, v in doc.get("shares", {}).items()},
                   float(doc.get("aggregate_mbps", 0.0)), tuple(doc.get("usable", ())),
                   str(doc.get("reason", "")), str(doc.get("mode", "")),
                   str(doc.get("policy_source", "")),
                   {str(k): float(v) for k, v in doc.get("caps_mbps", {}).items()},
                   tuple(ClassSet.from_dict(c) for c in doc.get("classes", [])))


@dataclass(frozen=True)
class CpeRecord:
    """What the xApp remembers about one CPE between ticks and across restarts: the last
    message published (its version and time) and the weights of each direction in it."""

    version: int
    time_s: float
    dl: DirectionRecord
    ul: DirectionRecord

    def direction(self, name: str) -> DirectionRecord:
        if name == "dl":
            return self.dl
        if name == "ul":
            return self.ul
        raise ValueError(f"unknown direction {name!r}")

    @classmethod
    def from_decision(cls, version: int, decision: WeightDecision, *, mode: str,
                      policy_source: str, time_s: float) -> CpeRecord:
        """A record whose two directions are the same decision (a manual publish)."""
        d = DirectionRecord.from_decision(decision, mode=mode, policy_source=policy_source)
        return cls(version, time_s, d, d)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "time_s": self.time_s, "dl": self.dl.to_dict(),
                "ul": self.ul.to_dict()}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CpeRecord:
        """A record as :meth:`to_dict` writes it; a record of one set (written before
        directions existed) stands for both directions."""
        if "dl" in doc or "ul" in doc:
            dl, ul = DirectionRecord.from_dict(doc["dl"]), DirectionRecord.from_dict(doc["ul"])
        else:
            dl = ul = DirectionRecord.from_dict(doc)
        return cls(int(doc["version"]), float(doc.get("time_s", 0.0)), dl, ul)


class StateStore(Protocol):
    """What the loop remembers across restarts: per-CPE records and the model version
    (:class:`xapp.adapters.sdl.SdlStateStore`: memory mirrored to SDL)."""

    def cpe(self, cpe_id: str) -> CpeRecord | None: ...

    def cpes(self) -> dict[str, CpeRecord]: ...

    def put_published(self, published: Published) -> None:
        """Remember what a tick published (cheap: records are made when read or stored)."""
        ...

    def set_model_version(self, version: str) -> None: ...


class VersionStore(Protocol):
    """Durable per-CPE version ceilings.

    Implementations must make ``set_ceilings`` durable before returning and must never lower a
    stored ceiling (keep the maximum), so two racing writers cannot move a CPE backwards.
    """

    def get_ceilings(self, cpe_ids: Collection[str]) -> dict[str, int]:
        """The stored ceiling of each requested CPE (0 when none is stored)."""
        ...

    def set_ceilings(self, ceilings: Mapping[str, int]) -> None:
        """Raise the stored ceilings to at least the given values, durably."""
        ...
