"""Steering policy: what the operator asks of the weight engine.

The same record is built from an A1 policy instance (``schemas/a1-policy-type-20100.json``),
from ``config-file.json`` defaults and from the CLI.  Scope (which CPEs a policy covers) is not
part of it: that is the RIC layer's business, the engine only ever sees one CPE at a time.

Directions: a policy applies to the downlink and the uplink alike unless its ``directions``
object overrides limits for one of them (``{"directions": {"dl": {"excluded_wats": ["lte"]}}}``).
An override names only the keys of :data:`DIRECTION_KEYS` and is merged over the policy's own
keys, key by key (``wats`` as a whole); the result must be a valid policy, or the whole policy is
refused.  The update period is the CPE's, not a direction's: one message carries both sets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: Technologies the product knows.  Order is the canonical order of columns everywhere
#: (CLI tables, twin arrays, sysctl tuples).
KNOWN_WATS: tuple[str, ...] = ("nr", "lte", "wifi", "lifi")

#: The directions a policy may override limits for (``dl``: proxy to CPE; ``ul``: CPE to proxy).
POLICY_DIRECTIONS: tuple[str, ...] = ("dl", "ul")

#: Keys a per-direction override may set: what limits the weights of one direction.
DIRECTION_KEYS: frozenset[str] = frozenset({
    "mode", "max_weight", "wats", "excluded_wats", "priority", "rtt_bound_ms", "demand_mbps",
    "capacity_floor_mbps", "hysteresis_pct",
})


class SteeringMode(StrEnum):
    """Steering modes, in the spirit of 3GPP ATSSS steering modes."""

    LOAD_BALANCING = "load_balancing"
    FIXED_SPLIT = "fixed_split"
    ACTIVE_STANDBY = "active_standby"
    LATENCY_BOUND = "latency_bound"


class PolicyError(ValueError):
    """A policy that cannot be applied; the message says which field and why."""


@dataclass(frozen=True)
class Policy:
    """Operator intent for one CPE.

    Shares are fractions of the packets a WRR round sends on a WAT (weight / sum of weights).
    """

    mode: SteeringMode = SteeringMode.LOAD_BALANCING
    max_weight: int = 100
    min_share: Mapping[str, float] = field(default_factory=dict)
    max_share: Mapping[str, float] = field(default_factory=dict)
    excluded: frozenset[str] = frozenset()
    #: fixed_split: percentage of traffic per WAT; WATs not named get 0.
    split_pct: Mapping[str, float] = field(default_factory=dict)
    #: active_standby: WATs in order of preference; WATs not named are never used.
    priority: tuple[str, ...] = ()
    #: latency_bound: WATs whose RTT exceeds this get 0 unless the others cannot carry demand.
    rtt_bound_ms: float | None = None
    demand_mbps: float = 0.0
    #: A WAT whose (conservative) capacity is below this gets weight 0.
    capacity_floor_mbps: float = 0.0
    #: New weights only when T(w) improves by more than this, or a WAT's usability changes.
    hysteresis_pct: float = 0.0
    #: How often the control loop recomputes weights for the CPEs under this policy.
    update_period_s: float = 1.0
    #: Per-direction overrides as given (``{"dl": {...}}``); see :meth:`for_direction`.
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The policy of each overridden direction, built from ``overrides`` when constructed.
    directions: Mapping[str, Policy] = field(default_factory=dict, init=False, compare=False,
                                             repr=False)

    def __post_init__(self) -> None:
        _validate(self)
        if not isinstance(self.overrides, Mapping):
            raise PolicyError("'directions' must be an object keyed by direction (dl, ul)")
        unknown = sorted(set(self.overrides) - set(POLICY_DIRECTIONS))
        if unknown:
            raise PolicyError(f"directions: unknown direction {unknown}; "
                              f"known: {list(POLICY_DIRECTIONS)}")
        built: dict[str, Policy] = {}
        if self.overrides:
            base = {k: v for k, v in self.to_dict().items() if k != "directions"}
            for direction, override in self.overrides.items():
                if not isinstance(override, Mapping):
                    raise PolicyError(f"directions.{direction} must be an object")
                extra = sorted(set(override) - DIRECTION_KEYS)
                if extra:
                    raise PolicyError(f"directions.{direction}: keys {extra} cannot be set per "
                                      f"direction; allowed: {sorted(DIRECTION_KEYS)}")
                try:
                    built[direction] = Policy.from_dict({**base, **override})
                except PolicyError as exc:
                    raise PolicyError(f"directions.{direction}: {exc}") from None
        object.__setattr__(self, "directions", built)

    def for_direction(self, direction: str) -> Policy:
        """The policy of one direction: this one with that direction's overrides, if any."""
        return self.directions.get(direction, self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Policy:
        """Build a policy from its JSON form (the A1 payload without ``scope``).

        Raises :class:`PolicyError` on unknown keys or values out of range.
        """
        allowed = {
            "mode", "max_weight", "wats", "excluded_wats", "priority", "rtt_bound_ms",
            "demand_mbps", "capacity_floor_mbps", "hysteresis_pct", "update_period_s",
            "directions",
        }
        unknown = set(doc) - allowed
        if unknown:
            raise PolicyError(f"unknown policy keys: {sorted(unknown)}")
        per_wat: Mapping[str, Mapping[str, Any]] = doc.get("wats", {}) or {}
        if not isinstance(per_wat, Mapping):
            raise PolicyError("'wats' must be an object keyed by WAT name")
        _check_wats(per_wat.keys(), "wats")
        min_share: dict[str, float] = {}
        max_share: dict[str, float] = {}
        split: dict[str, float] = {}
        for wat, limits in per_wat.items():
            if not isinstance(limits, Mapping):
                raise PolicyError(f"wats.{wat} must be an object")
            extra = set(limits) - {"min_share", "max_share", "split_pct"}
            if extra:
                raise PolicyError(f"wats.{wat}: unknown keys {sorted(extra)}")
            if "min_share" in limits:
                min_share[wat] = _number(limits["min_share"], f"wats.{wat}.min_share")
            if "max_share" in limits:
                max_share[wat] = _number(limits["max_share"], f"wats.{wat}.max_share")
            if "split_pct" in limits:
                split[wat] = _number(limits["split_pct"], f"wats.{wat}.split_pct")
        try:
            mode = SteeringMode(doc.get("mode", SteeringMode.LOAD_BALANCING))
        except ValueError as exc:
            raise PolicyError(f"unknown steering mode {doc.get('mode')!r}") from exc
        rtt_bound = doc.get("rtt_bound_ms")
        return cls(
            mode=mode,
            max_weight=_integer(doc.get("max_weight", 100), "max_weight"),
            min_share=min_share,
            max_share=max_share,
            excluded=frozenset(_wat_list(doc.get("excluded_wats", []), "excluded_wats")),
            split_pct=split,
            priority=tuple(_wat_list(doc.get("priority", []), "priority")),
            rtt_bound_ms=None if rtt_bound is None else _number(rtt_bound, "rtt_bound_ms"),
            demand_mbps=_number(doc.get("demand_mbps", 0.0), "demand_mbps"),
            capacity_floor_mbps=_number(doc.get("capacity_floor_mbps", 0.0), "capacity_floor_mbps"),
            hysteresis_pct=_number(doc.get("hysteresis_pct", 0.0), "hysteresis_pct"),
            update_period_s=_number(doc.get("update_period_s", 1.0), "update_period_s"),
            overrides=_overrides(doc.get("directions", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form accepted by :meth:`from_dict`."""
        wats: dict[str, dict[str, float]] = {}
        for key, table in (("min_share", self.min_share), ("max_share", self.max_share),
                           ("split_pct", self.split_pct)):
            for wat, value in table.items():
                wats.setdefault(wat, {})[key] = value
        doc: dict[str, Any] = {
            "mode": self.mode.value,
            "max_weight": self.max_weight,
            "wats": wats,
            "excluded_wats": sorted(self.excluded),
            "priority": list(self.priority),
            "demand_mbps": self.demand_mbps,
            "capacity_floor_mbps": self.capacity_floor_mbps,
            "hysteresis_pct": self.hysteresis_pct,
            "update_period_s": self.update_period_s,
        }
        if self.rtt_bound_ms is not None:
            doc["rtt_bound_ms"] = self.rtt_bound_ms
        if self.overrides:
            doc["directions"] = {d: dict(o) for d, o in self.overrides.items()}
        return doc


def _overrides(value: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise PolicyError("'directions' must be an object keyed by direction (dl, ul)")
    out: dict[str, dict[str, Any]] = {}
    for direction, override in value.items():
        if not isinstance(override, Mapping):
            raise PolicyError(f"directions.{direction} must be an object")
        out[str(direction)] = dict(override)
    return out


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise PolicyError(f"{name} must be finite, got {value!r}")
    return float(value)


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{name} must be an integer, got {value!r}")
    return value


def _wat_list(value: Any, name: str) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{name} must be a list of WAT names")
    return list(value)


def _check_wats(names: object, where: str) -> None:
    unknown = sorted(set(names) - set(KNOWN_WATS))  # type: ignore[call-overload]
    if unknown:
        raise PolicyError(f"{where}: unknown WAT {unknown}; known: {list(KNOWN_WATS)}")


def _validate(p: Policy) -> None:
    if not 1 <= p.max_weight <= 255:
        raise PolicyError(f"max_weight must be in 1..255, got {p.max_weight}")
    for where, names in (("min_share", p.min_share), ("max_share", p.max_share),
                         ("excluded_wats", p.excluded), ("split_pct", p.split_pct),
                         ("priority", p.priority)):
        _check_wats(names, where)
    for where, table in (("min_share", p.min_share), ("max_share", p.max_share)):
        for wat, share in table.items():
            if not 0.0 <= share <= 1.0:
                raise PolicyError(f"{where}[{wat}] must be in [0, 1], got {share}")
    for wat, lo in p.min_share.items():
        if lo > p.max_share.get(wat, 1.0):
            raise PolicyError(f"min_share[{wat}]={lo} exceeds max_share[{wat}]")
    if sum(p.min_share.values()) > 1.0 + 1e-9:
        raise PolicyError("min_share values add up to more than 1")
    if any(v < 0 for v in p.split_pct.values()):
        raise PolicyError("split_pct values must be >= 0")
    if p.mode is SteeringMode.FIXED_SPLIT and sum(p.split_pct.values()) <= 0:
        raise PolicyError("fixed_split needs split_pct > 0 for at least one WAT")
    if p.mode is SteeringMode.ACTIVE_STANDBY and not p.priority:
        raise PolicyError("active_standby needs a priority list")
    if len(set(p.priority)) != len(p.priority):
        raise PolicyError("priority lists a WAT twice")
    if p.mode is SteeringMode.LATENCY_BOUND and p.rtt_bound_ms is None:
        raise PolicyError("latency_bound needs rtt_bound_ms")
    if p.rtt_bound_ms is not None and p.rtt_bound_ms <= 0:
        raise PolicyError("rtt_bound_ms must be > 0")
    for name in ("demand_mbps", "capacity_floor_mbps", "hysteresis_pct"):
        if getattr(p, name) < 0:
            raise PolicyError(f"{name} must be >= 0")
    if p.update_period_s <= 0:
        raise PolicyError("update_period_s must be > 0")
    _check_something_allowed(p)


def _check_something_allowed(p: Policy) -> None:
    """Refuse a policy under which no WAT may ever carry traffic, whatever the CPE has.

    Such a policy can never be met, so it is an operator's mistake to say at once (an A1
    ERROR, the policy in force stays) rather than a state to discover on the CPEs.  Policies
    that a particular CPE cannot meet (it has only the excluded WATs) are the loop's business:
    it keeps steering the other direction (docs/guarantees.md)."""
    allowed = [w for w in KNOWN_WATS if w not in p.excluded]
    if not allowed:
        raise PolicyError(f"excluded_wats excludes every WAT ({', '.join(KNOWN_WATS)}): no WAT "
                          "could carry traffic; leave at least one")
    if p.mode is SteeringMode.FIXED_SPLIT \
            and not any(p.split_pct.get(w, 0.0) > 0 for w in allowed):
        raise PolicyError("fixed_split: every WAT with split_pct > 0 is in excluded_wats")
    if p.mode is SteeringMode.ACTIVE_STANDBY and not any(w in allowed for w in p.priority):
        raise PolicyError("active_standby: every WAT of the priority list is in excluded_wats")
