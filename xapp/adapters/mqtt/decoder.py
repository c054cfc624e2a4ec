"""The receive boundary: a received message parsed, bounded and validated, or dropped.

What does not validate is dropped, and the reason is counted (:class:`DropCounter`) and
logged, so a misbehaving agent shows up in metrics and logs instead of in the model's training
data.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any, Final

from xapp.adapters.mqtt.drops import DropCounter
from xapp.adapters.mqtt.payloads import Kind, first_error
from xapp.adapters.mqtt.topics import ChannelTopic, parse_channel_topic
from xapp.bounded_json import BoundedJsonError, JsonLimits, loads

#: What a received document may hold before it is parsed (:mod:`xapp.bounded_json`).
#: Sizes cover the largest valid message of each kind, with room to spare:
#:
#: * state: a ``last_error`` of 1024 characters, each escaped as a surrogate pair
#:   (``\ud83d\ude00``, 12 bytes), plus every other field at its longest: about 12.8 KiB;
#:   the limit is the broker's ``max_packet_size`` (16 KiB), so no valid state is refused
#:   however it is escaped.
#: * telemetry: four WATs of eight numeric fields: about 1.5 KiB (the Go agent's golden
#:   sample is 0.6 KiB); 8 KiB leaves room for indentation. It is not larger than state:
#:   the schema has no free text and no per-subflow list.
#: * weights: with traffic classes up to what the broker carries (16 KiB); without, two
#:   ``reason`` of 256 characters escaped as above: about 6.5 KiB.
#: * telemetry v2: four WATs of three fields and two directions of six: about 2.5 KiB.
#: * proxy-state: a ``last_error`` as state's: the same limit.
#:
#: Depth: the schemas nest three levels (telemetry -> wats -> wat); 8 leaves room for a
#: schema that grows a level without letting a nesting attack near the parser or validator.
#: Integers: ``bytes_acked`` is a uint64 on the agent, 20 digits at most.
RECEIVE_LIMITS: Final[dict[Kind, JsonLimits]] = {
    "state": JsonLimits(max_bytes=16 * 1024, max_depth=8, max_int_digits=20),
    "telemetry": JsonLimits(max_bytes=8 * 1024, max_depth=8, max_int_digits=20),
    "weights": JsonLimits(max_bytes=16 * 1024, max_depth=8, max_int_digits=20),
    "proxy-state": JsonLimits(max_bytes=16 * 1024, max_depth=8, max_int_digits=20),
}


def decode(topic_name: str, payload: bytes, drops: DropCounter,
           topic: ChannelTopic | None = None) -> tuple[Kind, dict[str, Any]] | None:
    """Parse and validate a received message; None (counted, logged) when it must be dropped.
    ``topic`` is ``parse_channel_topic(topic_name)`` when the caller has parsed it already.

    Never raises: any agent can publish any bytes on its own topics with its own certificate,
    and this runs on the thread that receives every agent's messages.

    Reasons: ``bad-topic``, ``too-large`` (over :data:`RECEIVE_LIMITS`), ``bad-json`` (not
    UTF-8, not JSON, nested too deep, a number out of range, ``NaN``/``Infinity``, a lone
    surrogate escape), ``schema``, ``cpe-id-mismatch`` (the topic's cpe_id differs from the
    payload's: an agent may only speak for its CPE), ``proxy-id-mismatch`` (the same for the
    proxy id: a proxy may only speak for itself), ``role-mismatch`` (a state of role proxy on a
    CPE topic, or of role cpe on a proxy topic), ``bad-address`` (a WAT address no CPE can own:
    :func:`wat_address_problem`), ``internal`` (a bug here: counted, not
    raised).  The kind of a proxy's own state is ``proxy-state``; a proxy's per-CPE state and
    telemetry are ``state`` and ``telemetry`` with the ``proxy_id`` in the document.
    """
    kind: str = "unknown"
    try:
        parsed = parse_channel_topic(topic_name) if topic is None else topic
        if parsed is None:
            drops.drop(kind, "bad-topic", "not a channel topic", topic_name)
            return None
        kind = parsed.kind
        return _decode(parsed, topic_name, payload, drops)
    except Exception as exc:
        drops.drop(kind, "internal", f"{type(exc).__name__}: {exc}", topic_name, exc_info=exc)
        return None


def _decode(t: ChannelTopic, topic_name: str, payload: bytes, drops: DropCounter
            ) -> tuple[Kind, dict[str, Any]] | None:
    kind = t.kind
    limits = RECEIVE_LIMITS[kind]
    if len(payload) > limits.max_bytes:
        drops.drop(kind, "too-large", f"{len(payload)} bytes, at most {limits.max_bytes}",
                   topic_name)
        return None
    try:
        doc = loads(payload, limits)
        # "\ud800" is valid JSON but no Unicode string: it would fail later, when a string of
        # the document is encoded for Redis or InfluxDB, far from here. Only escapes make one.
        if b"\\u" in payload:
            json.dumps(doc, ensure_ascii=False).encode()
    except (BoundedJsonError, UnicodeEncodeError) as exc:
        drops.drop(kind, "bad-json", str(exc), topic_name)
        return None
    problem = first_error(kind, doc)
    if problem is not None:
        drops.drop(kind, "schema", problem, topic_name)
        return None
    if t.cpe_id is not None and doc["cpe_id"] != t.cpe_id:
        drops.drop(kind, "cpe-id-mismatch", f"payload cpe_id {doc['cpe_id']!r}", topic_name)
        return None
    if t.proxy_id is not None and doc.get("proxy_id") != t.proxy_id:
        drops.drop(kind, "proxy-id-mismatch", f"payload proxy_id {doc.get('proxy_id')!r}",
                   topic_name)
        return None
    if t.proxy_id is None and "proxy_id" in doc:
        drops.drop(kind, "proxy-id-mismatch", "a proxy_id on a CPE topic", topic_name)
        return None
    if kind == "state" and doc.get("role", "proxy" if t.proxy_id else "cpe") != (
            "proxy" if t.proxy_id else "cpe"):
        drops.drop(kind, "role-mismatch", f"role {doc.get('role')!r}", topic_name)
        return None
    if kind == "state":
        for wat, text in doc.get("addresses", {}).items():
            problem = wat_address_problem(text)
            if problem is not None:
                drops.drop(kind, "bad-address", f"{wat}: {problem}", topic_name)
                return None
    return kind, doc


def wat_address_problem(text: str) -> str | None:
    """Why ``text`` cannot be one CPE's own WAT address (None: it can), as the proxy agent
    decides it (kernel-agent ``payload.CheckWATAddr``): a proxy writes a rule matching the
    address, so a form matching other hosts' traffic (unspecified = the WRR kernel's wildcard,
    multicast, broadcast), the proxy itself (loopback) or a second spelling of an IPv4 address
    (IPv4-mapped IPv6) would let a CPE steer traffic that is not its own."""
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return f"{text!r} is not an IP address"
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return f"{text} is IPv4-mapped"
    if addr.is_unspecified or addr.is_loopback or addr.is_multicast:
        return f"{text} is unspecified, loopback or multicast"
    if addr == ipaddress.IPv4Address("255.255.255.255"):
        return f"{text} is the broadcast address"
    return None
