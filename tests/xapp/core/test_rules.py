"""Rules of a policy (issue 35): traffic descriptors, per-direction classes, refusals."""

from __future__ import annotations

from typing import Any

import pytest

from xapp.core.policy import Policy, PolicyError, SteeringMode
from xapp.core.traffic import ClassSet, MatchError, TrafficMatch

VOICE = {"name": "voice",
         "match": {"protocols": ["udp"], "destination_ports": [5060, [10000, 20000]],
                   "dscp": [46]},
         "mode": "smallest_delay", "rtt_max_ms": 60, "urgent": True}
VIDEO = {"name": "video", "match": {"destination_prefixes": ["2001:db8::/32", "198.51.100.0/24"]},
         "mode": "priority", "priority": ["wifi", "nr"], "demand_mbps": 8}
APP = {"name": "robot-ctl", "match": {"cgroup": "/system.slice/robot.service"},
       "mode": "active_standby", "priority": ["nr", "wifi"]}


def test_a_match_in_a1_form_and_on_the_wire() -> None:
    m = TrafficMatch.from_dict({"dscp": [46, 34], "protocols": ["tcp", 17, "sctp"],
                                "destination_ports": [443, [8000, 8080]],
                                "destination_prefixes": ["10.1.0.0/16", "2001:DB8::/32"],
                                "cgroup": "/app.slice"})
    assert m.protocols == (6, 17, 132) and m.ports == ((443, 443), (8000, 8080))
    assert m.prefixes == ("10.1.0.0/16", "2001:db8::/32")
    assert m.wire() == {"dscp": [46, 34], "protocols": [6, 17, 132],
                        "remote_ports": [[443, 443], [8000, 8080]],
                        "remote_prefixes": ["10.1.0.0/16", "2001:db8::/32"],
                        "cgroup": "/app.slice"}
    assert TrafficMatch.from_dict(m.to_dict()) == m
    stored = ClassSet("x", m, "priority", {"nr": 3}, "r", {"nr": 2.5}, True)
    assert ClassSet.from_dict(stored.to_dict()) == stored


@pytest.mark.parametrize(("doc", "error"), [
    ({}, "match is empty"),
    ([], "must be an object"),
    ({"ports": [80]}, "unknown keys"),
    ({"dscp": [64]}, "not an integer in 0..63"),
    ({"dscp": [10, 10]}, "twice"),
    ({"dscp": []}, "match is empty"),
    ({"protocols": ["quic"]}, "unknown protocol 'quic'"),
    ({"protocols": ["UDP"]}, "unknown protocol 'UDP'"),  # as the schema: names in lower case
    ({"protocols": [256]}, "0..255"),
    ({"protocols": ["tcp", 6]}, "twice"),
    ({"destination_ports": [[2000, 1000]]}, r"range \[2000, 1000\] runs backwards"),
    ({"destination_ports": [0]}, "1..65535"),
    ({"destination_ports": [[1, 2, 3]]}, "a range is"),
    ({"destination_ports": [True]}, "not an integer"),
    ({"destination_prefixes": ["10.0.0.1/8"]}, "host bits set"),
    ({"destination_prefixes": ["example.org"]}, "not a CIDR prefix"),
    ({"destination_prefixes": ["10.0.0.0/8", "10.0.0.0/8"]}, "twice"),
    ({"destination_prefixes": [f"10.{i}.0.0/16" for i in range(17)]}, "at most 16"),
    ({"cgroup": "app.slice"}, "not a cgroup v2 path"),
    ({"cgroup": "/a b"}, "not a cgroup v2 path"),
])
def test_bad_matches_are_refused(doc: Any, error: str) -> None:
    with pytest.raises(MatchError, match=error):
        TrafficMatch.from_dict(doc)


def test_rules_become_classes_per_direction() -> None:
    p = Policy.from_dict({"excluded_wats": ["lte"], "hysteresis_pct": 3.0,
                          "directions": {"dl": {"excluded_wats": ["lifi"]}},
                          "rules": [VOICE, VIDEO, APP]})
    ul = p.classes_for("ul")
    assert [c.name for c in ul] == ["voice", "video", "robot-ctl"]
    voice = ul[0]
    assert voice.urgent and voice.policy.mode is SteeringMode.SMALLEST_DELAY
    assert voice.policy.rtt_max_ms == 60.0
    # Keys a rule leaves out are the policy's as the direction has them.
    assert voice.policy.excluded == frozenset({"lte"}) and voice.policy.hysteresis_pct == 3.0
    # A cgroup identifies a CPE application: the downlink has no such class.
    dl = p.classes_for("dl")
    assert [c.name for c in dl] == ["voice", "video"]
    assert dl[1].policy.excluded == frozenset({"lifi"})
    assert dl[1].policy.priority == ("wifi", "nr") and dl[1].policy.demand_mbps == 8.0
    assert not dl[1].urgent
    # The default rule (the policy's own steering) has no classes and the round trip keeps all.
    assert not p.for_direction("dl").classes_for("dl")
    back = Policy.from_dict(p.to_dict())
    assert back == p and back.classes_for("ul") == ul
    assert Policy().classes_for("ul") == ()


def test_a_rule_overrides_per_direction() -> None:
    rule = {**APP, "directions": {
        "dl": {"match": {"destination_ports": [[30000, 30100]]}, "mode": "load_balancing",
               "urgent": True},
        "ul": {"rtt_max_ms": 40}}}
    p = Policy.from_dict({"rules": [rule]})
    (dl,), (ul,) = p.classes_for("dl"), p.classes_for("ul")
    assert dl.match.ports == ((30000, 30100),) and dl.urgent
    assert dl.policy.mode is SteeringMode.LOAD_BALANCING
    assert ul.match.cgroup == "/system.slice/robot.service" and not ul.urgent
    assert ul.policy.mode is SteeringMode.ACTIVE_STANDBY and ul.policy.rtt_max_ms == 40.0
    assert Policy.from_dict(p.to_dict()) == p


def _rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"rules": list(rules)}


@pytest.mark.parametrize(("doc", "error"), [
    ({"rules": {}}, "must be a list"),
    (_rules(*({**VOICE, "name": f"r{i}"} for i in range(9))), "at most 8 rules"),
    (_rules(VOICE, {**VIDEO, "name": "voice"}), "the name 'voice' is used twice"),
    (_rules({**VOICE, "name": "Voice"}), "name 'Voice' must be"),
    (_rules({**VOICE, "name": ""}), "name '' must be"),
    (_rules({k: v for k, v in VOICE.items() if k != "match"}), r"rules\[0\] \(voice\): a rule "
                                                               "needs a match"),
    (_rules({**VOICE, "match": {}}), r"rules\[0\] \(voice\): match is empty"),
    (_rules({**VOICE, "match": {"destination_ports": [[9, 1]]}}), "runs backwards"),
    (_rules({**VOICE, "match": {"destination_prefixes": ["300.1.1.0/24"]}}),
     "not a CIDR prefix"),
    (_rules({**VOICE, "urgent": "yes"}), "urgent must be true or false"),
    (_rules({**VIDEO, "priority": ["wifi", "5g"]}), r"rules\[0\] \(video\): dl: .*unknown WAT"),
    (_rules({**VIDEO, "excluded_wats": ["satellite"]}), "unknown WAT"),
    (_rules({**VIDEO, "mode": "redundant"}), "redundant is refused"),
    (_rules({**VIDEO, "mode": "warp"}), "unknown steering mode"),
    (_rules({**VIDEO, "update_period_s": 2}), r"keys \['update_period_s'\] cannot be set in a "
                                              "rule"),
    (_rules({**VIDEO, "rules": []}), "cannot be set in a rule"),
    (_rules({**VIDEO, "scope": {}}), "cannot be set in a rule"),
    (_rules({**VIDEO, "directions": {"both": {}}}), "unknown direction"),
    (_rules({**VIDEO, "directions": {"dl": 1}}), "directions.dl must be an object"),
    (_rules({**VIDEO, "directions": {"dl": {"match": {"cgroup": "/a"}}}}),
     "directions.dl: match.cgroup cannot apply to the downlink"),
    (_rules({**VIDEO, "directions": {"ul": {"match": {}}}}), "directions.ul: match is empty"),
    (_rules({**VIDEO, "directions": {"ul": {"mode": "fixed_split"}}}),
     "ul: fixed_split needs split_pct"),
    (_rules({**VIDEO, "directions": {"ul": {"urgent": 1}}}), "urgent must be true or false"),
    (_rules({**VIDEO, "directions": {"dl": {"name": "x"}}}), "cannot be set in a rule"),
    (_rules({**VIDEO, "rtt_max_ms": -5}), "rtt_max_ms must be > 0"),
])
def test_bad_rules_are_refused(doc: dict[str, Any], error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        Policy.from_dict(doc)


def test_rules_of_the_default_policy_reach_an_instance_that_names_none() -> None:
    # Keys an instance leaves out take the default policy's: rules too (policy_book's rule).
    base = Policy.from_dict({"rules": [VOICE]})
    over = Policy.from_dict({**base.to_dict(), "max_weight": 50})
    assert [c.name for c in over.classes_for("ul")] == ["voice"]
    assert over.classes_for("ul")[0].policy.max_weight == 50


def test_rules_that_could_not_go_in_one_message_are_refused() -> None:
    wide = {"destination_prefixes": [f"2001:db8:{j}::/48" for j in range(16)],
            "destination_ports": [[1000 + j, 2000 + j] for j in range(16)]}
    rules = [{"name": f"r{i}", "match": wide} for i in range(8)]
    with pytest.raises(PolicyError, match="more than the 16128 the channel carries"):
        Policy.from_dict({"rules": rules})
    # A cgroup rule has no downlink class: the same rules fit when half of them are the CPE's.
    half = [{**r, "match": {**wide, "cgroup": "/a.slice"}} if i % 2 else r
            for i, r in enumerate(rules[:6])]
    assert len(Policy.from_dict({"rules": half}).classes_for("dl")) == 3
