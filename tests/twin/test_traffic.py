"""Flows and what a class's match sees of them (twin.traffic)."""

from __future__ import annotations

import math

import pytest

from twin.traffic import CONTROL_MBPS, MIXES, Flow, Traffic, TrafficError, leaf_of, mix
from xapp.core.traffic import ClassSet, TrafficMatch

CONTROL = Flow("control", CONTROL_MBPS, port=5302, dscp=46, server="10.20.1.2",
               cgroup="/system.slice/robot.service")


def test_the_control_loop_is_200_bytes_each_way_every_10_ms() -> None:
    assert pytest.approx(0.16) == CONTROL_MBPS
    control, bulk = MIXES["control-bulk"].flows
    assert (control.port, control.demand_mbps, bulk.port) == (5302, CONTROL_MBPS, 5301)
    assert bulk.backlogged and not control.backlogged
    assert mix("bulk").flows[0].backlogged


@pytest.mark.parametrize(("match", "ul", "dl"), [
    (TrafficMatch(ports=((5300, 5310),)), True, True),
    (TrafficMatch(ports=((5301, 5301), (1, 2))), False, False),
    (TrafficMatch(protocols=(6,)), True, True),
    (TrafficMatch(protocols=(17,), ports=((5302, 5302),)), False, False),  # every key
    (TrafficMatch(dscp=(34, 46)), True, True),
    (TrafficMatch(prefixes=("10.20.0.0/16",)), True, True),
    (TrafficMatch(prefixes=("10.21.0.0/16", "2001:db8::/32")), False, False),
    # A cgroup is the CPE's: its own and the ones below it, on the uplink only.
    (TrafficMatch(cgroup="/system.slice/robot.service"), True, False),
    (TrafficMatch(cgroup="/system.slice"), True, False),
    (TrafficMatch(cgroup="/system.slice/robot"), False, False),
])
def test_meets(match: TrafficMatch, ul: bool, dl: bool) -> None:
    assert CONTROL.meets(match, "ul") is ul
    assert CONTROL.meets(match, "dl") is dl


def test_leaf_of_is_the_first_class_met() -> None:
    def cls(name: str, match: TrafficMatch) -> ClassSet:
        return ClassSet(name, match, "load_balancing", {"nr": 1})

    classes = (cls("udp", TrafficMatch(protocols=(17,))), cls("ef", TrafficMatch(dscp=(46,))),
               cls("tcp", TrafficMatch(protocols=(6,))))
    assert leaf_of(CONTROL, classes, "ul") == 2
    assert leaf_of(CONTROL, classes[:1], "ul") == 0  # the default rule's


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Flow("x", 0.0), "demand_mbps"),
    (lambda: Flow("x", 1.0, port=70000), "port"),
    (lambda: Flow("x", 1.0, server="nowhere"), "not an IP address"),
    (lambda: Traffic(()), "at least one flow"),
    (lambda: Traffic((Flow("a", 1.0), Flow("a", math.inf))), "own name"),
    (lambda: Traffic((Flow("a", 1.0),)), "backlogged"),
    (lambda: Traffic((Flow("a", math.inf),), buffer_ms=0.0), "buffer_ms"),
    (lambda: mix("voip"), "unknown traffic"),
])
def test_refused(make, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TrafficError, match=match):
        make()
