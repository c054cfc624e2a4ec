"""The three payload schemas and the receive-side validation (no broker needed)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.channel.conftest import decision
from xapp.adapters.mqtt import CpeState, DropCounter, PayloadError, build_weights, decode, topic
from xapp.adapters.mqtt.payloads import check, encode, encode_weights_batch, parse_topic
from xapp.adapters.mqtt.subscriber import telemetry_frame
from xapp.core.ports import WeightBatch

WEIGHTS: dict[str, Any] = {
    "schema": "mcw.weights.v1", "cpe_id": "cpe-0001", "version": 42,
    "issued_at_ms": 1763800000123, "lease_s": 30, "mode": "load_balancing",
    "reason": "proportional", "weights": {"nr": 30, "wifi": 100, "lifi": 1},
}
STATE: dict[str, Any] = {
    "schema": "mcw.state.v1", "cpe_id": "cpe-0001", "online": True, "time_ms": 1763800000200,
    "applied_version": 42, "applied_weights": {"nr": 30, "wifi": 100, "lifi": 1},
    "backend": "wrr-sysctl", "capabilities": {"max_weight": 255, "on_off_only": False},
    "links": {"nr": "up", "wifi": "down"}, "event": "applied", "last_error": "",
}
TELEMETRY: dict[str, Any] = {
    "schema": "mcw.telemetry.v1", "cpe_id": "cpe-0001", "time_ms": 1763800001000,
    "interval_ms": 1000,
    "wats": {"nr": {"delivered_mbps": 300.1, "rtt_ms": 20.1, "cwnd": 100, "bytes_acked": 12345,
                    "subflows": 1, "up": True},
             "wifi": {"delivered_mbps": 0.0, "up": False}},
}


def with_(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    for key, value in changes.items():
        if value is ...:
            out.pop(key)
        else:
            out[key] = value
    return out


def test_contract_examples_validate() -> None:
    check("weights", WEIGHTS)
    check("state", STATE)
    check("telemetry", TELEMETRY)
    check("state", {"schema": "mcw.state.v1", "cpe_id": "cpe-0001", "online": False})


@pytest.mark.parametrize("bad", [
    with_(WEIGHTS, weights={"nr": 0, "wifi": 0}),          # all zero: never sent
    with_(WEIGHTS, weights={}),
    with_(WEIGHTS, weights={"nr": 256}),
    with_(WEIGHTS, weights={"nr": -1, "wifi": 3}),
    with_(WEIGHTS, weights={"nr": 1.5}),
    with_(WEIGHTS, weights={"wimax": 3}),
    with_(WEIGHTS, version=0),
    with_(WEIGHTS, version="42"),
    with_(WEIGHTS, lease_s=0.5),
    with_(WEIGHTS, lease_s=3601),
    with_(WEIGHTS, mode="round_robin"),
    with_(WEIGHTS, cpe_id="cpe/+"),
    with_(WEIGHTS, extra=1),
    with_(WEIGHTS, schema="mcw.weights.v2"),
    with_(WEIGHTS, issued_at_ms=...),
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
    ("telemetry", with_(TELEMETRY, wats={"nr": {"delivered_mbps": -1}})),
    ("telemetry", with_(TELEMETRY, wats={"wimax": {}})),
    ("telemetry", with_(TELEMETRY, time_ms=...)),
])
def test_invalid_state_and_telemetry_are_refused(kind: str, bad: dict[str, Any]) -> None:
    with pytest.raises(PayloadError):
        check(kind, bad)  # type: ignore[arg-type]


def test_build_weights_from_a_decision() -> None:
    doc = build_weights("cpe-0007", 3, decision({"nr": 30, "wifi": 100, "lifi": 0}),
                        mode="fixed_split", lease_s=30, issued_at_ms=5)
    assert doc["weights"] == {"nr": 30, "wifi": 100, "lifi": 0}
    assert (doc["version"], doc["mode"], doc["cpe_id"]) == (3, "fixed_split", "cpe-0007")
    with pytest.raises(PayloadError):
        build_weights("cpe-0007", 3, decision({"nr": 0, "wifi": 0}), mode="fixed_split",
                      lease_s=30, issued_at_ms=5)


def test_topics() -> None:
    assert topic("cpe-0001", "weights") == "mcw/v1/cpe/cpe-0001/weights"
    assert parse_topic("mcw/v1/cpe/cpe-0001/state") == ("cpe-0001", "state")
    for bad in ["mcw/v1/cpe/cpe-0001", "mcw/v2/cpe/x/state", "mcw/v1/cpe/x/other",
                "mcw/v1/cpe/+/state"]:
        assert parse_topic(bad) is None
    for bad_id in ["", "a/b", "+", "#", "x" * 65]:
        with pytest.raises(PayloadError):
            topic(bad_id, "weights")


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


def test_telemetry_becomes_kpi_rows() -> None:
    other = with_(TELEMETRY, cpe_id="cpe-0002", time_ms=1763800002000,
                  wats={"lifi": {"delivered_mbps": 12.0, "rtt_ms": 3.5}})
    frame = telemetry_frame([TELEMETRY, other])
    assert list(frame.cpe) == ["cpe-0001", "cpe-0001", "cpe-0002"]
    assert list(frame.wat) == ["nr", "wifi", "lifi"]
    assert frame.time_s == pytest.approx(1763800002.0)
    mbps = frame.column("delivered_mbps")
    assert mbps[0] == pytest.approx(300.1) and mbps[1] == 0.0 and mbps[2] == 12.0
    assert list(frame.column("up")[:2]) == [1.0, 0.0] and math.isnan(frame.column("up")[2])
    assert math.isnan(frame.column("cwnd")[1])
    assert len(telemetry_frame([])) == 0


def test_last_will_keeps_what_was_known() -> None:
    online = CpeState.from_doc(STATE, None, 1.0)
    assert online.online and online.applied_version == 42 and not online.on_off_only
    assert online.backend == "wrr-sysctl" and online.links["wifi"] == "down"
    will = {"schema": "mcw.state.v1", "cpe_id": "cpe-0001", "online": False}
    gone = CpeState.from_doc(will, online, 2.0)
    assert not gone.online and gone.applied_version == 42 and gone.event is None
    fresh = CpeState.from_doc(will, None, 2.0)
    assert not fresh.online and fresh.applied_version == 0


def _reference_valid(kind: str, doc: object) -> bool:
    """The pure-Python ``jsonschema`` verdict, the reference the fast engine must match."""
    from jsonschema import Draft202012Validator

    from xapp.adapters.mqtt.payloads import load_schema
    return bool(Draft202012Validator(load_schema(kind)).is_valid(doc))  # type: ignore[arg-type]


AGREEMENT_CASES: list[tuple[str, Any]] = [
    ("weights", WEIGHTS), ("state", STATE), ("telemetry", TELEMETRY),
    ("weights", with_(WEIGHTS, weights={"nr": 0, "wifi": 0})),
    ("weights", with_(WEIGHTS, weights={"lte": 0, "lifi": 255})),
    ("weights", with_(WEIGHTS, weights={"nr": 256})),
    ("weights", with_(WEIGHTS, lease_s=1)), ("weights", with_(WEIGHTS, lease_s=3600.5)),
    ("weights", with_(WEIGHTS, version=True)), ("weights", with_(WEIGHTS, version=1.0)),
    ("weights", with_(WEIGHTS, reason="x" * 257)), ("weights", with_(WEIGHTS, reason=...)),
    ("weights", []), ("weights", None), ("weights", "{}"),
    ("state", {"schema": "mcw.state.v1", "cpe_id": "c", "online": False}),
    ("state", with_(STATE, applied_version=-1)), ("state", with_(STATE, links={})),
    ("telemetry", with_(TELEMETRY, wats={})),
    ("telemetry", with_(TELEMETRY, interval_ms=0)),
    ("telemetry", with_(TELEMETRY, wats={"nr": {"cwnd": 1.5}})),
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
    doc = with_(WEIGHTS, weights=weights, lease_s=lease, version=version)
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


@given(rows=st.lists(_ROW, min_size=1, max_size=6, unique_by=lambda r: r["cpe_id"]),
       lease=st.one_of(st.floats(-1, 4000, allow_nan=False), st.integers(-1, 4000)),
       first_version=st.integers(1, 2**53 + 3), issued=st.integers(-1, 2**53))
@settings(max_examples=400, deadline=None)
def test_batch_encoding_matches_the_schema_and_json(rows: list[dict[str, Any]], lease: float,
                                                    first_version: int, issued: int) -> None:
    """Every row is refused exactly when its document fails the reference validator, and a
    row that is sent is byte-identical to the sorted-keys JSON of that document."""
    batch = WeightBatch.of([(r["cpe_id"], decision(r["weights"], r["reason"]), r["mode"])
                            for r in rows], lease)
    taken: list[str] = []

    def take(ids: list[str]) -> list[int]:
        taken.extend(ids)
        return list(range(first_version, first_version + len(ids)))

    out = encode_weights_batch(batch, issued, take)
    versions = dict(zip(taken, range(first_version, first_version + len(taken)), strict=False))
    sent = dict(zip(out.rows, out.payloads, strict=True))
    assert set(sent) | set(out.refused) == set(range(len(rows)))
    assert not set(sent) & set(out.refused)
    for i, r in enumerate(rows):
        version = versions.get(r["cpe_id"], first_version)
        doc = {"schema": "mcw.weights.v1", "cpe_id": r["cpe_id"], "version": version,
               "issued_at_ms": issued, "lease_s": lease, "mode": r["mode"],
               "reason": r["reason"][:256], "weights": r["weights"]}
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
