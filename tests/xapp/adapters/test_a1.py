"""A1 handling without RMR: both encodings, CREATE/UPDATE/DELETE, refusals, combination."""

from __future__ import annotations

import json
from typing import Any

import pytest

from xapp.adapters.a1 import A1Handler, Status, parse_request, query_message
from xapp.adapters.a1_types import PolicyType
from xapp.core.policy import SteeringMode
from xapp.core.policy_book import PolicyBook, PolicyInstance

DEFAULTS = {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
            "capacity_floor_mbps": 1.0}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


class Recorder:
    """A PolicyPersistence that remembers calls (the SDL store is tested on its own)."""

    def __init__(self) -> None:
        self.saved: dict[str, PolicyInstance] = {}

    def save_policy(self, instance: PolicyInstance) -> None:
        self.saved[instance.instance_id] = instance

    def delete_policy(self, instance_id: str) -> None:
        self.saved.pop(instance_id, None)


def go_style(op: str, iid: str, payload: dict[str, Any] | None, type_id: int = 20100) -> bytes:
    """The Go A1 mediator: type id as a string, payload as a JSON-encoded string."""
    doc: dict[str, Any] = {"operation": op, "policy_type_id": str(type_id),
                           "policy_instance_id": iid}
    if payload is not None:
        doc["payload"] = json.dumps(payload)
    return json.dumps(doc).encode()


def py_style(op: str, iid: str, payload: dict[str, Any] | None, type_id: int = 20100) -> bytes:
    """The Python A1 mediator: integer type id, payload as an object."""
    doc: dict[str, Any] = {"operation": op, "policy_type_id": type_id, "policy_instance_id": iid}
    if payload is not None:
        doc["payload"] = payload
    return json.dumps(doc).encode()


@pytest.fixture
def setup(policy_types: tuple[PolicyType, ...]
          ) -> tuple[A1Handler, PolicyBook, Recorder, list[tuple[str, str]]]:
    book = PolicyBook(DEFAULTS)
    rec = Recorder()
    seen: list[tuple[str, str]] = []
    handler = A1Handler(book, policy_types, "mcw-xapp-0", persistence=rec,
                        observe=lambda op, st: seen.append((op, st)), clock=Clock())
    return handler, book, rec, seen


def test_policy_type_files_are_the_registration_bodies(
        policy_types: tuple[PolicyType, ...]) -> None:
    assert [t.policy_type_id for t in policy_types] == [20100, 20101]
    for t in policy_types:
        assert t.name == "mcw_steering"
        assert t.create_schema["type"] == "object"


@pytest.mark.parametrize("encode", [go_style, py_style], ids=["go", "python"])
def test_create_update_delete_in_both_encodings(setup: Any, encode: Any) -> None:
    handler, book, rec, seen = setup
    resp = handler.handle(encode("CREATE", "p1", {"mode": "fixed_split", "wats": {
        "nr": {"split_pct": 30}, "wifi": {"split_pct": 70}}}))
    assert resp.to_dict() == {"policy_type_id": 20100, "policy_instance_id": "p1",
                              "handler_id": "mcw-xapp-0", "status": "OK"}
    assert isinstance(json.loads(resp.encode())["policy_type_id"], int)
    policy, source = book.resolver().for_cpe("any-cpe")
    assert (policy.mode, source) == (SteeringMode.FIXED_SPLIT, "p1")
    assert policy.split_pct == {"nr": 30.0, "wifi": 70.0}
    # Keys the instance leaves out come from the configured defaults.
    assert policy.hysteresis_pct == 2.0 and policy.capacity_floor_mbps == 1.0
    assert "p1" in rec.saved

    resp = handler.handle(encode("UPDATE", "p1", {"max_weight": 50, "excluded_wats": ["lifi"]}))
    assert resp.status is Status.OK
    policy, _ = book.resolver().for_cpe("any-cpe")
    assert policy.mode is SteeringMode.LOAD_BALANCING and policy.max_weight == 50
    assert policy.excluded == frozenset({"lifi"})

    resp = handler.handle(encode("DELETE", "p1", None))
    assert resp.status is Status.DELETED
    policy, source = book.resolver().for_cpe("any-cpe")
    assert source == "default" and policy.max_weight == 100
    assert rec.saved == {}
    assert seen == [("CREATE", "OK"), ("UPDATE", "OK"), ("DELETE", "DELETED")]


INVALID = [
    ({"mode": "warp_drive"}, "mode"),
    ({"max_weight": 0}, "max_weight"),
    ({"max_weight": 300}, "max_weight"),
    ({"wats": {"5g": {"min_share": 0.1}}}, "wats"),
    ({"wats": {"nr": {"min_share": 1.5}}}, "min_share"),
    ({"unknown_key": 1}, "unknown_key"),
    ({"scope": {"cpes": "cpe-1"}}, "scope"),
    # Valid per schema, refused by the Policy record's own checks:
    ({"mode": "active_standby"}, "priority"),
    ({"wats": {"nr": {"min_share": 0.7}, "wifi": {"min_share": 0.6}}}, "min_share"),
    # Per-direction overrides: refused by the schema, or by the merged policy's checks.
    ({"directions": {"both": {"max_weight": 3}}}, "directions"),
    ({"directions": {"dl": {"update_period_s": 3}}}, "update_period_s"),
    ({"directions": {"ul": {"max_weight": 0}}}, "max_weight"),
    ({"directions": {"dl": {"mode": "active_standby"}}}, "priority"),
    ({"directions": {"ul": {"wats": {"nr": {"min_share": 0.7}, "wifi": {"min_share": 0.6}}}}},
     "min_share"),
    # Issue 33: answered OK before, then the CPE got nothing in either direction.
    ({"directions": {"dl": {"excluded_wats": ["nr", "lte", "wifi", "lifi"]}}},
     "directions.dl: excluded_wats excludes every WAT"),
]
VOICE = {"name": "voice", "match": {"protocols": ["udp"], "destination_ports": [[5060, 5061]]},
         "mode": "smallest_delay", "rtt_max_ms": 60, "urgent": True}
VIDEO = {"name": "video", "match": {"dscp": [34]}, "mode": "priority",
         "priority": ["wifi", "nr"], "demand_mbps": 8}
#: Issue 35: rules and the keys of 20101, refused by the schema or the xApp's own checks.
INVALID_20101 = [
    ({"mode": "redundant"}, "redundant is refused: mainline Linux MPTCP has no scheduler that "
                            "sends a TCP flow's data on two paths at once"),
    ({"rules": [{**VIDEO, "mode": "redundant"}]}, "rules[0] (video): dl: mode redundant is "
                                                  "refused"),
    ({"rules": [VOICE, {**VIDEO, "name": "voice"}]}, "the name 'voice' is used twice"),
    ({"rules": [{**VOICE, "match": {}}]}, "rules/0/match"),  # the schema's minProperties
    ({"rules": [{**VOICE, "match": {"dscp": []}}]}, "rules/0/match/dscp"),
    ({"rules": [{**VOICE, "name": f"r{i}"} for i in range(9)]}, "rules: "),  # maxItems 8
    ({"rules": [{**VOICE, "match": {"destination_ports": [[9000, 8000]]}}]},
     "range [9000, 8000] runs backwards"),
    ({"rules": [{**VOICE, "match": {"destination_prefixes": ["10.0.0.1/8"]}}]},
     "'10.0.0.1/8' is not a CIDR prefix"),
    ({"rules": [{**VOICE, "match": {"destination_prefixes": ["not-a-prefix"]}}]},
     "not a CIDR prefix"),
    ({"rules": [{**VIDEO, "priority": ["wifi", "satellite"]}]}, "rules/0/priority/1"),
    ({"rules": [{**VIDEO, "directions": {"dl": {"match": {"cgroup": "/app.slice"}}}}]},
     "directions.dl: match.cgroup cannot apply to the downlink"),
    ({"rules": [{**VIDEO, "directions": {"ul": {"mode": "active_standby", "priority": []}}}]},
     "rules[0] (video): ul: active_standby needs a priority list"),
    ({"rules": [{**VIDEO, "update_period_s": 2}]}, "rules/0"),
    ({"rules": [{"name": "x", "mode": "load_balancing"}]}, "'match' is a required property"),
    ({"rtt_max_ms": 0}, "rtt_max_ms"),
    ({"wats": {"nr": {"loss_max_pct": 120}}}, "loss_max_pct"),
    ({"urgent_cap_fraction": 0.1}, "urgent_cap_fraction"),
]
#: What 20101 adds is not 20100's: the older type's schema refuses it.
INVALID_20100 = [({"rules": [VOICE]}, "Additional properties are not allowed ('rules'"),
                 ({"mode": "priority", "priority": ["nr"]}, "mode"),
                 ({"rtt_max_ms": 20}, "rtt_max_ms")]


@pytest.mark.parametrize("type_id, payload, reason", [
    *((t, p, r) for t in (20100, 20101) for p, r in INVALID),
    *((20101, p, r) for p, r in INVALID_20101),
    *((20100, p, r) for p, r in INVALID_20100),
])
def test_invalid_policy_is_refused_and_the_previous_stays(setup: Any, type_id: int,
                                                          payload: dict[str, Any], reason: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    handler, book, rec, seen = setup
    assert handler.handle(go_style("CREATE", "p1", {"max_weight": 40}, type_id)
                          ).status is Status.OK
    before = book.resolver().for_cpe("c")
    resp = handler.handle(go_style("UPDATE", "p1", payload, type_id))
    assert resp.status is Status.ERROR
    assert resp.to_dict()["policy_instance_id"] == "p1"
    assert book.resolver().for_cpe("c") == before
    assert rec.saved["p1"].payload == {"max_weight": 40}
    assert any(reason in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    assert seen[-1] == ("UPDATE", "ERROR")


def test_per_direction_overrides_are_accepted(setup: Any) -> None:
    handler, book, rec, _seen = setup
    payload = {"scope": {"cpes": ["cpe-7"]}, "excluded_wats": ["wifi"],
               "directions": {"dl": {"excluded_wats": [], "max_weight": 50}}}
    assert handler.handle(py_style("CREATE", "dirs", payload)).status is Status.OK
    policy, source = book.resolver().for_cpe("cpe-7")
    assert source == "dirs"
    assert policy.for_direction("ul").excluded == frozenset({"wifi"})
    assert policy.for_direction("dl").excluded == frozenset()
    assert policy.for_direction("dl").max_weight == 50
    assert policy.for_direction("ul").max_weight == 100  # the default policy's
    assert rec.saved["dirs"].payload["directions"] == payload["directions"]


@pytest.mark.parametrize("raw", [
    b"not json",
    b"[1, 2]",
    json.dumps({"operation": "FROB", "policy_type_id": 20100, "policy_instance_id": "x",
                "payload": {}}).encode(),
    json.dumps({"operation": "CREATE", "policy_type_id": "twenty",
                "policy_instance_id": "x", "payload": {}}).encode(),
    json.dumps({"operation": "CREATE", "policy_type_id": 20100, "payload": {}}).encode(),
    json.dumps({"operation": "CREATE", "policy_type_id": 20100, "policy_instance_id": "x",
                "payload": "{not json"}).encode(),
    json.dumps({"operation": "CREATE", "policy_type_id": 20100, "policy_instance_id": "x",
                "payload": "[1]"}).encode(),
])
def test_malformed_requests_get_error(setup: Any, raw: bytes) -> None:
    handler, book, _, _ = setup
    before = book.resolver()
    resp = handler.handle(raw)
    assert resp.status is Status.ERROR
    assert isinstance(resp.to_dict()["policy_type_id"], int)
    assert book.resolver() is before


def test_other_policy_type_is_refused(setup: Any) -> None:
    handler, book, _, _ = setup
    resp = handler.handle(go_style("CREATE", "p9", {"max_weight": 10}, type_id=20008))
    assert resp.status is Status.ERROR and resp.policy_type_id == 20008
    assert book.instances() == []


@pytest.mark.parametrize("encode", [go_style, py_style], ids=["go", "python"])
def test_a_20101_policy_with_rules(setup: Any, encode: Any) -> None:
    handler, book, rec, _ = setup
    payload = {"scope": {"cpes": ["cpe-7"]}, "mode": "load_balancing", "rtt_max_ms": 200,
               "urgent_cap_fraction": 0.85,
               "rules": [VOICE, VIDEO, {"name": "robot", "match": {"cgroup": "/robot.slice"},
                                        "mode": "active_standby", "priority": ["nr", "wifi"],
                                        "urgent": True}]}
    resp = handler.handle(encode("CREATE", "rules-1", payload, 20101))
    assert resp.status is Status.OK and resp.to_dict()["policy_type_id"] == 20101
    policy, source = book.resolver().for_cpe("cpe-7")
    assert source == "rules-1" and policy.urgent_cap_fraction == 0.85
    assert [c.name for c in policy.classes_for("ul")] == ["voice", "video", "robot"]
    assert [c.name for c in policy.classes_for("dl")] == ["voice", "video"]
    assert policy.classes_for("ul")[0].policy.rtt_max_ms == 60.0  # the rule's own
    assert policy.classes_for("ul")[1].policy.rtt_max_ms == 200.0  # the policy's
    # Stored with its type, so a restart and a resync know it.
    assert rec.saved["rules-1"].policy_type_id == 20101
    assert PolicyInstance.from_dict(rec.saved["rules-1"].to_dict()) == rec.saved["rules-1"]
    # A record stored before 20101 was of the only type there was.
    old = {k: v for k, v in rec.saved["rules-1"].to_dict().items() if k != "policy_type_id"}
    assert PolicyInstance.from_dict(old).policy_type_id == 20100


@pytest.mark.parametrize("payload", [
    {}, {"max_weight": 40, "hysteresis_pct": 5},
    {"mode": "fixed_split", "wats": {"nr": {"split_pct": 30}, "wifi": {"split_pct": 70}}},
    {"mode": "active_standby", "priority": ["wifi", "nr"], "excluded_wats": ["lifi"]},
    {"mode": "latency_bound", "rtt_bound_ms": 20, "demand_mbps": 100,
     "directions": {"dl": {"excluded_wats": ["lte"], "capacity_floor_mbps": 3}}},
    {"scope": {"cpes": ["cpe-7"]}, "wats": {"lifi": {"min_share": 0.1, "max_share": 0.5}},
     "update_period_s": 0.5},
])
def test_a_20100_policy_means_the_same_under_20101(setup: Any, payload: dict[str, Any]) -> None:
    handler, book, _, _ = setup
    built = []
    for type_id in (20100, 20101):
        assert handler.handle(go_style("CREATE", f"p{type_id}", payload, type_id)
                              ).status is Status.OK
        built.append(book.resolver().for_cpe("cpe-7")[0])
        handler.handle(go_style("DELETE", f"p{type_id}", None, type_id))
    assert built[0] == built[1] and not built[1].rules


def test_an_instance_id_is_one_instance_whatever_its_type(setup: Any) -> None:
    handler, book, rec, _ = setup
    assert handler.handle(go_style("CREATE", "p1", {"max_weight": 40}, 20100)).status is Status.OK
    before = book.resolver().for_cpe("c")
    for op, payload in (("CREATE", {"rules": [VOICE]}), ("UPDATE", {"max_weight": 9}),
                        ("DELETE", None)):
        resp = handler.handle(go_style(op, "p1", payload, 20101))
        assert resp.status is Status.ERROR and "in force under policy type 20100" in resp.reason
    assert book.resolver().for_cpe("c") == before and rec.saved["p1"].policy_type_id == 20100
    # Under its own type it goes as before.
    assert handler.handle(go_style("DELETE", "p1", None, 20100)).status is Status.DELETED
    assert handler.handle(go_style("CREATE", "p1", {"rules": [VOICE]}, 20101)
                          ).status is Status.OK


def test_delete_of_unknown_instance_is_idempotent(setup: Any) -> None:
    handler, _, _, _ = setup
    assert handler.handle(py_style("DELETE", "nope", None)).status is Status.DELETED


def test_combination_cpe_list_beats_all_and_latest_created_wins(setup: Any) -> None:
    handler, book, _, _ = setup
    ok = Status.OK
    assert handler.handle(go_style("CREATE", "all-old", {"max_weight": 10})).status is ok
    assert handler.handle(go_style("CREATE", "list-a", {
        "max_weight": 20, "scope": {"cpes": ["cpe-1", "cpe-2"]}})).status is ok
    assert handler.handle(go_style("CREATE", "all-new", {"max_weight": 30})).status is ok
    assert handler.handle(go_style("CREATE", "list-b", {
        "max_weight": 40, "scope": {"cpes": ["cpe-2"]}})).status is ok
    r = book.resolver()

    def w(cpe: str) -> tuple[int, str]:
        policy, source = r.for_cpe(cpe)
        return policy.max_weight, source

    assert w("cpe-1") == (20, "list-a")     # a list scope beats the newer all-CPE instance
    assert w("cpe-2") == (40, "list-b")     # the newest list naming the CPE wins
    assert w("cpe-3") == (30, "all-new")    # the newest all-CPE instance
    # An UPDATE keeps the instance's rank: all-old stays below all-new.
    assert handler.handle(go_style("UPDATE", "all-old", {"max_weight": 11})).status is ok
    assert book.resolver().for_cpe("cpe-3")[1] == "all-new"
    # Deleting the winner falls back to the next in rank.
    handler.handle(go_style("DELETE", "list-b", None))
    handler.handle(go_style("DELETE", "all-new", None))
    r = book.resolver()
    assert w("cpe-2") == (20, "list-a") and w("cpe-3") == (11, "all-old")
    # An empty CPE list means every CPE.
    handler.handle(go_style("CREATE", "empty", {"max_weight": 50, "scope": {"cpes": []}}))
    r = book.resolver()
    assert w("cpe-9") == (50, "empty") and w("cpe-1") == (20, "list-a")


def test_same_creation_time_ties_go_to_the_larger_instance_id() -> None:
    book = PolicyBook(DEFAULTS)
    book.put(PolicyInstance("b", {"max_weight": 2}, frozenset(), 5.0))
    book.put(PolicyInstance("a", {"max_weight": 1}, frozenset(), 5.0))
    assert book.resolver().for_cpe("x")[1] == "b"


def test_new_defaults_apply_to_instances_and_bad_defaults_are_refused() -> None:
    book = PolicyBook(DEFAULTS)
    book.put(PolicyInstance("p", {"max_weight": 7}, frozenset(), 1.0))
    book.set_default({**DEFAULTS, "hysteresis_pct": 9.0})
    assert book.resolver().for_cpe("x")[0].hysteresis_pct == 9.0
    with pytest.raises(ValueError):
        book.set_default({"max_weight": -1})
    assert book.resolver().for_cpe("x")[0].hysteresis_pct == 9.0


def test_parse_request_accepts_integer_instance_ids_and_lower_case_operations() -> None:
    req = parse_request({"operation": "create", "policy_type_id": 20100,
                         "policy_instance_id": 7, "payload": {}})
    assert req.policy_instance_id == "7" and req.operation.value == "CREATE"


def test_query_message() -> None:
    assert json.loads(query_message(20101)) == {"policy_type_id": 20101}
