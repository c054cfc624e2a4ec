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
])
def test_bad_policies_are_refused(doc: dict[str, Any], error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        Policy.from_dict(doc)
