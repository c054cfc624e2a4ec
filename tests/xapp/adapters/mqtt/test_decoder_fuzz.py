"""Property-based tests of :func:`xapp.adapters.mqtt.decoder.decode`, the receive boundary.

Three properties, over the kinds the xApp receives (on the CPE and the proxy topics):

* every document valid under the schema, inside the parser's documented number range
  (integers of at most 20 digits, floats below 1e100 in magnitude), is
  accepted and becomes a :class:`CpeState` / :class:`KpiFrame` without raising;
* any bytes either decode or are dropped, counted once, with a known reason (never
  ``internal``, never an exception);
* so does a valid message with hostile fragments spliced in, flipped bytes or a cut.

Example counts are fixed (``max_examples``) so the file runs in a few seconds.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from tests.xapp.adapters.mqtt.test_payloads import (
    PROXY_CPE_STATE,
    PROXY_STATE,
    PROXY_TELEMETRY,
    STATE,
    TELEMETRY,
)
from tests.xapp.adapters.mqtt.test_subscriber import AGENT_TELEMETRY
from xapp.adapters.mqtt import CpeState, DropCounter, ProxyState, decode
from xapp.adapters.mqtt.decoder import RECEIVE_LIMITS, wat_address_problem
from xapp.adapters.mqtt.payloads import Kind, load_schema
from xapp.adapters.mqtt.telemetry import telemetry_frame
from xapp.adapters.mqtt.topics import CPE_ID_RE

RECEIVED: tuple[Kind, ...] = ("state", "telemetry", "proxy-state")
#: Reasons decode() may give for bytes on a channel topic; "internal" would be a bug.
EXPECTED_REASONS = {"too-large", "bad-json", "schema", "cpe-id-mismatch", "proxy-id-mismatch",
                    "role-mismatch", "bad-address"}

SCHEMA_VALID_EXAMPLES = 100
BYTES_EXAMPLES = 500
MUTATION_EXAMPLES = 1000


@pytest.fixture(autouse=True, scope="module")
def _quiet_drops() -> Iterator[None]:
    # Every example drops into a fresh counter, whose first line is always logged.
    logger = logging.getLogger("xapp.adapters.mqtt.drops")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def generated_schema(kind: Kind) -> dict[str, Any]:
    """The kind's schema, with ``last_error`` at most 64 characters long: generating 1024
    costs most of the run and overruns hypothesis' buffer; the longest state is checked by
    :func:`test_the_longest_state_fits_however_it_is_escaped` instead."""
    schema = inline_refs(copy.deepcopy(load_schema(kind)))
    if kind in ("state", "proxy-state"):
        schema["properties"]["last_error"]["maxLength"] = 64
    return schema


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with its local ``#/$defs/...`` references replaced by what they name
    (hypothesis-jsonschema resolves no reference in a schema that has an ``$id``)."""
    defs = schema.pop("$defs", {})
    schema.pop("$id", None)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = walk(copy.deepcopy(defs[ref[len("#/$defs/"):]]))
                rest = {k: walk(v) for k, v in node.items() if k not in ("$ref", "description")}
                return {**target, **rest} if rest else target
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, Any] = walk(schema)
    return out


# from_schema's strategies are typed as any JSON value; these schemas' roots are objects.
def documents(kind: Kind) -> st.SearchStrategy[Any]:
    # deferred: the schema is read when a test runs, not when the module is imported.
    return st.deferred(lambda: from_schema(generated_schema(kind)))


DOCS: dict[Kind, st.SearchStrategy[Any]] = {kind: documents(kind) for kind in RECEIVED}



def fuzz(max_examples: int) -> settings:
    return settings(max_examples=max_examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def outside_number_range(doc: object) -> bool:
    """Whether ``json.dumps(doc)`` holds a number the bounded parser refuses by design."""
    if isinstance(doc, dict):
        return any(outside_number_range(v) for v in doc.values())
    if isinstance(doc, list):
        return any(outside_number_range(v) for v in doc)
    if isinstance(doc, bool):
        return False
    if isinstance(doc, int):
        return len(str(abs(doc))) > RECEIVE_LIMITS["state"].max_int_digits
    if isinstance(doc, float):
        # repr() (what json.dumps writes) has a three-digit positive exponent from 1e100 on;
        # tiny ones (1e-300) are accepted: they parse as what they are, or 0.0.
        return abs(doc) >= 1e100
    return False


def check_converts(kind: Kind, doc: dict[str, Any]) -> None:
    """What the subscriber makes of an accepted document, checked for sane values."""
    if kind == "state":
        state = CpeState.from_doc(doc, None, 0.0)
        assert state.cpe_id == doc["cpe_id"]
        assert isinstance(state.applied_version, int)
        assert state.time_ms is None or isinstance(state.time_ms, int)
        state.last_error.encode()  # a real Unicode string: Redis and InfluxDB can take it
    elif kind == "proxy-state":
        proxy = ProxyState.from_doc(doc, None, 0.0)
        assert proxy.proxy_id == doc["proxy_id"] and isinstance(proxy.cpes, int)
        proxy.last_error.encode()
    else:
        frame = telemetry_frame([doc])
        rows = sum(max(1, sum(d in w for d in ("dl", "ul"))) for w in doc["wats"].values())
        assert len(frame) == rows and math.isfinite(frame.time_s)
        for column in frame.values.values():
            assert not np.isinf(column).any()


def decode_counted(topic_name: str, payload: bytes) -> tuple[DropCounter, Any]:
    drops = DropCounter()
    out = decode(topic_name, payload, drops)
    assert drops.total() == (0 if out is not None else 1)
    if out is None:
        ((_kind, reason),) = drops.counts
        assert reason in EXPECTED_REASONS, drops.snapshot()
    return drops, out


def topic_of(kind: Kind, doc: dict[str, Any]) -> str:
    """Where the document's author publishes it: a proxy's topics when it names a proxy."""
    if kind == "proxy-state":
        return f"mcw/v1/proxy/{doc['proxy_id']}/state"
    if "proxy_id" in doc:
        return f"mcw/v1/proxy/{doc['proxy_id']}/cpe/{doc['cpe_id']}/{kind}"
    return f"mcw/v1/cpe/{doc['cpe_id']}/{kind}"


@st.composite
def schema_valid(draw: st.DrawFn) -> tuple[Kind, dict[str, Any]]:
    kind = draw(st.sampled_from(RECEIVED))
    doc = draw(DOCS[kind])
    # Python's "$" (which hypothesis and the reference validator use) also matches before a
    # final newline; the channel's ids are ECMA-262 anchored (CPE_ID_RE), as the topic is.
    for key in ("cpe_id", "proxy_id"):
        assume(key not in doc or CPE_ID_RE.match(doc[key]) is not None)
    if kind == "state" and "role" in doc:
        # The role is the topic's: what an honest agent sends (the rest is tested apart).
        doc["role"] = "proxy" if "proxy_id" in doc else "cpe"
    if kind == "state" and doc.get("addresses") and draw(st.booleans()):
        # The pattern's strings are rarely addresses: half the time, real ones of any kind.
        doc["addresses"] = {w: str(draw(st.ip_addresses())) for w in doc["addresses"]}
    return kind, doc


@fuzz(SCHEMA_VALID_EXAMPLES)
@given(schema_valid(), st.booleans())
def test_schema_valid_documents_are_accepted_and_convert(
        case: tuple[Kind, dict[str, Any]], ascii_only: bool) -> None:
    kind, doc = case
    payload = json.dumps(doc, ensure_ascii=ascii_only, separators=(",", ":")).encode()
    drops, out = decode_counted(topic_of(kind, doc), payload)
    if outside_number_range(doc):
        assert out is None and drops.snapshot() == {f"{kind}/bad-json": 1}
        return
    # The schema's address pattern admits strings no CPE can own (not an address, a
    # wildcard): the decoder refuses those as the proxy agent does.
    if kind == "state" and any(wat_address_problem(a) is not None
                               for a in doc.get("addresses", {}).values()):
        assert out is None and drops.snapshot() == {"state/bad-address": 1}
        return
    assert out == (kind, doc), drops.snapshot()
    check_converts(kind, doc)


def test_the_longest_state_fits_however_it_is_escaped() -> None:
    wats = ("nr", "lte", "wifi", "lifi")
    doc = {"schema": "mcw.state.v2", "cpe_id": "c" * 64, "online": False,
           "role": "proxy", "proxy_id": "p" * 64, "direction": "dl",
           "time_ms": 2**53 - 1, "applied_version": 2**53 - 1,
           "applied_weights": dict.fromkeys(wats, 255),
           "addresses": dict.fromkeys(wats, "fdff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"),
           "backend": "mptcp-upstream",
           "capabilities": {"max_weight": 255, "on_off_only": False,
                            "directions_coupled": True},
           "links": dict.fromkeys(wats, "down"),
           "event": "lease-expired", "last_error": "\U0001f600" * 1024}
    payload = json.dumps(doc).encode()  # every character as a 12-byte surrogate pair
    assert len(payload) > 12_000
    _drops, out = decode_counted(topic_of("state", doc), payload)
    assert out == ("state", doc)
    check_converts("state", doc)
    proxy = {"schema": "mcw.proxy-state.v1", "proxy_id": "p" * 64, "online": True,
             "time_ms": 2**53 - 1, "backend": "wrr-sysctl",
             "capabilities": {"max_weight": 255, "on_off_only": False,
                              "directions_coupled": False},
             "cpes": 2**53 - 1, "cpes_applied": 2**53 - 1,
             "rules": {"used": 2**53 - 1, "limit": 2**53 - 1, "overflow_cpes": 2**53 - 1},
             "last_error": "\U0001f600" * 1024}
    _drops, out = decode_counted(topic_of("proxy-state", proxy), json.dumps(proxy).encode())
    assert out == ("proxy-state", proxy)


def test_the_longest_telemetry_fits() -> None:
    side = {"delivered_mbps": 1e99, "bytes_acked": 10**20 - 1, "bytes_received": 10**20 - 1,
            "cwnd": 10**20 - 1, "saturated": 0.123456789012345, "delivery_rate_mbps": 1e99,
            "retrans_pct": 99.12345678901234}
    doc = {"schema": "mcw.telemetry.v2", "cpe_id": "c" * 64, "proxy_id": "p" * 64,
           "time_ms": 2**53 - 1, "interval_ms": 3600000,
           "wats": {w: {"up": True, "subflows": 10**20 - 1, "rtt_ms": 1e99, "dl": side,
                        "ul": side} for w in ("nr", "lte", "wifi", "lifi")}}
    payload = json.dumps(doc, indent=2).encode()
    assert len(payload) <= RECEIVE_LIMITS["telemetry"].max_bytes
    _drops, out = decode_counted(topic_of("telemetry", doc), payload)
    assert out == ("telemetry", doc)
    check_converts("telemetry", doc)


TOPICS = st.sampled_from([
    "mcw/v1/cpe/cpe-0001/telemetry", "mcw/v1/cpe/cpe-0001/state", "mcw/v1/cpe/x/weights",
    "mcw/v1/proxy/proxy-0001/state", "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state",
    "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry",
])


@fuzz(BYTES_EXAMPLES)
@given(TOPICS, st.one_of(st.binary(max_size=2_000),
                         st.text(max_size=2_000).map(str.encode)))
def test_arbitrary_bytes_are_decoded_or_dropped_with_a_reason(topic_name: str,
                                                             payload: bytes) -> None:
    _drops, out = decode_counted(topic_name, payload)
    if out is not None:
        check_converts(*out)


#: Fragments an attacker would try, spliced into valid messages.
HOSTILE = [b"[" * 5000, b"{" * 40, b"]", b"9" * 500, b"1e999", b"-1e999", b"NaN", b"Infinity",
           b"\\ud800", b'"\\udfff"', b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\x00", b'"',
           b"\\", b",", b'"cpe_id":"cpe-0002"', b"1" * 21, b"0.1e-100", b"1e100", b"1.5", b"true",
           b"null", b" " * 9000]


# Valid messages to mutate: fixed ones, not generated (from_schema costs ~50 ms a document).
@cache
def seeds() -> list[tuple[Kind, bytes]]:
    return [
        ("state", json.dumps(STATE).encode()),
        ("state", json.dumps({"schema": "mcw.state.v2", "cpe_id": "cpe-0001", "online": False})
         .encode()),
        ("state", json.dumps(PROXY_CPE_STATE).encode()),
        ("proxy-state", json.dumps(PROXY_STATE).encode()),
        ("telemetry", json.dumps(TELEMETRY).encode()),
        ("telemetry", json.dumps(PROXY_TELEMETRY).encode()),
        ("telemetry", AGENT_TELEMETRY.read_bytes()),
    ]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    kind, seed = draw(st.sampled_from(seeds()))
    doc = json.loads(seed)
    payload = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(payload)))
        op = draw(st.sampled_from(["splice", "replace", "flip", "cut"]))
        if op == "splice":
            payload[at:at] = draw(st.sampled_from(HOSTILE))
        elif op == "replace":
            end = draw(st.integers(at, min(len(payload), at + 30)))
            payload[at:end] = draw(st.sampled_from(HOSTILE))
        elif op == "flip" and at < len(payload):
            payload[at] ^= 1 << draw(st.integers(0, 7))
        else:
            del payload[at:]
    return topic_of(kind, doc), bytes(payload)


@fuzz(MUTATION_EXAMPLES)
@given(mutated())
def test_mutated_valid_messages_are_decoded_or_dropped_with_a_reason(
        case: tuple[str, bytes]) -> None:
    topic_name, payload = case
    _drops, out = decode_counted(topic_name, payload)
    if out is not None:
        check_converts(*out)
