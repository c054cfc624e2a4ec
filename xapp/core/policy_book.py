"""A1 policy instances and the rule that combines them into one policy per CPE.

Pure: no RMR, no SDL, no clock.  The A1 adapter (:mod:`xapp.adapters.a1`) parses and
answers A1 messages and puts the accepted instances here; the control loop reads a
:class:`PolicyResolver` snapshot each tick.

How instances combine (the rule the operator relies on)
-------------------------------------------------------
Each instance has a scope: ``{"cpes": [...]}`` names CPEs, an absent scope or an empty list means
every CPE.  For a CPE the effective policy comes from exactly one instance, chosen as follows:

1. instances whose scope lists the CPE win over all-CPE instances;
2. among instances of the same kind, the most recently *created* one wins (an UPDATE changes an
   instance's content, not its rank); ties on the creation time go to the larger instance id;
3. with no instance, the configured ``controls.default_policy`` applies.

Instances never merge field by field with each other; keys an instance leaves out take the value
of ``controls.default_policy`` (then the :class:`~xapp.core.policy.Policy` defaults).  That keeps a
CPE's behaviour explainable by naming one instance.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xapp.core.policy import Policy, PolicyError

log = logging.getLogger(__name__)

#: Where a CPE's policy comes from when no instance covers it.
DEFAULT_SOURCE = "default"


@dataclass(frozen=True)
class PolicyInstance:
    """One A1 policy instance as stored (SDL) and combined."""

    instance_id: str
    #: The payload without ``scope``.
    payload: Mapping[str, Any]
    #: Empty: every CPE.
    cpes: frozenset[str]
    created_s: float
    #: The A1 policy type it was created under (records from before 20101 are 20100's).
    policy_type_id: int = 20100

    @property
    def all_cpes(self) -> bool:
        return not self.cpes

    def rank(self) -> tuple[float, str]:
        return (self.created_s, self.instance_id)

    def to_dict(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "payload": dict(self.payload),
                "cpes": sorted(self.cpes), "created_s": self.created_s,
                "policy_type_id": self.policy_type_id}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PolicyInstance:
        return cls(str(doc["instance_id"]), dict(doc["payload"]),
                   frozenset(str(c) for c in doc.get("cpes", [])), float(doc["created_s"]),
                   int(doc.get("policy_type_id", 20100)))


def build_policy(payload: Mapping[str, Any], default_policy: Mapping[str, Any]) -> Policy:
    """The Policy an instance stands for: its keys over the configured defaults."""
    return Policy.from_dict({**default_policy, **payload})


@dataclass(frozen=True)
class PolicyResolver:
    """An immutable view of the effective policies, safe to use from the loop thread."""

    version: int
    default: Policy
    #: cpe -> (policy, instance id) for CPEs named by some instance.
    listed: Mapping[str, tuple[Policy, str]] = field(default_factory=dict)
    #: The winning all-CPE instance, if any.
    everyone: tuple[Policy, str] | None = None

    def for_cpe(self, cpe_id: str) -> tuple[Policy, str]:
        """The effective policy of a CPE and where it comes from (instance id or "default")."""
        hit = self.listed.get(cpe_id)
        if hit is not None:
            return hit
        if self.everyone is not None:
            return self.everyone
        return self.default, DEFAULT_SOURCE


class PolicyBook:
    """The set of A1 instances in force, plus the default policy; safe for concurrent use."""

    def __init__(self, default_policy: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._default_doc: dict[str, Any] = dict(default_policy or {})
        self._default = build_policy({}, self._default_doc)
        self._instances: dict[str, PolicyInstance] = {}
        self._built: dict[str, Policy] = {}
        self._version = 0
        self._resolver = PolicyResolver(0, self._default)

    def set_default(self, default_policy: Mapping[str, Any]) -> None:
        """Replace the configured defaults; raises :class:`PolicyError` and changes nothing if
        they are invalid.  Instances are rebuilt over the new defaults; one that no longer builds
        keeps its previous policy (logged)."""
        doc = dict(default_policy)
        default = build_policy({}, doc)
        with self._lock:
            if doc == self._default_doc:
                return
            self._default_doc, self._default = doc, default
            for iid, inst in self._instances.items():
                try:
                    self._built[iid] = build_policy(inst.payload, doc)
                except PolicyError as exc:
                    log.error("A1 instance %s does not build over the new defaults (%s); "
                              "it keeps its previous policy", iid, exc)
            self._rebuild()

    def check(self, payload: Mapping[str, Any]) -> Policy:
        """Build the policy a payload (without scope) stands for, or raise PolicyError."""
        with self._lock:
            doc = self._default_doc
        return build_policy(payload, doc)

    def put(self, instance: PolicyInstance, policy: Policy | None = None) -> None:
        """Add or replace an instance; ``policy`` is its built form (built here when None)."""
        built = policy if policy is not None else self.check(instance.payload)
        with self._lock:
            self._instances[instance.instance_id] = instance
            self._built[instance.instance_id] = built
            self._rebuild()

    def remove(self, instance_id: str) -> bool:
        with self._lock:
            gone = self._instances.pop(instance_id, None)
            self._built.pop(instance_id, None)
            if gone is not None:
                self._rebuild()
            return gone is not None

    def get(self, instance_id: str) -> PolicyInstance | None:
        with self._lock:
            return self._instances.get(instance_id)

    def instances(self) -> list[PolicyInstance]:
        with self._lock:
            return sorted(self._instances.values(), key=PolicyInstance.rank)

    def resolver(self) -> PolicyResolver:
        with self._lock:
            return self._resolver

    def _rebuild(self) -> None:
        # Ascending rank, so later (higher-ranked) instances overwrite earlier ones.
        ordered = sorted(self._instances.values(), key=PolicyInstance.rank)
        listed: dict[str, tuple[Policy, str]] = {}
        everyone: tuple[Policy, str] | None = None
        for inst in ordered:
            entry = (self._built[inst.instance_id], inst.instance_id)
            if inst.all_cpes:
                everyone = entry
            else:
                for cpe in inst.cpes:
                    listed[cpe] = entry
        self._version += 1
        self._resolver = PolicyResolver(self._version, self._default, listed, everyone)
