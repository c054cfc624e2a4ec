"""Traffic classes (issue 35): each rule decided from the loop's forecasts, sent only to
appliers that take them, urgent classes capping their WATs, all in valid messages."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from xapp.adapters.lab import MemoryPublisher, NullSink
from xapp.adapters.mqtt.payloads import check, encode
from xapp.adapters.sdl import SdlStateStore
from xapp.app.endpoints import cpes_document
from xapp.app.metrics import Metrics
from xapp.core.caps import CAP_MAX_MBPS
from xapp.core.class_columns import ClassColumns
from xapp.core.classes import FALLBACK, decide_classes, specs_of, urgent_caps
from xapp.core.decisions import Inputs, decide_batch
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.loop import ControlLoop, LoopSettings, TickReport
from xapp.core.policy import KNOWN_WATS, Policy, PolicyError
from xapp.core.policy_book import PolicyBook
from xapp.core.traffic import MESSAGE_BYTES_MAX

NAN = math.nan
# KNOWN_WATS: nr, lte, wifi, lifi.
VOICE = {"name": "voice", "match": {"protocols": ["udp"], "destination_ports": [[5060, 5061]]},
         "mode": "smallest_delay", "urgent": True}
VIDEO = {"name": "video", "match": {"dscp": [34]}, "mode": "priority",
         "priority": ["nr", "wifi"], "demand_mbps": 25}
APP = {"name": "app", "match": {"cgroup": "/robot.slice"}, "mode": "active_standby",
       "priority": ["wifi", "nr"]}
RULES = {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
         "rules": [VOICE, VIDEO, APP]}


class Kpis:
    """Rows per (cpe, wat, direction): capacity as delivered_mbps, RTT, retransmissions."""

    def __init__(self, rows: dict[tuple[str, str, str], tuple[float, float, float]]) -> None:
        self.rows = rows

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        keys = sorted(self.rows)
        col = np.array([self.rows[k] for k in keys]).reshape(-1, 3)
        return KpiFrame(time_s=now_s, cpe=np.array([k[0] for k in keys], dtype=np.str_),
                        wat=np.array([k[1] for k in keys], dtype=np.str_),
                        direction=np.array([k[2] for k in keys], dtype="<U2"),
                        values={"delivered_mbps": col[:, 0], "rtt_ms": col[:, 1],
                                "retrans_pct": col[:, 2], "up": np.ones(len(keys))})


class Exact:
    def step(self, frame: KpiFrame) -> CapacityForecast:
        d = frame.column("delivered_mbps")
        return CapacityForecast(median_mbps=d, lower_mbps=d)


class Semantics:
    def __init__(self) -> None:
        self.capped: dict[str, set[str]] = {"ul": set(), "dl": set()}
        self.room: dict[str, dict[str, int]] = {"ul": {}, "dl": {}}

    def rate_caps(self, direction: str) -> set[str]:
        return self.capped[direction]

    def max_classes(self, direction: str) -> dict[str, int]:
        return self.room[direction]


def _rows(cpes: list[str], nr: tuple[float, float, float] = (20.0, 30.0, 0.0),
          wifi: tuple[float, float, float] = (40.0, 8.0, 0.0)
          ) -> dict[tuple[str, str, str], tuple[float, float, float]]:
    return {(c, w, d): v for c in cpes for d in ("dl", "ul") for w, v in (("nr", nr),
                                                                          ("wifi", wifi))}


def _loop(kpis: Kpis, pub: MemoryPublisher, sem: Semantics, policy: dict[str, Any],
          state: SdlStateStore | None = None, book: PolicyBook | None = None) -> ControlLoop:
    return ControlLoop(kpis, Exact(), pub, NullSink(), (book or PolicyBook(policy)).resolver,
                       state or SdlStateStore(), settings=LoopSettings(lease_s=30.0),
                       semantics=sem)


def _tick(loop: ControlLoop, pub: MemoryPublisher, t: float) -> dict[str, dict[str, Any]]:
    loop.tick(t)
    docs = {d["cpe_id"]: d for d in pub.take()}
    for doc in docs.values():
        check("weights", doc)  # every message validates against the schema
    return docs


def test_classes_go_to_appliers_that_take_them_and_are_withheld_from_the_others() -> None:
    sem = Semantics()
    sem.room = {"ul": {"a": 8, "b": 2}, "dl": {"a": 2}}
    pub = MemoryPublisher(clock=lambda: 0.0)
    reports: list[TickReport] = []
    loop = _loop(Kpis(_rows(["a", "b", "c"])), pub, sem, RULES)
    loop.on_tick = reports.append
    docs = _tick(loop, pub, 100.0)
    a = docs["a"]
    # The uplink has the three rules; the downlink two (a cgroup is the CPE's alone).
    assert [c["name"] for c in a["ul"]["classes"]] == ["voice", "video", "app"]
    assert [c["name"] for c in a["dl"]["classes"]] == ["voice", "video"]
    voice, video, app = a["ul"]["classes"]
    # voice: the WAT with the smallest RTT (wifi 8 ms against nr 30 ms), urgent.
    assert voice["weights"] == {"nr": 0, "wifi": 100} and voice["urgent"] is True
    assert voice["match"] == {"protocols": [17], "remote_ports": [[5060, 5061]]}
    assert voice["reason"] == "smallest_delay:wifi" and voice["mode"] == "smallest_delay"
    # video: nr first, filled to its 20 Mbit/s; the 5 left of its 25 overflow to wifi.
    assert video["weights"] == {"nr": 100, "wifi": 25} and "urgent" not in video
    assert app["weights"] == {"nr": 0, "wifi": 100} and app["match"] == {
        "cgroup": "/robot.slice"}
    # The default rule: the direction's own set, load balancing.
    assert a["ul"]["weights"] == {"nr": 50, "wifi": 100} and a["ul"]["mode"] == "load_balancing"
    # b's agent takes 2 classes, the policy has 3: the default rule alone, and it says so.
    assert "classes" not in docs["b"]["ul"]
    assert "classes withheld: the applier takes 2, the policy has 3" in docs["b"]["ul"]["reason"]
    # c's agent takes none (from before classes): the message is as it always was.
    assert "classes" not in docs["c"]["ul"] and "classes" not in docs["c"]["dl"]
    assert reports[-1].classes_withheld == 4  # b ul, b dl, c ul, c dl
    # Visible to the operator: the counter, and the reason in /ric/v1/cpes.
    metrics = Metrics()
    metrics.record_tick(reports[-1])
    assert b"mcw_classes_withheld_total 4.0" in metrics.exposition()
    view = cpes_document(loop.state.cpes(), {}, {}, lambda _d: None)["cpes"]
    assert "classes withheld" in view["b"]["published"]["ul"]["reason"]
    assert [c["name"] for c in view["a"]["published"]["ul"]["classes"]] == ["voice", "video",
                                                                            "app"]
    assert "classes" not in view["b"]["published"]["ul"]
    # No caps: nobody is rate-caps.
    assert all("caps_mbps" not in c for c in a["ul"]["classes"])


def test_urgent_classes_cap_their_wat_under_the_forecast_on_rate_caps_appliers() -> None:
    sem = Semantics()
    sem.room = {"ul": {"a": 8}, "dl": {}}
    sem.capped["ul"] = {"a"}
    pub = MemoryPublisher(clock=lambda: 0.0)
    doc = _tick(_loop(Kpis(_rows(["a"])), pub, sem, {**RULES, "urgent_cap_fraction": 0.8}),
                pub, 100.0)["a"]
    ul = doc["ul"]
    # wifi carries the urgent class: the direction's cap (the WAT's total) at 0.8 x 40; nr
    # stays uncapped (load balancing).
    assert ul["caps_mbps"] == {"nr": CAP_MAX_MBPS, "wifi": 32.0}
    voice, video, app = ul["classes"]
    # Classes name their ceilings explicitly: uncapped where their rule asks for no split.
    assert voice["caps_mbps"] == {"wifi": CAP_MAX_MBPS}
    assert app["caps_mbps"] == {"wifi": CAP_MAX_MBPS}
    # video's split (20 on nr, 5 on wifi): nr sets the total, wifi 1.15 x 5.
    assert video["caps_mbps"] == {"nr": CAP_MAX_MBPS, "wifi": pytest.approx(5.75, abs=1e-3)}
    assert "caps_mbps" not in doc["dl"]


def test_an_urgent_class_on_a_wat_the_default_rule_leaves_caps_the_other_classes() -> None:
    specs = specs_of(Policy.from_dict({"rules": [VOICE, VIDEO]}).classes_for("ul"))
    classes = ClassColumns.empty(1, 4)
    classes.specs[0] = specs
    classes.weights[0, 0] = [0, 0, 100, 0]  # voice on wifi
    classes.weights[0, 1] = [100, 0, 25, 0]  # video on nr and wifi
    classes.caps[0, :2] = CAP_MAX_MBPS
    weights = np.array([[100, 0, 0, 0]])  # the default rule leaves wifi
    caps = np.array([[CAP_MAX_MBPS, NAN, NAN, NAN]])
    urgent_caps(specs, classes, weights, caps, np.array([[20.0, 0.0, 40.0, 0.0]]), 0.9,
                np.array([True]))
    assert caps.tolist() == [[CAP_MAX_MBPS, NAN, NAN, NAN]] or np.isnan(caps[0, 1:]).all()
    assert classes.caps[0, 1].tolist()[2] == 36.0  # video, not urgent, held under wifi
    assert classes.caps[0, 0, 2] == CAP_MAX_MBPS  # voice itself is not


def test_thresholds_read_the_retransmissions_and_a_class_with_nothing_left_falls_back() -> None:
    policy = Policy.from_dict({"rules": [
        {"name": "clean", "match": {"dscp": [10]}, "loss_max_pct": 2.0},
        {"name": "lte-only", "match": {"dscp": [12]}, "mode": "active_standby",
         "priority": ["lte"]}]})
    rules = policy.classes_for("ul")
    cap = np.array([[20.0, 0.0, 40.0, 0.0], [20.0, 0.0, 40.0, 0.0]])
    present = np.array([[True, False, True, False]] * 2)
    x = Inputs(cap, cap, present, present, np.full((2, 4), NAN),
               np.array([[0.5, NAN, 5.0, NAN], [0.5, NAN, NAN, NAN]]))
    default = np.array([[50, 0, 100, 0], [50, 0, 100, 0]])
    out = decide_classes(KNOWN_WATS, rules, specs_of(rules), decide_batch, x, default,
                         ClassColumns.empty(2, 4), present, np.zeros(2, dtype=bool), None, 1.15)
    # Row 0: wifi retransmits 5 % (over 2 %): the class leaves it.  Row 1: no loss known.
    assert out.weights[0, 0].tolist() == [100, 0, 0, 0]
    assert out.reasons[0, 0] == "load_balancing+over_threshold:wifi"
    assert out.weights[1, 0].tolist() == [50, 0, 100, 0]
    # lte-only: the CPE has no LTE: the default rule's weights.
    assert out.weights[:, 1].tolist() == default.tolist()
    assert out.reasons[0, 1] == FALLBACK


def test_classes_hold_by_hysteresis_and_go_when_they_change() -> None:
    sem = Semantics()
    sem.room = {"ul": {"a": 8}, "dl": {"a": 8}}
    kpis = Kpis(_rows(["a"]))
    pub = MemoryPublisher(clock=lambda: 0.0)
    loop = _loop(kpis, pub, sem, RULES)
    assert _tick(loop, pub, 100.0)
    # Nothing changed: nothing sent.
    assert _tick(loop, pub, 101.0) == {}
    # nr's RTT falls under wifi's: voice moves to nr (a usability change is no hysteresis
    # matter; the smallest delay is a different WAT), the default rule stays.
    for d in ("dl", "ul"):
        kpis.rows[("a", "nr", d)] = (20.0, 5.0, 0.0)
    doc = _tick(loop, pub, 102.0)["a"]
    assert doc["ul"]["classes"][0]["weights"] == {"nr": 100, "wifi": 0}
    assert doc["ul"]["weights"] == {"nr": 50, "wifi": 100}


def test_classes_leave_with_the_rules_or_the_capability_and_survive_a_restart() -> None:
    sem = Semantics()
    sem.room = {"ul": {"a": 8}, "dl": {}}
    kpis = Kpis(_rows(["a"]))
    state = SdlStateStore()
    book = PolicyBook(RULES)
    pub = MemoryPublisher(clock=lambda: 0.0)
    first = _tick(_loop(kpis, pub, sem, RULES, state, book), pub, 100.0)["a"]
    assert len(first["ul"]["classes"]) == 3
    record = state.cpe("a")
    assert record is not None and [c.name for c in record.ul.classes] == ["voice", "video",
                                                                           "app"]
    # A restart over the same store: the classes in force are restored, nothing to send;
    # half a lease later they ride the refresh.
    again = _loop(kpis, pub, sem, {**RULES, "update_period_s": 60.0}, state)
    assert _tick(again, pub, 101.0) == {}
    refreshed = _tick(again, pub, 116.0)["a"]
    assert refreshed["ul"]["classes"] == first["ul"]["classes"]
    # The agent is replaced by one from before classes: the next set goes without them.
    loop = _loop(kpis, pub, sem, RULES, state, book)
    loop.tick(117.0)
    pub.take()
    sem.room["ul"] = {}
    doc = _tick(loop, pub, 118.0)["a"]
    assert "classes" not in doc["ul"] and "withheld" in doc["ul"]["reason"]
    # Rules removed: the classes in force go (with an applier that takes them again).
    sem.room["ul"] = {"a": 8}
    assert "classes" in _tick(loop, pub, 119.0)["a"]["ul"]
    book.set_default({k: v for k, v in RULES.items() if k != "rules"})
    doc = _tick(loop, pub, 120.0)["a"]
    assert "classes" not in doc["ul"] and "withheld" not in doc["ul"]["reason"]


def test_a_changed_rule_is_decided_afresh_even_where_the_direction_has_an_override() -> None:
    """A direction's own policy (with an override) leaves the rules out: a rule that changes
    is still a change for its classes, not held by hysteresis against the old rule's weights."""
    def policy(split: float) -> dict[str, Any]:
        return {"mode": "load_balancing", "hysteresis_pct": 50.0,
                "directions": {"ul": {"capacity_floor_mbps": 0.5}},
                "rules": [{"name": "cam", "match": {"dscp": [34]}, "mode": "fixed_split",
                           "wats": {"nr": {"split_pct": split}, "wifi": {"split_pct": 100}}}]}
    sem = Semantics()
    sem.room = {"ul": {"a": 8}, "dl": {"a": 8}}
    kpis = Kpis(_rows(["a"]))
    book = PolicyBook(policy(10.0))
    pub = MemoryPublisher(clock=lambda: 0.0)
    loop = _loop(kpis, pub, sem, policy(10.0), book=book)
    first = _tick(loop, pub, 100.0)["a"]
    assert first["ul"]["classes"][0]["weights"] == {"nr": 10, "wifi": 100}
    # The operator moves the camera's split to 30/100: the aggregate would hardly move (it is
    # no measure of a fixed split), so only the change of rule can send the new weights.
    book.set_default(policy(30.0))
    doc = _tick(loop, pub, 101.0)["a"]
    assert doc["ul"]["classes"][0]["weights"] == {"nr": 30, "wifi": 100}
    assert doc["dl"]["classes"][0]["weights"] == {"nr": 30, "wifi": 100}


def test_the_largest_policy_accepted_makes_messages_the_channel_carries() -> None:
    """The A1 check bounds a message from above: rules as wide as it lets through, on a
    rate-caps agent (caps on every class and WAT), stay under the broker's packet size."""
    wide = {"destination_prefixes": [f"2001:db8:{j:x}:ffff::/64" for j in range(16)],
            "destination_ports": [[10000 + j, 20000 + j] for j in range(16)],
            "dscp": list(range(20)), "protocols": ["tcp", "udp", "sctp", "icmp", 41, 47, 50, 51]}
    rules: list[dict[str, Any]] = []
    while True:
        rule = {"name": f"class-number-{len(rules):02d}-with-a-long-name"[:32], "match": wide,
                "mode": "fixed_split", "urgent": True,
                "wats": {"nr": {"split_pct": 33.3}, "wifi": {"split_pct": 66.7}}}
        try:
            Policy.from_dict({"rules": [*rules, rule]})
        except PolicyError:
            break
        rules.append(rule)
    assert 1 <= len(rules) < 8
    sem = Semantics()
    sem.room = {"ul": {"a": 8}, "dl": {"a": 8}}
    sem.capped = {"ul": {"a"}, "dl": {"a"}}
    pub = MemoryPublisher(clock=lambda: 0.0)
    loop = _loop(Kpis(_rows(["a"])), pub, sem, {"mode": "fixed_split", "rules": rules,
                                                "wats": {"nr": {"split_pct": 10}}})
    (doc,) = _tick(loop, pub, 100.0).values()
    # encode() is byte-identical to what went to the broker (the encoder's own tests).
    assert len(encode(doc)) <= MESSAGE_BYTES_MAX
    assert len(doc["ul"]["classes"]) == len(rules) and "caps_mbps" in doc["ul"]["classes"][0]


def test_a_direction_decided_from_the_others_forecasts_has_its_own_classes_and_no_caps() -> None:
    # Only uplink rows: the downlink is decided under its own policy from the uplink's
    # forecasts; its classes are the downlink's (no cgroup rule), with no caps (they would be
    # the uplink's).
    sem = Semantics()
    sem.room = {"ul": {"a": 8}, "dl": {"a": 8}}
    sem.capped = {"ul": {"a"}, "dl": {"a"}}
    kpis = Kpis({k: v for k, v in _rows(["a"]).items() if k[2] == "ul"})
    pub = MemoryPublisher(clock=lambda: 0.0)
    doc = _tick(_loop(kpis, pub, sem, RULES), pub, 100.0)["a"]
    assert doc["dl"]["reason"].startswith("follows ul")
    assert [c["name"] for c in doc["dl"]["classes"]] == ["voice", "video"]
    assert all("caps_mbps" not in c for c in doc["dl"]["classes"])
    assert "caps_mbps" not in doc["dl"]
    assert [c["name"] for c in doc["ul"]["classes"]] == ["voice", "video", "app"]
    assert all("caps_mbps" in c for c in doc["ul"]["classes"])
