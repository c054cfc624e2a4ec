"""The rules of a steering policy (A1 policy type 20101): ordered traffic classes, each with a
traffic descriptor and its own steering.

A rule is ``{"name", "match", "urgent", <steering keys>, "directions"}``.  Its steering keys are
those a policy's per-direction override may set (mode, limits, thresholds), laid over the policy
as that direction has it, key by key; its ``directions`` may override them per direction, and
also ``match`` and ``urgent``.  What is left of the policy's own keys is the *default rule*:
traffic no rule matches.  A packet takes the first rule whose match it meets.

A match with a ``cgroup`` identifies an application on the CPE, which only the CPE agent sees:
such a rule is an uplink rule, unless its ``directions.dl`` gives a match of its own (without
a cgroup).  A ``cgroup`` in a ``dl`` override is refused.

This module parses the structure (names, matches, urgency, which keys go where); the steering of
each direction is built and checked by :class:`~xapp.core.policy.Policy`, which owns the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xapp.core.traffic import RULE_NAME_RE, MatchError, TrafficMatch

if TYPE_CHECKING:
    from xapp.core.policy import Policy

#: At most this many rules per policy: the wire's ``classes`` hold at most 8 per direction.
MAX_RULES: Final = 8
#: The directions a rule may override (as a policy's: ``dl`` proxy to CPE, ``ul`` CPE to proxy).
RULE_DIRECTIONS: Final = ("dl", "ul")
#: Keys of a rule that are not steering.
_OWN_KEYS: Final = frozenset({"name", "match", "urgent", "directions"})
#: Keys of a rule's per-direction override that are not steering.
_DIRECTION_OWN_KEYS: Final = frozenset({"match", "urgent"})


class RuleError(ValueError):
    """A rule that cannot be applied; the message names the rule and why."""


@dataclass(frozen=True)
class Rule:
    """One rule as given (A1 form), checked for its structure."""

    name: str
    match: TrafficMatch
    urgent: bool = False
    #: The rule's steering keys (A1 form), laid over the policy's.
    steering: Mapping[str, Any] = field(default_factory=dict)
    #: Per direction: its steering keys (A1 form).
    direction_steering: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Per direction: a match of its own.
    direction_match: Mapping[str, TrafficMatch] = field(default_factory=dict)
    #: Per direction: an urgency of its own.
    direction_urgent: Mapping[str, bool] = field(default_factory=dict)

    def match_for(self, direction: str) -> TrafficMatch | None:
        """The match in ``direction``; None when the rule does not apply there (a cgroup match
        on the downlink, which the proxy cannot see)."""
        match = self.direction_match.get(direction, self.match)
        if direction == "dl" and match.cgroup is not None:
            return None
        return match

    def urgent_for(self, direction: str) -> bool:
        return self.direction_urgent.get(direction, self.urgent)

    def to_dict(self) -> dict[str, Any]:
        """The A1 form (what :func:`parse_rules` takes)."""
        doc: dict[str, Any] = {"name": self.name, "match": self.match.to_dict(),
                               **self.steering}
        if self.urgent:
            doc["urgent"] = True
        directions: dict[str, dict[str, Any]] = {}
        # Every direction given has its steering entry (empty when it overrides none).
        for d, keys in self.direction_steering.items():
            own: dict[str, Any] = dict(keys)
            if d in self.direction_match:
                own["match"] = self.direction_match[d].to_dict()
            if d in self.direction_urgent:
                own["urgent"] = self.direction_urgent[d]
            directions[d] = own
        if directions:
            doc["directions"] = directions
        return doc


@dataclass(frozen=True)
class ClassRule:
    """A rule as one direction applies it: the class the loop decides weights for."""

    name: str
    match: TrafficMatch
    urgent: bool
    #: The class's steering in that direction (mode, limits, thresholds).
    policy: Policy


def parse_rules(value: Any) -> tuple[Rule, ...]:
    """The ``rules`` list of a policy; raises :class:`RuleError`."""
    if not isinstance(value, list | tuple):
        raise RuleError("'rules' must be a list of rules")
    if len(value) > MAX_RULES:
        raise RuleError(f"rules: at most {MAX_RULES} rules, got {len(value)} (an agent "
                        f"applies at most {MAX_RULES} traffic classes per direction)")
    out: list[Rule] = []
    seen: set[str] = set()
    for i, doc in enumerate(value):
        rule = _rule(doc, i)
        if rule.name in seen:
            raise RuleError(f"rules[{i}]: the name {rule.name!r} is used twice; names must be "
                            "unique (the agents report per class by name)")
        seen.add(rule.name)
        out.append(rule)
    return tuple(out)


def _rule(doc: Any, i: int) -> Rule:
    if not isinstance(doc, Mapping):
        raise RuleError(f"rules[{i}] must be an object")
    name = doc.get("name")
    if not isinstance(name, str) or RULE_NAME_RE.fullmatch(name) is None:
        raise RuleError(f"rules[{i}]: name {name!r} must be 1-32 of a-z 0-9 _ - (starting with "
                        "a letter or digit)")
    where = f"rules[{i}] ({name})"
    if "match" not in doc:
        raise RuleError(f"{where}: a rule needs a match")
    try:
        match = TrafficMatch.from_dict(doc["match"])
    except MatchError as exc:
        raise RuleError(f"{where}: {exc}") from None
    urgent = _bool(doc.get("urgent", False), f"{where}: urgent")
    directions = doc.get("directions", {})
    if not isinstance(directions, Mapping):
        raise RuleError(f"{where}: 'directions' must be an object keyed by direction (dl, ul)")
    unknown = sorted(set(directions) - set(RULE_DIRECTIONS))
    if unknown:
        raise RuleError(f"{where}: directions: unknown direction {unknown}; known: "
                        f"{list(RULE_DIRECTIONS)}")
    steering: dict[str, dict[str, Any]] = {}
    matches: dict[str, TrafficMatch] = {}
    urgency: dict[str, bool] = {}
    for d, override in directions.items():
        if not isinstance(override, Mapping):
            raise RuleError(f"{where}: directions.{d} must be an object")
        if "match" in override:
            try:
                matches[d] = TrafficMatch.from_dict(override["match"])
            except MatchError as exc:
                raise RuleError(f"{where}: directions.{d}: {exc}") from None
            if d == "dl" and matches[d].cgroup is not None:
                raise RuleError(f"{where}: directions.dl: match.cgroup cannot apply to the "
                                "downlink (the proxy does not see the CPE's cgroups)")
        if "urgent" in override:
            urgency[d] = _bool(override["urgent"], f"{where}: directions.{d}.urgent")
        steering[d] = {k: v for k, v in override.items() if k not in _DIRECTION_OWN_KEYS}
    return Rule(name, match, urgent, {k: v for k, v in doc.items() if k not in _OWN_KEYS},
                steering, matches, urgency)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise RuleError(f"{where} must be true or false, got {value!r}")
    return value
