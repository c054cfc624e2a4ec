"""Traffic descriptors (what a rule of an A1 policy matches) and the traffic classes a weights
message carries.

A :class:`TrafficMatch` is TS 23.501 5.32.8's traffic descriptor cut to what a mainline device
matches at egress: DSCP, IP protocol, the application server's ports and prefixes, and on the
CPE the cgroup of the application.  Its A1 form (:meth:`TrafficMatch.from_dict`) names the
server's end ``destination_ports``/``destination_prefixes`` as ATSSS does (the destination of an
uplink packet); its wire form (:meth:`TrafficMatch.wire`, ``schemas/mqtt-weights.schema.json``
``$defs/match``) calls it ``remote_*``, because on the downlink the proxy agent finds it in the
packet's source.  A packet matches when it meets every key given; a list matches when any item
does.

A :class:`ClassSet` is one class of one direction as the xApp sends it: the rule's name, its
match, the mode and the weights and caps the loop decided for it (:mod:`xapp.core.classes`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: IP protocol names the A1 form accepts for ``protocols`` (numbers are accepted as they are).
PROTOCOL_NUMBERS: Final = {"icmp": 1, "tcp": 6, "udp": 17, "sctp": 132}
#: The wire's bounds (``$defs/match``): items per list.
MAX_DSCP: Final = 64
MAX_PROTOCOLS: Final = 8
MAX_PORT_RANGES: Final = 16
MAX_PREFIXES: Final = 16
#: A rule's name: the wire's class name (``$defs/class``), unique within a policy.
RULE_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
#: A cgroup v2 path from the hierarchy's root (the wire's pattern).
CGROUP_RE: Final = re.compile(r"/[A-Za-z0-9._@:/-]{0,255}")
#: The keys of the A1 form.
MATCH_KEYS: Final = frozenset({"dscp", "protocols", "destination_ports", "destination_prefixes",
                               "cgroup"})

#: The largest weights message the channel carries: the broker's ``max_packet_size`` (16 KiB,
#: ``broker/mosquitto.conf``; the agents' payload bound too) less room for the PUBLISH packet's
#: own header, topic and properties (under 100 bytes).  A larger one would cost the publisher
#: its connection, every CPE's weights with it.
MESSAGE_BYTES_MAX: Final = 16 * 1024 - 256
#: At most what a message holds beside its classes: the cpe_id, version, times and schema, and
#: per direction its mode, a reason of 256 characters, weights and caps of four WATs.
MESSAGE_BASE_BYTES: Final = 1200
#: At most what a class holds beside its match, mode and name: a reason of 256 characters,
#: weights and caps of four WATs, the urgent flag and the keys.
CLASS_EXTRA_BYTES: Final = 480


class MatchError(ValueError):
    """A traffic descriptor that cannot be matched; the message names the key and why."""


@dataclass(frozen=True)
class TrafficMatch:
    """A traffic descriptor; every field empty (None for ``cgroup``) is "any"."""

    dscp: tuple[int, ...] = ()
    protocols: tuple[int, ...] = ()
    #: Inclusive ranges (first, last) of the application server's port.
    ports: tuple[tuple[int, int], ...] = ()
    #: The application server's prefixes, in canonical CIDR form.
    prefixes: tuple[str, ...] = ()
    #: Uplink only: the cgroup v2 path of the application on the CPE.
    cgroup: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.dscp or self.protocols or self.ports or self.prefixes
                    or self.cgroup is not None)

    @classmethod
    def from_dict(cls, doc: Any) -> TrafficMatch:
        """The A1 form; raises :class:`MatchError` (an empty match among the reasons: a rule
        that matches everything is the policy's own steering)."""
        if not isinstance(doc, Mapping):
            raise MatchError("match must be an object")
        unknown = sorted(set(doc) - MATCH_KEYS)
        if unknown:
            raise MatchError(f"match: unknown keys {unknown}; known: {sorted(MATCH_KEYS)}")
        out = cls(
            dscp=_ints(doc.get("dscp", []), "dscp", 0, 63, MAX_DSCP),
            protocols=_protocols(doc.get("protocols", [])),
            ports=_ports(doc.get("destination_ports", [])),
            prefixes=_prefixes(doc.get("destination_prefixes", [])),
            cgroup=_cgroup(doc.get("cgroup")))
        if out.empty:
            raise MatchError("match is empty: a rule must match some traffic (traffic no rule "
                             "matches takes the policy's own steering)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The A1 form (protocols as numbers, ports as ranges)."""
        doc: dict[str, Any] = {}
        if self.dscp:
            doc["dscp"] = list(self.dscp)
        if self.protocols:
            doc["protocols"] = list(self.protocols)
        if self.ports:
            doc["destination_ports"] = [list(r) for r in self.ports]
        if self.prefixes:
            doc["destination_prefixes"] = list(self.prefixes)
        if self.cgroup is not None:
            doc["cgroup"] = self.cgroup
        return doc

    def wire(self) -> dict[str, Any]:
        """The ``mcw.weights.v2`` form (``$defs/match``)."""
        doc: dict[str, Any] = {}
        if self.cgroup is not None:
            doc["cgroup"] = self.cgroup
        if self.dscp:
            doc["dscp"] = list(self.dscp)
        if self.protocols:
            doc["protocols"] = list(self.protocols)
        if self.prefixes:
            doc["remote_prefixes"] = list(self.prefixes)
        if self.ports:
            doc["remote_ports"] = [list(r) for r in self.ports]
        return doc


def class_bytes_max(name: str, match: TrafficMatch, mode: str) -> int:
    """At most how many bytes a class of this name, match and mode takes in a message."""
    return (len(json.dumps(match.wire(), separators=(",", ":"))) + len(name) + len(mode)
            + CLASS_EXTRA_BYTES)


@dataclass(frozen=True)
class ClassSet:
    """One traffic class of one direction of a CPE, as sent (``$defs/class``)."""

    name: str
    match: TrafficMatch
    mode: str
    #: Weight per WAT the direction's set names; 0: the class does not use the WAT.
    weights: Mapping[str, int]
    reason: str = ""
    #: Ceiling per WAT in Mbit/s (rate-caps appliers only; empty: none sent).
    caps_mbps: Mapping[str, float] = field(default_factory=dict)
    urgent: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The wire form (also what the state store keeps)."""
        doc: dict[str, Any] = {"name": self.name, "match": self.match.wire(), "mode": self.mode,
                               "reason": self.reason[:256], "weights": dict(self.weights)}
        if self.caps_mbps:
            doc["caps_mbps"] = dict(self.caps_mbps)
        if self.urgent:
            doc["urgent"] = True
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ClassSet:
        """What :meth:`to_dict` wrote (a stored record)."""
        m = doc.get("match", {})
        match = TrafficMatch(
            dscp=tuple(int(v) for v in m.get("dscp", [])),
            protocols=tuple(int(v) for v in m.get("protocols", [])),
            ports=tuple((int(a), int(b)) for a, b in m.get("remote_ports", [])),
            prefixes=tuple(str(p) for p in m.get("remote_prefixes", [])),
            cgroup=None if m.get("cgroup") is None else str(m["cgroup"]))
        return cls(str(doc["name"]), match, str(doc.get("mode", "")),
                   {str(k): int(v) for k, v in doc.get("weights", {}).items()},
                   str(doc.get("reason", "")),
                   {str(k): float(v) for k, v in doc.get("caps_mbps", {}).items()},
                   bool(doc.get("urgent", False)))


def _list(value: Any, name: str, most: int) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise MatchError(f"match.{name} must be a list")
    if len(value) > most:
        raise MatchError(f"match.{name}: at most {most} items, got {len(value)}")
    return list(value)


def _int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise MatchError(f"match.{name}: {value!r} is not an integer in {lo}..{hi}")
    return value


def _unique(values: list[Any], name: str) -> None:
    if len(set(values)) != len(values):
        raise MatchError(f"match.{name} lists an item twice")


def _ints(value: Any, name: str, lo: int, hi: int, most: int) -> tuple[int, ...]:
    out = [_int(v, name, lo, hi) for v in _list(value, name, most)]
    _unique(out, name)
    return tuple(out)


def _protocols(value: Any) -> tuple[int, ...]:
    out = []
    for v in _list(value, "protocols", MAX_PROTOCOLS):
        if isinstance(v, str):
            if v not in PROTOCOL_NUMBERS:
                raise MatchError(f"match.protocols: unknown protocol {v!r}; names: "
                                 f"{sorted(PROTOCOL_NUMBERS)}, or a number 0..255")
            out.append(PROTOCOL_NUMBERS[v])
        else:
            out.append(_int(v, "protocols", 0, 255))
    _unique(out, "protocols")
    return tuple(out)


def _ports(value: Any) -> tuple[tuple[int, int], ...]:
    out = []
    for v in _list(value, "destination_ports", MAX_PORT_RANGES):
        if isinstance(v, list | tuple):
            if len(v) != 2:
                raise MatchError(f"match.destination_ports: a range is [first, last], got {v!r}")
            lo = _int(v[0], "destination_ports", 1, 65535)
            hi = _int(v[1], "destination_ports", 1, 65535)
            if lo > hi:
                raise MatchError(f"match.destination_ports: range [{lo}, {hi}] runs backwards "
                                 "(first > last)")
            out.append((lo, hi))
        else:
            port = _int(v, "destination_ports", 1, 65535)
            out.append((port, port))
    return tuple(out)


def _prefixes(value: Any) -> tuple[str, ...]:
    out = []
    for v in _list(value, "destination_prefixes", MAX_PREFIXES):
        if not isinstance(v, str) or len(v) > 43:
            raise MatchError(f"match.destination_prefixes: {v!r} is not a CIDR prefix")
        try:
            net = ipaddress.ip_network(v, strict=True)
        except ValueError as exc:
            raise MatchError(f"match.destination_prefixes: {v!r} is not a CIDR prefix "
                             f"({exc})") from None
        out.append(str(net))
    _unique(out, "destination_prefixes")
    return tuple(out)


def _cgroup(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or CGROUP_RE.fullmatch(value) is None:
        raise MatchError(f"match.cgroup: {value!r} is not a cgroup v2 path (/ and up to 255 of "
                         "A-Z a-z 0-9 . _ @ : / -)")
    return value
