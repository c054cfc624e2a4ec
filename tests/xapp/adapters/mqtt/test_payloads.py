"""The payload schemas and the receive-side validation (no broker needed)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.xapp.adapters.mqtt.conftest import decision
from xapp.adapters.mqtt import DropCounter, PayloadError, build_weights, decode, topic
from xapp.adapters.mqtt.payloads import (
    check,
    encode,
    encode_weights_batch,
    parse_channel_topic,
    parse_topic,
    proxy_topic,
)
from xapp.adapters.mqtt.telemetry import telemetry_frame
from xapp.core.ports import WeightBatch

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
                           "saturated": 0.9, "delivery_rate_mbps": 85.0},
                    "dl": {"delivered_mbps": 300.1, "bytes_received": 99999}},
             "wifi": {"up": False}},
}
PROXY_TELEMETRY: dict[str, Any] = {
    "schema": "mcw.telemetry.v2", "cpe_id": "cpe-0001", "proxy_id": "proxy-0001",
    "time_ms": 1763800001000, "interval_ms": 1000,
    "wats": {"nr": {"rtt_ms": 19.0, "subflows": 1, "up": True,
                    "dl": {"delivered_mbps": 301.0, "bytes_acked": 5, "cwnd": 40,
                           "saturated": 1.0, "delivery_rate_mbps": 310.0}}},
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
    ("telemetry", with_(TELEMETRY, wats={"nr": {"delivered_mbps": 3.0}})),  # v1's place
    ("telemetry", with_(TELEMETRY, wats={"wimax": {}})),
    ("telemetry", with_(TELEMETRY, time_ms=...)),
    ("telemetry", with_(TELEMETRY, schema="mcw.telemetry.v1")),
])
def test_invalid_state_and_telemetry_are_refused(kind: str, bad: dict[str, Any]) -> None:
    with pytest.raises(PayloadError):
        check(kind, bad)  # type: ignore[arg-type]


def test_build_weights_from_a_decision() -> None:
    doc = build_weights("cpe-0007", 3, decision({"nr": 30, "wifi": 100, "lifi": 0}),
                        mode="fixed_split", lease_s=30, issued_at_ms=5)
    assert doc["schema"] == "mcw.weights.v2"
    assert doc["dl"]["weights"] == doc["ul"]["weights"] == {"nr": 30, "wifi": 100, "lifi": 0}
    assert (doc["version"], doc["dl"]["mode"], doc["cpe_id"]) == (3, "fixed_split", "cpe-0007")
    both = build_weights("cpe-0007", 4, decision({"nr": 30, "wifi": 100}), mode="fixed_split",
                         lease_s=30, issued_at_ms=5,
                         ul=(decision({"nr": 0, "lte": 7}, "up"), "active_standby"))
    assert both["dl"] == {"mode": "fixed_split", "reason": "test",
                          "weights": {"nr": 30, "wifi": 100}}
    assert both["ul"] == {"mode": "active_standby", "reason": "up",
                          "weights": {"nr": 0, "lte": 7}}
    for dl, ul in [({"nr": 0, "wifi": 0}, None), ({"nr": 1}, {"nr": 0}),
                   ({"nr": 1}, {"nr": 256})]:
        with pytest.raises(PayloadError):
            build_weights("cpe-0007", 3, decision(dl), mode="fixed_split", lease_s=30,
                          issued_at_ms=5,
                          ul=None if ul is None else (decision(ul), "fixed_split"))


def test_topics() -> None:
    assert topic("cpe-0001", "weights") == "mcw/v1/cpe/cpe-0001/weights"
    assert parse_topic("mcw/v1/cpe/cpe-0001/state") == ("cpe-0001", "state")
    for bad in ["mcw/v1/cpe/cpe-0001", "mcw/v2/cpe/x/state", "mcw/v1/cpe/x/other",
                "mcw/v1/cpe/+/state"]:
        assert parse_topic(bad) is None
    for bad_id in ["", "a/b", "+", "#", "x" * 65]:
        with pytest.raises(PayloadError):
            topic(bad_id, "weights")
        with pytest.raises(PayloadError):
            proxy_topic(bad_id, "cpe-0001", "state")
    assert proxy_topic("proxy-0001", None, "state") == "mcw/v1/proxy/proxy-0001/state"
    assert (proxy_topic("proxy-0001", "cpe-0001", "telemetry")
            == "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry")
    for name, kind, cpe, proxy in [
            ("mcw/v1/cpe/cpe-0001/weights", "weights", "cpe-0001", None),
            ("mcw/v1/proxy/proxy-0001/state", "proxy-state", None, "proxy-0001"),
            ("mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state", "state", "cpe-0002", "proxy-0001"),
            ("mcw/v1/proxy/p/cpe/c/telemetry", "telemetry", "c", "p")]:
        t = parse_channel_topic(name)
        assert t is not None and (t.kind, t.cpe_id, t.proxy_id) == (kind, cpe, proxy)
    for bad in ["mcw/v1/proxy/p", "mcw/v1/proxy/p/telemetry", "mcw/v1/proxy/p/cpe/c/weights",
                "mcw/v1/proxy/+/state", "mcw/v1/proxy/p/cpe/c/state/x",
                "mcw/v1/proxy/p/cpu/c/state", "mcw/v1/proxy/p/cpe/#/state"]:
        assert parse_channel_topic(bad) is None


def test_decode_drops_and_counts_with_reason() -> None:
    drops = DropCounter()
    ok = decode("mcw/v1/cpe/cpe-0001/state", encode(STATE), drops)
    assert ok is not None and ok[0] == "state"
    assert decode("mcw/v1/cpe/cpe-0001/state", b"{not json", drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/state", b"\xff\xfe", drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/telemetry", encode(with_(TELEMETRY, wats=3)), drops) is None
    # A CPE speaking for another CPE in its own topic.
    assert decode("mcw/v1/cpe/cpe-0002/state", encode(STATE), drops) is None
    assert decode("somewhere/else", encode(STATE), drops) is None
    assert drops.snapshot() == {
        "state/bad-json": 2, "telemetry/schema": 1, "state/cpe-id-mismatch": 1,
        "unknown/bad-topic": 1,
    }
    assert drops.total() == 5 and drops.total("state") == 3


def test_decode_of_proxy_topics_checks_who_speaks() -> None:
    drops = DropCounter()
    cpe_state = "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state"
    ok = decode(cpe_state, encode(PROXY_CPE_STATE), drops)
    assert ok is not None and ok[0] == "state" and ok[1]["proxy_id"] == "proxy-0001"
    ok = decode("mcw/v1/proxy/proxy-0001/state", encode(PROXY_STATE), drops)
    assert ok is not None and ok[0] == "proxy-state"
    ok = decode("mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry", encode(PROXY_TELEMETRY),
                drops)
    assert ok is not None and ok[0] == "telemetry"
    assert drops.total() == 0
    # Another proxy's id, another CPE, a CPE's state on a proxy topic and the reverse, a proxy
    # telemetry without its id, a v1 document.
    assert decode("mcw/v1/proxy/proxy-0002/state", encode(PROXY_STATE), drops) is None
    assert decode("mcw/v1/proxy/proxy-0002/cpe/cpe-0001/state", encode(PROXY_CPE_STATE),
                  drops) is None
    assert decode("mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state", encode(PROXY_CPE_STATE),
                  drops) is None
    assert decode(cpe_state, encode(with_(STATE, proxy_id="proxy-0001")), drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/state", encode(PROXY_CPE_STATE), drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/state", encode(with_(STATE, role="proxy")),
                  drops) is None
    assert decode("mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry",
                  encode(with_(PROXY_TELEMETRY, proxy_id=...)), drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/weights", encode(WEIGHTS_V1), drops) is None
    assert decode("mcw/v1/proxy/proxy-0001/state", b"", drops) is None
    assert drops.snapshot() == {
        "proxy-state/proxy-id-mismatch": 1, "proxy-state/bad-json": 1,
        "state/proxy-id-mismatch": 2, "state/cpe-id-mismatch": 1, "state/role-mismatch": 2,
        "telemetry/proxy-id-mismatch": 1, "weights/schema": 1,
    }


def test_telemetry_becomes_kpi_rows_per_direction() -> None:
    other = with_(TELEMETRY, cpe_id="cpe-0002", time_ms=1763800002000,
                  wats={"lifi": {"rtt_ms": 3.5, "ul": {"delivered_mbps": 12.0}}})
    frame = telemetry_frame([TELEMETRY, other, PROXY_TELEMETRY])
    assert list(frame.cpe) == ["cpe-0001"] * 3 + ["cpe-0002", "cpe-0001"]
    assert list(frame.wat) == ["nr", "nr", "wifi", "lifi", "nr"]
    # A WAT with direction objects gives one row each; one without gives a row for both.
    assert frame.direction is not None
    assert list(frame.direction) == ["dl", "ul", "", "ul", "dl"]
    assert frame.time_s == pytest.approx(1763800002.0)
    mbps = frame.column("delivered_mbps")
    assert mbps[0] == pytest.approx(300.1) and mbps[1] == pytest.approx(80.5)
    assert math.isnan(mbps[2]) and mbps[3] == 12.0 and mbps[4] == 301.0
    sat = frame.column("saturated")
    # The receiving end knows no saturation; the sender (CPE for ul, proxy for dl) does.
    assert math.isnan(sat[0]) and sat[1] == 0.9 and sat[4] == 1.0
    assert list(frame.column("rtt_ms")[:2]) == [20.1, 20.1]
    assert list(frame.column("up")[:3]) == [1.0, 1.0, 0.0] and math.isnan(frame.column("up")[3])
    assert frame.column("delivery_rate_mbps")[1] == 85.0
    assert len(telemetry_frame([])) == 0


def _reference_valid(kind: str, doc: object) -> bool:
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
]


@pytest.mark.parametrize(("kind", "doc"), AGREEMENT_CASES)
def test_fast_engine_agrees_with_reference_jsonschema(kind: str, doc: Any) -> None:
    fast_ok = True
    try:
        check(kind, doc)  # type: ignore[arg-type]
    except PayloadError:
        fast_ok = False
    assert fast_ok == _reference_valid(kind, doc)


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
    assert fast_ok == _reference_valid("weights", doc)


_ROW = st.fixed_dictionaries({
    "weights": st.dictionaries(st.sampled_from(["nr", "lte", "wifi", "lifi"]),
                               st.integers(-2, 258), max_size=4),
    "mode": st.sampled_from(["load_balancing", "fixed_split", "active_standby",
                             "latency_bound", "sideways"]),
    "cpe_id": st.one_of(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"),
                        st.sampled_from(["", "a/b", "+", "x" * 65, "cpe\n"])),
    "reason": st.text(max_size=300),
})


_UL = st.fixed_dictionaries({
    "weights": st.dictionaries(st.sampled_from(["nr", "lte", "wifi", "lifi"]),
                               st.integers(-2, 258), max_size=4),
    "mode": st.sampled_from(["load_balancing", "fixed_split", "sideways"]),
    "reason": st.text(max_size=300),
})


@given(rows=st.lists(st.tuples(_ROW, _UL), min_size=1, max_size=6,
                     unique_by=lambda r: str(r[0]["cpe_id"])),
       lease=st.one_of(st.floats(-1, 4000, allow_nan=False), st.integers(-1, 4000)),
       first_version=st.integers(1, 2**53 + 3), issued=st.integers(-1, 2**53))
@settings(max_examples=400, deadline=None)
def test_batch_encoding_matches_the_schema_and_json(
        rows: list[tuple[dict[str, Any], dict[str, Any]]], lease: float, first_version: int,
        issued: int) -> None:
    """Every row is refused exactly when its document fails the reference validator, and a
    row that is sent is byte-identical to the sorted-keys JSON of that document."""
    batch = WeightBatch.of([(r["cpe_id"], (decision(r["weights"], r["reason"]), r["mode"]),
                             (decision(u["weights"], u["reason"]), u["mode"]))
                            for r, u in rows], lease)
    taken: list[str] = []

    def take(ids: list[str]) -> list[int]:
        taken.extend(ids)
        return list(range(first_version, first_version + len(ids)))

    out = encode_weights_batch(batch, issued, take)
    versions = dict(zip(taken, range(first_version, first_version + len(taken)), strict=False))
    sent = dict(zip(out.rows, out.payloads, strict=True))
    assert set(sent) | set(out.refused) == set(range(len(rows)))
    assert not set(sent) & set(out.refused)
    for i, (r, u) in enumerate(rows):
        version = versions.get(r["cpe_id"], first_version)
        doc = {"schema": "mcw.weights.v2", "cpe_id": r["cpe_id"], "version": version,
               "issued_at_ms": issued, "lease_s": lease,
               "dl": {"mode": r["mode"], "reason": r["reason"][:256], "weights": r["weights"]},
               "ul": {"mode": u["mode"], "reason": u["reason"][:256], "weights": u["weights"]}}
        # Python's ``re`` lets "$" match before a final newline; ECMA-262 (the schema's
        # dialect, and Go's regexp) does not: such an id is invalid.
        valid = _reference_valid("weights", doc) and not r["cpe_id"].endswith("\n")
        if i in sent:
            assert valid, doc
            assert sent[i] == encode(doc)
        elif r["cpe_id"] in taken and "version" in str(out.refused[i]):
            assert not 1 <= version <= 2**53 - 1  # refused after a version was taken
        else:
            assert not valid, (doc, out.refused[i])
