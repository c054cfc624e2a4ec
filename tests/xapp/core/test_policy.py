"""Policy record: the JSON form round-trips and bad policies are refused with a reason."""

from __future__ import annotations

from typing import Any

import pytest

from xapp.core.policy import Policy, PolicyError, SteeringMode


def test_round_trip() -> None:
    p = Policy(mode=SteeringMode.LATENCY_BOUND, rtt_bound_ms=8.0, demand_mbps=200.0,
               min_share={"nr": 0.1}, max_share={"wifi": 0.9}, excluded=frozenset({"lte"}),
               hysteresis_pct=3.0)
    assert Policy.from_dict(p.to_dict()) == p


@pytest.mark.parametrize(("doc", "error"), [
    ({"mode": "fastest"}, "unknown steering mode"),
    ({"max_weight": 0}, "max_weight"),
    ({"max_weight": 256}, "max_weight"),
    ({"max_weight": 1.5}, "integer"),
    ({"wats": {"wimax": {"min_share": 0.1}}}, "unknown WAT"),
    ({"wats": {"nr": {"min_share": 1.5}}}, r"\[0, 1\]"),
    ({"wats": {"nr": {"min_share": 0.6}, "wifi": {"min_share": 0.6}}}, "add up"),
    ({"wats": {"nr": {"min_share": 0.6, "max_share": 0.5}}}, "exceeds"),
    ({"wats": {"nr": {"weight": 3}}}, "unknown keys"),
    ({"mode": "fixed_split"}, "split_pct"),
    ({"mode": "active_standby"}, "priority"),
    ({"mode": "latency_bound"}, "rtt_bound_ms"),
    ({"hysteresis_pct": -1}, "hysteresis_pct"),
    ({"update_period_s": 0}, "update_period_s"),
    ({"capacity_floor_mbps": float("nan")}, "finite"),
    ({"colour": "blue"}, "unknown policy keys"),
    ({"directions": []}, "'directions' must be an object"),
    ({"directions": {"both": {}}}, r"unknown direction \['both'\]"),
    ({"directions": {"dl": 3}}, "directions.dl must be an object"),
    ({"directions": {"dl": {"update_period_s": 2}}}, "cannot be set per direction"),
    ({"directions": {"ul": {"scope": {}}}}, "cannot be set per direction"),
    ({"directions": {"dl": {"directions": {}}}}, "cannot be set per direction"),
    ({"directions": {"dl": {"max_weight": 0}}}, "directions.dl: max_weight"),
    ({"directions": {"ul": {"mode": "latency_bound"}}}, "directions.ul: latency_bound needs"),
    ({"directions": {"dl": {"wats": {"nr": {"min_share": 0.9}, "lte": {"min_share": 0.9}}}}},
     "directions.dl: min_share values add up"),
    # Issue 33: no WAT could ever carry traffic.
    ({"excluded_wats": ["nr", "lte", "wifi", "lifi"]}, "excludes every WAT"),
    ({"directions": {"dl": {"excluded_wats": ["nr", "lte", "wifi", "lifi"]}}},
     "directions.dl: excluded_wats excludes every WAT"),
    ({"excluded_wats": ["lte", "lifi"], "directions": {"ul": {"excluded_wats": [
        "lifi", "wifi", "nr", "lte", "nr"]}}}, "directions.ul: excluded_wats excludes every"),
    ({"mode": "fixed_split", "wats": {"nr": {"split_pct": 100}}, "excluded_wats": ["nr"]},
     "fixed_split: every WAT with split_pct > 0 is in excluded_wats"),
    ({"mode": "active_standby", "priority": ["nr"],
      "directions": {"dl": {"excluded_wats": ["nr"]}}},
     "directions.dl: active_standby: every WAT of the priority list is in excluded_wats"),
    # Issue 35: the new modes, thresholds and the knob of urgent classes.
    ({"mode": "priority"}, "priority needs a priority list"),
    ({"mode": "priority", "priority": ["lte"], "excluded_wats": ["lte"]},
     "priority: every WAT of the priority list is in excluded_wats"),
    ({"mode": "redundant"}, "redundant is refused: mainline Linux MPTCP has no scheduler"),
    ({"rtt_max_ms": 0}, "rtt_max_ms must be > 0"),
    ({"loss_max_pct": 101}, r"loss_max_pct must be in \[0, 100\]"),
    ({"wats": {"nr": {"rtt_max_ms": -1}}}, "wats.nr.rtt_max_ms must be > 0"),
    ({"wats": {"nr": {"loss_max_pct": -0.5}}}, "wats.nr.loss_max_pct must be in"),
    ({"directions": {"dl": {"loss_max_pct": 200}}}, "directions.dl: loss_max_pct"),
    ({"urgent_cap_fraction": 0.2}, "urgent_cap_fraction must be in"),
    ({"directions": {"ul": {"urgent_cap_fraction": 0.8}}}, "cannot be set per direction"),
])
def test_bad_policies_are_refused(doc: dict[str, Any], error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        Policy.from_dict(doc)


def test_direction_overrides_merge_over_the_policy_and_round_trip() -> None:
    doc = {"mode": "load_balancing", "hysteresis_pct": 4.0, "excluded_wats": ["lte"],
           "wats": {"wifi": {"max_share": 0.8}},
           "directions": {"dl": {"excluded_wats": [], "capacity_floor_mbps": 5.0},
                          "ul": {"mode": "active_standby", "priority": ["nr", "wifi"]}}}
    p = Policy.from_dict(doc)
    dl, ul = p.for_direction("dl"), p.for_direction("ul")
    # Key by key over the policy's own keys; keys an override leaves out stay.
    assert dl.excluded == frozenset() and dl.capacity_floor_mbps == 5.0
    assert dl.hysteresis_pct == 4.0 and dl.max_share == {"wifi": 0.8}
    assert ul.mode is SteeringMode.ACTIVE_STANDBY and ul.priority == ("nr", "wifi")
    assert ul.excluded == frozenset({"lte"}) and ul.capacity_floor_mbps == 0.0
    assert dl.for_direction("dl") is dl and not dl.overrides
    # Without an override a direction is the policy itself (the same object: cheap to compare).
    q = Policy.from_dict({"directions": {"dl": {"max_weight": 20}}})
    assert q.for_direction("ul") is q and q.for_direction("dl").max_weight == 20
    plain = Policy()
    assert plain.for_direction("dl") is plain and plain.for_direction("ul") is plain
    back = Policy.from_dict(p.to_dict())
    assert back == p and back.for_direction("ul") == ul and back.for_direction("dl") == dl
    # Policies with different overrides differ (a change of overrides is a policy change).
    assert p != Policy.from_dict({**doc, "directions": {"dl": {"excluded_wats": []}}})


def test_thresholds_and_new_modes_round_trip() -> None:
    doc = {"mode": "priority", "priority": ["wifi", "nr"], "demand_mbps": 20.0,
           "rtt_max_ms": 50.0, "loss_max_pct": 2.0, "urgent_cap_fraction": 0.8,
           "wats": {"nr": {"rtt_max_ms": 80.0, "loss_max_pct": 5.0, "min_share": 0.1}},
           "directions": {"dl": {"mode": "smallest_delay", "rtt_max_ms": 30.0}}}
    p = Policy.from_dict(doc)
    assert p.mode is SteeringMode.PRIORITY and p.urgent_cap_fraction == 0.8
    assert (p.rtt_threshold("nr"), p.rtt_threshold("wifi")) == (80.0, 50.0)
    assert (p.loss_threshold("nr"), p.loss_threshold("lte")) == (5.0, 2.0)
    dl = p.for_direction("dl")
    assert dl.mode is SteeringMode.SMALLEST_DELAY and dl.rtt_threshold("wifi") == 30.0
    assert dl.rtt_threshold("nr") == 80.0  # the per-WAT value stays over the direction's
    assert Policy.from_dict(p.to_dict()) == p
    assert not Policy().has_thresholds and p.has_thresholds


def test_a_policy_without_the_new_keys_writes_none_of_them() -> None:
    # A 20100 policy's document stays a 20100 document (the chart and SDL keep it as it was).
    assert not {"rules", "rtt_max_ms", "loss_max_pct", "urgent_cap_fraction"} & set(
        Policy.from_dict({"mode": "latency_bound", "rtt_bound_ms": 5.0}).to_dict())
