"""The payload schemas, and the fast validator against the reference one (no broker
needed); the documents here are the other payload tests' examples."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xapp.adapters.mqtt import PayloadError
from xapp.adapters.mqtt.payloads import check

WEIGHTS: dict[str, Any] = {
    "schema": "mcw.weights.v2", "cpe_id": "cpe-0001", "version": 42,
    "issued_at_ms": 1763800000123, "lease_s": 30,
    "dl": {"mode": "load_balancing", "reason": "proportional",
           "weights": {"nr": 30, "wifi": 100, "lifi": 1}},
    "ul": {"mode": "fixed_split", "reason": "fixed_split",
           "weights": {"nr": 1, "wifi": 3, "lifi": 0}},
}
STATE: dict[str, Any] = {
    "schema": "mcw.state.v2", "cpe_id": "cpe-0001", "online": True, "time_ms": 1763800000200,
    "role": "cpe", "direction": "ul",
    "applied_version": 42, "applied_weights": {"nr": 30, "wifi": 100, "lifi": 1},
    "addresses": {"nr": "10.0.1.2", "wifi": "fd00::2"},
    "backend": "wrr-sysctl",
    "capabilities": {"max_weight": 255, "on_off_only": False, "directions_coupled": False},
    "links": {"nr": "up", "wifi": "down"}, "event": "applied", "last_error": "",
}
PROXY_CPE_STATE: dict[str, Any] = {
    "schema": "mcw.state.v2", "cpe_id": "cpe-0001", "online": True, "time_ms": 1763800000300,
    "role": "proxy", "proxy_id": "proxy-0001", "direction": "dl", "applied_version": 42,
    "applied_weights": {"nr": 30, "wifi": 100, "lifi": 1}, "backend": "mptcp-upstream",
    "capabilities": {"on_off_only": True, "directions_coupled": True},
}
PROXY_STATE: dict[str, Any] = {
    "schema": "mcw.proxy-state.v1", "proxy_id": "proxy-0001", "online": True,
    "time_ms": 1763800000400, "backend": "wrr-sysctl",
    "capabilities": {"max_weight": 255, "on_off_only": False, "directions_coupled": False},
    "cpes": 2, "cpes_applied": 1, "rules": {"used": 6, "limit": 64, "overflow_cpes": 0},
    "last_error": "",
}
TELEMETRY: dict[str, Any] = {
    "schema": "mcw.telemetry.v2", "cpe_id": "cpe-0001", "time_ms": 1763800001000,
    "interval_ms": 1000,
    "wats": {"nr": {"rtt_ms": 20.1, "subflows": 1, "up": True,
                    "ul": {"delivered_mbps": 80.5, "cwnd": 100, "bytes_acked": 12345,
                           "saturated": 0.9, "delivery_rate_mbps": 85.0, "retrans_pct": 1.5},
                    "dl": {"delivered_mbps": 300.1, "bytes_received": 99999}},
             "wifi": {"up": False}},
}
PROXY_TELEMETRY: dict[str, Any] = {
    "schema": "mcw.telemetry.v2", "cpe_id": "cpe-0001", "proxy_id": "proxy-0001",
    "time_ms": 1763800001000, "interval_ms": 1000,
    "wats": {"nr": {"rtt_ms": 19.0, "subflows": 1, "up": True,
                    "dl": {"delivered_mbps": 301.0, "bytes_acked": 5, "cwnd": 40,
                           "saturated": 1.0, "delivery_rate_mbps": 310.0,
                           "retrans_pct": 0.25}}},
}


def with_(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    for key, value in changes.items():
        if value is ...:
            out.pop(key)
        else:
            out[key] = value
    changed: dict[str, Any] = out
    return changed


def test_contract_examples_validate() -> None:
    check("weights", WEIGHTS)
    check("state", STATE)
    check("state", PROXY_CPE_STATE)
    check("proxy-state", PROXY_STATE)
    check("telemetry", TELEMETRY)
    check("telemetry", PROXY_TELEMETRY)
    check("state", {"schema": "mcw.state.v2", "cpe_id": "cpe-0001", "online": False})
    check("proxy-state", {"schema": "mcw.proxy-state.v1", "proxy_id": "p", "online": False})


def direction(doc: dict[str, Any], name: str = "dl", **changes: Any) -> dict[str, Any]:
    """``doc`` with its ``name`` set changed (``...`` removes a key)."""
    out = with_(doc)
    part = out[name]
    for key, value in changes.items():
        if value is ...:
            part.pop(key)
        else:
            part[key] = value
    return out


#: The one set of the first version of the message: refused by v2 agents and the xApp.
WEIGHTS_V1: dict[str, Any] = {
    "schema": "mcw.weights.v1", "cpe_id": "cpe-0001", "version": 42,
    "issued_at_ms": 1763800000123, "lease_s": 30, "mode": "load_balancing",
    "reason": "proportional", "weights": {"nr": 30, "wifi": 100, "lifi": 1},
}


@pytest.mark.parametrize("bad", [
    direction(WEIGHTS, weights={"nr": 0, "wifi": 0}),      # all zero: never sent
    direction(WEIGHTS, "ul", weights={"nr": 0, "wifi": 0}),
    direction(WEIGHTS, weights={}),
    direction(WEIGHTS, "ul", weights={"nr": 256}),
    direction(WEIGHTS, weights={"nr": -1, "wifi": 3}),
    direction(WEIGHTS, weights={"nr": 1.5}),
    direction(WEIGHTS, weights={"wimax": 3}),
    direction(WEIGHTS, "ul", mode="round_robin"),
    direction(WEIGHTS, mode=...),
    direction(WEIGHTS, "ul", extra=1),
    with_(WEIGHTS, dl=...),
    with_(WEIGHTS, ul=...),
    with_(WEIGHTS, version=0),
    with_(WEIGHTS, version="42"),
    with_(WEIGHTS, lease_s=0.5),
    with_(WEIGHTS, lease_s=3601),
    with_(WEIGHTS, cpe_id="cpe/+"),
    with_(WEIGHTS, extra=1),
    with_(WEIGHTS, schema="mcw.weights.v1"),
    with_(WEIGHTS, issued_at_ms=...),
    WEIGHTS_V1,
])
def test_invalid_weights_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(PayloadError):
        check("weights", bad)


@pytest.mark.parametrize(("kind", "bad"), [
    ("state", with_(STATE, online=...)),
    ("state", with_(STATE, backend="ebpf")),
    ("state", with_(STATE, event="exploded")),
    ("state", with_(STATE, capabilities={"max_weight": 0})),
    ("state", with_(STATE, links={"nr": "sideways"})),
    ("state", with_(STATE, schema="mcw.state.v1")),
    ("state", with_(STATE, role="gateway")),
    ("state", with_(STATE, direction="both")),
    ("state", with_(STATE, addresses={"nr": "10.0.0.1/24"})),
    ("proxy-state", with_(PROXY_STATE, proxy_id="a/b")),
    ("proxy-state", with_(PROXY_STATE, rules={"used": -1})),
    ("telemetry", with_(TELEMETRY, wats={"nr": {"dl": {"delivered_mbps": -1}}})),
    ("telemetry", with_(TELEMETRY, wats={"nr": {"ul": {"saturated": 1.5}}})),
    ("telemetry", with_(TELEMETRY, wats={"nr": {"ul": {"retrans_pct": 100.5}}})),  # a percentage
    ("telemetry", with_(TELEMETRY, wats={"nr": {"dl": {"retrans_pct": -1}}})),
    ("telemetry", with_(TELEMETRY, wats={"nr": {"retrans_pct": 1}})),  # per direction
    ("telemetry", with_(TELEMETRY, wats={"nr": {"delivered_mbps": 3.0}})),  # v1's place
    ("telemetry", with_(TELEMETRY, wats={"wimax": {}})),
    ("telemetry", with_(TELEMETRY, time_ms=...)),
    ("telemetry", with_(TELEMETRY, schema="mcw.telemetry.v1")),
])
def test_invalid_state_and_telemetry_are_refused(kind: str, bad: dict[str, Any]) -> None:
    with pytest.raises(PayloadError):
        check(kind, bad)  # type: ignore[arg-type]


def reference_valid(kind: str, doc: object) -> bool:
    """The pure-Python ``jsonschema`` verdict, the reference the fast engine must match."""
    from jsonschema import Draft202012Validator

    from xapp.adapters.mqtt.payloads import load_schema
    return bool(Draft202012Validator(load_schema(kind)).is_valid(doc))


AGREEMENT_CASES: list[tuple[str, Any]] = [
    ("weights", WEIGHTS), ("state", STATE), ("telemetry", TELEMETRY),
    ("weights", direction(WEIGHTS, weights={"nr": 0, "wifi": 0})),
    ("weights", direction(WEIGHTS, weights={"lte": 0, "lifi": 255})),
    ("weights", direction(WEIGHTS, "ul", weights={"nr": 256})),
    ("weights", with_(WEIGHTS, lease_s=1)), ("weights", with_(WEIGHTS, lease_s=3600.5)),
    ("weights", with_(WEIGHTS, version=True)), ("weights", with_(WEIGHTS, version=1.0)),
    ("weights", direction(WEIGHTS, reason="x" * 257)),
    ("weights", direction(WEIGHTS, "ul", reason=...)),
    ("weights", []), ("weights", None), ("weights", "{}"),
    ("state", {"schema": "mcw.state.v2", "cpe_id": "c", "online": False}),
    ("state", PROXY_CPE_STATE), ("proxy-state", PROXY_STATE),
    ("telemetry", PROXY_TELEMETRY), ("weights", WEIGHTS_V1),
    ("weights", direction(WEIGHTS, "ul", weights={"lte": 0, "lifi": 255})),
    ("state", with_(STATE, applied_version=-1)), ("state", with_(STATE, links={})),
    ("telemetry", with_(TELEMETRY, wats={})),
    ("telemetry", with_(TELEMETRY, interval_ms=0)),
    ("telemetry", with_(TELEMETRY, wats={"nr": {"ul": {"cwnd": 1.5}}})),
    ("telemetry", with_(TELEMETRY, wats={"nr": {"ul": {"retrans_pct": 100}}})),
    ("telemetry", with_(TELEMETRY, wats={"nr": {"ul": {"retrans_pct": 100.000001}}})),
]


@pytest.mark.parametrize(("kind", "doc"), AGREEMENT_CASES)
def test_fast_engine_agrees_with_reference_jsonschema(kind: str, doc: Any) -> None:
    fast_ok = True
    try:
        check(kind, doc)  # type: ignore[arg-type]
    except PayloadError:
        fast_ok = False
    assert fast_ok == reference_valid(kind, doc)


@given(weights=st.dictionaries(st.sampled_from(["nr", "lte", "wifi", "lifi", "x"]),
                               st.one_of(st.integers(-2, 258), st.floats(-1, 300),
                                         st.booleans()), max_size=5),
       lease=st.one_of(st.floats(0, 4000, allow_nan=False), st.integers(-1, 4000)),
       version=st.integers(-1, 2**54))
@settings(max_examples=300, deadline=None)
def test_fast_engine_agrees_on_random_weights(weights: dict[str, Any], lease: float,
                                               version: int) -> None:
    doc = with_(direction(WEIGHTS, "ul", weights=weights), lease_s=lease, version=version)
    fast_ok = True
    try:
        check("weights", doc)
    except PayloadError:
        fast_ok = False
    assert fast_ok == reference_valid("weights", doc)
