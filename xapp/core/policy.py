"""Steering policy: what the operator asks of the weight engine.

The same record is built from an A1 policy instance (``schemas/a1-policy-type-20100.json`` and
its successor ``a1-policy-type-20101.json``, which adds rules, two modes and thresholds), from
``config-file.json`` defaults and from the CLI.  Scope (which CPEs a policy covers) is not
part of it: that is the RIC layer's business, the engine only ever sees one CPE at a time.

Directions: a policy applies to the downlink and the uplink alike unless its ``directions``
object overrides limits for one of them (``{"directions": {"dl": {"excluded_wats": ["lte"]}}}``).
An override names only the keys of :data:`DIRECTION_KEYS` and is merged over the policy's own
keys, key by key (``wats`` as a whole); the result must be a valid policy, or the whole policy is
refused.  The update period is the CPE's, not a direction's: one message carries both sets.

Rules (:mod:`xapp.core.rules`): ordered traffic classes, each with a match and its own steering
laid over the policy's as each direction has it; the policy's own steering is the default rule
(traffic no rule matches).  :meth:`Policy.classes_for` gives the classes of a direction.

Thresholds (``rtt_max_ms``, ``loss_max_pct``; for every WAT, or per WAT in ``wats``) apply in
every mode: a WAT over one is not used unless no usable WAT is within them
(:mod:`xapp.core.thresholds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from xapp.core.rules import ClassRule, Rule, RuleError, parse_rules
from xapp.core.traffic import MESSAGE_BASE_BYTES, MESSAGE_BYTES_MAX, class_bytes_max

#: Technologies the product knows.  Order is the canonical order of columns everywhere
#: (CLI tables, twin arrays, sysctl tuples).
KNOWN_WATS: tuple[str, ...] = ("nr", "lte", "wifi", "lifi")

#: The directions a policy may override limits for (``dl``: proxy to CPE; ``ul``: CPE to proxy).
POLICY_DIRECTIONS: tuple[str, ...] = ("dl", "ul")

#: Keys a per-direction override (and a rule) may set: what limits the weights of one direction.
DIRECTION_KEYS: frozenset[str] = frozenset({
    "mode", "max_weight", "wats", "excluded_wats", "priority", "rtt_bound_ms", "demand_mbps",
    "capacity_floor_mbps", "hysteresis_pct", "rtt_max_ms", "loss_max_pct",
})
#: Keys of a WAT's entry in ``wats``.
WAT_KEYS: frozenset[str] = frozenset({"min_share", "max_share", "split_pct", "rtt_max_ms",
                                      "loss_max_pct"})
#: A WAT that carries an urgent class is capped at this fraction of its forecast by default
#: (:mod:`xapp.core.classes`): low enough that the queue forms at the agent, where the urgent
#: class leaves first, rather than in the modem; a forecast 10 % high still leaves it there.
DEFAULT_URGENT_CAP_FRACTION: Final = 0.9
URGENT_CAP_FRACTION_MIN: Final = 0.5
#: Why ``redundant`` is refused (the A1 ERROR's text).
REDUNDANT_REFUSED: Final = (
    "mode redundant is refused: mainline Linux MPTCP has no scheduler that sends a TCP flow's "
    "data on two paths at once (duplication needs the BPF packet scheduler, which is not "
    "upstream, or duplication of UDP at the agents, which they do not do); use priority or "
    "smallest_delay with thresholds, see docs/steering-modes.md")


class SteeringMode(StrEnum):
    """Steering modes, in the spirit of 3GPP ATSSS steering modes."""

    LOAD_BALANCING = "load_balancing"
    FIXED_SPLIT = "fixed_split"
    ACTIVE_STANDBY = "active_standby"
    LATENCY_BOUND = "latency_bound"
    #: An ordered WAT list: the first carries up to its forecast (or until it crosses a
    #: threshold), ``demand_mbps`` beyond that overflows to the next.
    PRIORITY = "priority"
    #: The WAT with the smallest measured RTT; the others only when it is over its threshold.
    SMALLEST_DELAY = "smallest_delay"


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
    #: active_standby, priority: WATs in order of preference; WATs not named are never used.
    priority: tuple[str, ...] = ()
    #: latency_bound: WATs whose RTT exceeds this get 0 unless the others cannot carry demand.
    rtt_bound_ms: float | None = None
    #: latency_bound: demand the slower WATs may be added to carry; priority: the demand the
    #: WATs of the list carry in order (0: the first usable WAT alone).
    demand_mbps: float = 0.0
    #: A WAT whose central capacity forecast is below this gets weight 0 (the conservative
    #: forecast sizes the weights; a wide interval alone does not switch a WAT off).
    capacity_floor_mbps: float = 0.0
    #: New weights only when T(w) improves by more than this, or a WAT's usability changes.
    hysteresis_pct: float = 0.0
    #: How often the control loop recomputes weights for the CPEs under this policy.
    update_period_s: float = 1.0
    #: Thresholds for every WAT (None: none): a WAT whose measured RTT (ms) or retransmitted
    #: share of segments (%) exceeds one is not used unless no usable WAT is within them.
    rtt_max_ms: float | None = None
    loss_max_pct: float | None = None
    #: The same per WAT (over the ones for every WAT).
    wat_rtt_max_ms: Mapping[str, float] = field(default_factory=dict)
    wat_loss_max_pct: Mapping[str, float] = field(default_factory=dict)
    #: A WAT that carries an urgent class is capped at this fraction of its forecast.
    urgent_cap_fraction: float = DEFAULT_URGENT_CAP_FRACTION
    #: Traffic classes, in order (:mod:`xapp.core.rules`).
    rules: tuple[Rule, ...] = ()
    #: Per-direction overrides as given (``{"dl": {...}}``); see :meth:`for_direction`.
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The policy of each overridden direction, built from ``overrides`` when constructed.
    directions: Mapping[str, Policy] = field(default_factory=dict, init=False, compare=False,
                                             repr=False)
    #: The classes of each direction, built from ``rules`` when constructed.
    classes: Mapping[str, tuple[ClassRule, ...]] = field(default_factory=dict, init=False,
                                                         compare=False, repr=False)

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
            base = {k: v for k, v in self.to_dict().items() if k not in ("directions", "rules")}
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
        object.__setattr__(self, "classes", {d: self._classes(d) for d in POLICY_DIRECTIONS}
                           if self.rules else {})
        _check_message_size(self.classes)

    def for_direction(self, direction: str) -> Policy:
        """The policy of one direction: this one with that direction's overrides, if any."""
        return self.directions.get(direction, self)

    def classes_for(self, direction: str) -> tuple[ClassRule, ...]:
        """The traffic classes of one direction, in order (empty: one rule for all traffic)."""
        return self.classes.get(direction, ())

    def rtt_threshold(self, wat: str) -> float | None:
        return self.wat_rtt_max_ms.get(wat, self.rtt_max_ms)

    def loss_threshold(self, wat: str) -> float | None:
        return self.wat_loss_max_pct.get(wat, self.loss_max_pct)

    @property
    def has_thresholds(self) -> bool:
        return (self.rtt_max_ms is not None or self.loss_max_pct is not None
                or bool(self.wat_rtt_max_ms) or bool(self.wat_loss_max_pct))

    def _classes(self, direction: str) -> tuple[ClassRule, ...]:
        """Each rule's steering in ``direction``: the direction's policy, the rule's keys over
        it, the rule's override for the direction over those."""
        own = {k: v for k, v in self.for_direction(direction).to_dict().items()
               if k not in _NOT_RULE_KEYS}
        out = []
        for i, rule in enumerate(self.rules):
            where = f"rules[{i}] ({rule.name})"
            match = rule.match_for(direction)
            keys = {**rule.steering, **rule.direction_steering.get(direction, {})}
            extra = sorted(set(keys) - DIRECTION_KEYS)
            if extra:
                raise PolicyError(f"{where}: keys {extra} cannot be set in a rule; allowed: "
                                  f"{sorted(DIRECTION_KEYS | {'name', 'match', 'urgent'})}")
            try:
                steering = Policy.from_dict({**own, **keys})
            except PolicyError as exc:
                raise PolicyError(f"{where}: {direction}: {exc}") from None
            if match is not None:
                out.append(ClassRule(rule.name, match, rule.urgent_for(direction), steering))
        return tuple(out)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Policy:
        """Build a policy from its JSON form (the A1 payload without ``scope``).

        Raises :class:`PolicyError` on unknown keys or values out of range.
        """
        unknown = set(doc) - POLICY_KEYS
        if unknown:
            raise PolicyError(f"unknown policy keys: {sorted(unknown)}")
        per_wat: Mapping[str, Mapping[str, Any]] = doc.get("wats", {}) or {}
        if not isinstance(per_wat, Mapping):
            raise PolicyError("'wats' must be an object keyed by WAT name")
        _check_wats(per_wat.keys(), "wats")
        tables: dict[str, dict[str, float]] = {k: {} for k in WAT_KEYS}
        for wat, limits in per_wat.items():
            if not isinstance(limits, Mapping):
                raise PolicyError(f"wats.{wat} must be an object")
            extra = set(limits) - WAT_KEYS
            if extra:
                raise PolicyError(f"wats.{wat}: unknown keys {sorted(extra)}")
            for key, value in limits.items():
                tables[key][wat] = _number(value, f"wats.{wat}.{key}")
        if doc.get("mode") == "redundant":
            raise PolicyError(REDUNDANT_REFUSED)
        try:
            mode = SteeringMode(doc.get("mode", SteeringMode.LOAD_BALANCING))
        except ValueError as exc:
            raise PolicyError(f"unknown steering mode {doc.get('mode')!r}") from exc
        try:
            rules = parse_rules(doc.get("rules", []))
        except RuleError as exc:
            raise PolicyError(str(exc)) from None
        return cls(
            mode=mode,
            max_weight=_integer(doc.get("max_weight", 100), "max_weight"),
            min_share=tables["min_share"],
            max_share=tables["max_share"],
            excluded=frozenset(_wat_list(doc.get("excluded_wats", []), "excluded_wats")),
            split_pct=tables["split_pct"],
            priority=tuple(_wat_list(doc.get("priority", []), "priority")),
            rtt_bound_ms=_optional(doc, "rtt_bound_ms"),
            demand_mbps=_number(doc.get("demand_mbps", 0.0), "demand_mbps"),
            capacity_floor_mbps=_number(doc.get("capacity_floor_mbps", 0.0), "capacity_floor_mbps"),
            hysteresis_pct=_number(doc.get("hysteresis_pct", 0.0), "hysteresis_pct"),
            update_period_s=_number(doc.get("update_period_s", 1.0), "update_period_s"),
            rtt_max_ms=_optional(doc, "rtt_max_ms"),
            loss_max_pct=_optional(doc, "loss_max_pct"),
            wat_rtt_max_ms=tables["rtt_max_ms"],
            wat_loss_max_pct=tables["loss_max_pct"],
            urgent_cap_fraction=_number(doc.get("urgent_cap_fraction",
                                                DEFAULT_URGENT_CAP_FRACTION),
                                        "urgent_cap_fraction"),
            rules=rules,
            overrides=_overrides(doc.get("directions", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form accepted by :meth:`from_dict`."""
        wats: dict[str, dict[str, float]] = {}
        for key, table in (("min_share", self.min_share), ("max_share", self.max_share),
                           ("split_pct", self.split_pct), ("rtt_max_ms", self.wat_rtt_max_ms),
                           ("loss_max_pct", self.wat_loss_max_pct)):
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
        for key in ("rtt_bound_ms", "rtt_max_ms", "loss_max_pct"):
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        # Keys of policy type 20101 only when set, so a 20100 policy writes a 20100 document.
        if self.urgent_cap_fraction != DEFAULT_URGENT_CAP_FRACTION:
            doc["urgent_cap_fraction"] = self.urgent_cap_fraction
        if self.rules:
            doc["rules"] = [r.to_dict() for r in self.rules]
        if self.overrides:
            doc["directions"] = {d: dict(o) for d, o in self.overrides.items()}
        return doc


#: Keys of a policy document.
POLICY_KEYS: frozenset[str] = DIRECTION_KEYS | {"update_period_s", "directions",
                                               "urgent_cap_fraction", "rules"}
#: Keys of a policy that a rule does not inherit (they are the CPE's or the policy's).
_NOT_RULE_KEYS: Final = frozenset(POLICY_KEYS - DIRECTION_KEYS)


def _optional(doc: Mapping[str, Any], name: str) -> float | None:
    value = doc.get(name)
    return None if value is None else _number(value, name)


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
    if not isinstance(p.mode, SteeringMode):  # a bare string would decide as load balancing
        raise PolicyError(f"mode must be a SteeringMode, got {p.mode!r}")
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
    for mode in (SteeringMode.ACTIVE_STANDBY, SteeringMode.PRIORITY):
        if p.mode is mode and not p.priority:
            raise PolicyError(f"{mode.value} needs a priority list")
    if len(set(p.priority)) != len(p.priority):
        raise PolicyError("priority lists a WAT twice")
    if p.mode is SteeringMode.LATENCY_BOUND and p.rtt_bound_ms is None:
        raise PolicyError("latency_bound needs rtt_bound_ms")
    if p.rtt_bound_ms is not None and p.rtt_bound_ms <= 0:
        raise PolicyError("rtt_bound_ms must be > 0")
    for name in ("demand_mbps", "capacity_floor_mbps", "hysteresis_pct"):
        if getattr(p, name) < 0:
            raise PolicyError(f"{name} must be >= 0")
    _check_thresholds(p)
    if not URGENT_CAP_FRACTION_MIN <= p.urgent_cap_fraction <= 1.0:
        raise PolicyError(f"urgent_cap_fraction must be in [{URGENT_CAP_FRACTION_MIN}, 1], got "
                          f"{p.urgent_cap_fraction}")
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
    for mode in (SteeringMode.ACTIVE_STANDBY, SteeringMode.PRIORITY):
        if p.mode is mode and not any(w in allowed for w in p.priority):
            raise PolicyError(f"{mode.value}: every WAT of the priority list is in "
                              "excluded_wats")


def _check_message_size(classes: Mapping[str, tuple[ClassRule, ...]]) -> None:
    """Refuse rules whose classes could not go in one weights message (the channel's bound)."""
    size = MESSAGE_BASE_BYTES + sum(class_bytes_max(c.name, c.match, c.policy.mode.value)
                                    for rules in classes.values() for c in rules)
    if size > MESSAGE_BYTES_MAX:
        raise PolicyError(f"rules: the classes of both directions could take {size} bytes of a "
                          f"weights message, more than the {MESSAGE_BYTES_MAX} the channel "
                          "carries; use fewer rules, or fewer prefixes or ports in their matches")


def _check_thresholds(p: Policy) -> None:
    for where, table in (("rtt_max_ms", p.wat_rtt_max_ms), ("loss_max_pct", p.wat_loss_max_pct)):
        _check_wats(table, where)
    rtt = [("rtt_max_ms", p.rtt_max_ms)] + [(f"wats.{w}.rtt_max_ms", v)
                                            for w, v in p.wat_rtt_max_ms.items()]
    for name, value in rtt:
        if value is not None and value <= 0:
            raise PolicyError(f"{name} must be > 0, got {value}")
    loss = [("loss_max_pct", p.loss_max_pct)] + [(f"wats.{w}.loss_max_pct", v)
                                                 for w, v in p.wat_loss_max_pct.items()]
    for name, value in loss:
        if value is not None and not 0 <= value <= 100:
            raise PolicyError(f"{name} must be in [0, 100], got {value}")
