"""The rate-caps agent's traffic classes as a fluid model (twin.class_queues)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from twin.class_queues import (
    LEAF_QUEUE_MIN_MBIT,
    LEAF_QUEUE_S,
    QUANTUM_MBIT,
    Applied,
    Shares,
    share,
    water_fill,
)
from twin.rate_caps import HTB_FLOOR_MBPS, agent_caps, deliver_caps
from twin.traffic import BULK_ALONE, CONTROL_MBPS, MIXES, Flow
from xapp.core.traffic import ClassSet, TrafficMatch

INF = math.inf
WATS = ("nr", "wifi", "lifi")
FLOWS = MIXES["control-bulk"].flows  # control (port 5302), bulk (port 5301)
CONTROL = TrafficMatch(ports=((5302, 5302),))
BUFFER = 50.0


@pytest.mark.parametrize(("bounds", "total", "want"), [
    ([INF, INF], 10.0, [5.0, 5.0]),
    ([2.0, INF], 10.0, [2.0, 8.0]),
    ([2.0, 3.0], 10.0, [2.0, 3.0]),
    ([0.0, INF, 1.0], 7.0, [0.0, 6.0, 1.0]),
    ([4.0, 4.0, 4.0], 6.0, [2.0, 2.0, 2.0]),
    ([INF], 0.0, [0.0]),
])
def test_water_fill(bounds: list[float], total: float, want: list[float]) -> None:
    np.testing.assert_allclose(water_fill(np.array(bounds), np.array(total)), want)


def _one(capacity: list[float], weights: list[int], parent: list[float],
         classes: tuple[ClassSet, ...] = (), flows: tuple[Flow, ...] = FLOWS,
         direction: str = "ul") -> Shares:
    applied = (Applied.of([classes], WATS, flows, direction) if classes
               else Applied.none(1, 3, len(flows)))
    return share(np.array([[capacity]]), np.array([weights]), np.array([parent]), applied,
                 flows, BUFFER)


def test_one_bulk_flow_without_classes_is_the_rate_caps_model() -> None:
    rng = np.random.default_rng(3)
    cap = rng.uniform(0, 50, (40, 5, 3)) * (rng.random((40, 5, 3)) > 0.2)
    w = rng.integers(0, 4, (5, 3))
    w[w.sum(axis=1) == 0, 0] = 1
    msg = np.where(rng.random((5, 3)) > 0.5, rng.uniform(1, 40, (5, 3)), np.nan)
    caps = agent_caps(w, msg, np.full(3, 45.0))
    got = share(cap, w, caps, Applied.none(5, 3, 1), BULK_ALONE.flows, BUFFER)
    rate, total, saturated = deliver_caps(cap, w, caps)
    np.testing.assert_allclose(got.delivered, rate, atol=1e-9)
    np.testing.assert_allclose(got.aggregate, total, atol=1e-9)
    assert np.array_equal(got.saturated, saturated)


def test_without_classes_the_control_flow_waits_in_the_full_path_buffer() -> None:
    # load_balancing on a rate-caps agent: every WAT uncapped, the paths full.
    s = _one([20.0, 10.0, 0.0], [2, 1, 0], [INF, INF, INF])
    np.testing.assert_allclose(s.rate[0, 0, 0], [CONTROL_MBPS * 2 / 3, CONTROL_MBPS / 3, 0])
    np.testing.assert_allclose(s.delivered[0, 0], [20.0, 10.0, 0.0])
    np.testing.assert_allclose(s.queue_ms[0, 0, 0, :2], [BUFFER, BUFFER])
    assert np.isnan(s.queue_ms[0, 0, 0, 2])  # it sends nothing on a WAT that is down


def test_an_urgent_class_leaves_first_where_the_agent_caps() -> None:
    # The xApp caps the WATs an urgent class uses under their capacity: the queue is the
    # agent's, the urgent leaf goes first, the bulk's leaf holds 100 ms of its ceiling.
    urgent = ClassSet("control", CONTROL, "smallest_delay", {"nr": 0, "wifi": 1, "lifi": 0},
                      urgent=True)
    s = _one([20.0, 10.0, 0.0], [2, 1, 0], [INF, 9.0, INF], (urgent,))
    np.testing.assert_allclose(s.rate[0, 0, 0], [0.0, CONTROL_MBPS, 0.0])
    np.testing.assert_allclose(s.rate[0, 0, 1], [20.0, 9.0 - CONTROL_MBPS, 0.0])
    assert s.queue_ms[0, 0, 0, 1] == 0.0
    np.testing.assert_allclose(s.queue_ms[0, 0, 1, 1],
                               1000 * max(LEAF_QUEUE_S * 9.0, LEAF_QUEUE_MIN_MBIT)
                               / (9.0 - CONTROL_MBPS))
    assert s.queue_ms[0, 0, 1, 0] == BUFFER  # nr uncapped: its path is full
    assert s.saturated[0, 0].tolist() == [True, False, False]


def test_urgent_is_no_use_where_the_path_binds() -> None:
    # Capped above its capacity (a forecast too high), the WAT queues in the modem.
    urgent = ClassSet("control", CONTROL, "smallest_delay", {"nr": 0, "wifi": 1, "lifi": 0},
                      urgent=True)
    s = _one([20.0, 10.0, 0.0], [2, 1, 0], [INF, 11.0, INF], (urgent,))
    assert s.queue_ms[0, 0, 0, 1] == BUFFER
    np.testing.assert_allclose(s.rate[0, 0, 1, 1], 10.0 - CONTROL_MBPS)


def test_a_class_of_its_own_waits_for_the_bulk_leaves_quantum() -> None:
    own = ClassSet("control", CONTROL, "smallest_delay", {"nr": 0, "wifi": 1, "lifi": 0})
    s = _one([20.0, 10.0, 0.0], [2, 1, 0], [INF, 8.0, INF], (own,))
    np.testing.assert_allclose(s.queue_ms[0, 0, 0, 1], 1000 * 0.5 * QUANTUM_MBIT / 8.0)
    # Not capped: the path's buffer.
    s = _one([20.0, 10.0, 0.0], [2, 1, 0], [INF, INF, INF], (own,))
    assert s.queue_ms[0, 0, 0, 1] == BUFFER


def test_weight_zero_throttles_a_class_and_caps_are_its_ceiling() -> None:
    # Bulk in a class kept off wifi and capped on nr; control in the default rule's leaf.
    bulk = ClassSet("bulk", TrafficMatch(ports=((5301, 5301),)), "fixed_split",
                    {"nr": 1, "wifi": 0, "lifi": 0}, caps_mbps={"nr": 5.0})
    s = _one([20.0, 10.0, 0.0], [1, 1, 0], [INF, INF, INF], (bulk,))
    np.testing.assert_allclose(s.rate[0, 0, 1], [5.0, HTB_FLOOR_MBPS, 0.0])
    np.testing.assert_allclose(s.rate[0, 0, 0], [CONTROL_MBPS / 2, CONTROL_MBPS / 2, 0.0])
    # The bulk's leaf is over its ceiling on both: its bfifo is full.
    np.testing.assert_allclose(s.queue_ms[0, 0, 1, 0],
                               1000 * max(LEAF_QUEUE_S * 5.0, LEAF_QUEUE_MIN_MBIT) / 5.0)
    assert s.queue_ms[0, 0, 0, 0] == 0.0  # nr's path is not full (5.08 of 20)


def test_a_class_without_a_wat_up_takes_the_default_rules_weights() -> None:
    lifi_only = ClassSet("control", CONTROL, "active_standby", {"nr": 0, "wifi": 0, "lifi": 1},
                         caps_mbps={"lifi": 1.0})
    s = _one([20.0, 10.0, 0.0], [1, 1, 0], [INF, INF, INF], (lifi_only,))
    np.testing.assert_allclose(s.rate[0, 0, 0], [CONTROL_MBPS / 2, CONTROL_MBPS / 2, 0.0])


def test_a_wat_no_rule_uses_is_backup() -> None:
    own = ClassSet("control", CONTROL, "smallest_delay", {"nr": 1, "wifi": 0, "lifi": 0})
    s = _one([20.0, 10.0, 5.0], [1, 0, 0], [INF, INF, INF], (own,))
    np.testing.assert_allclose(s.delivered[0, 0], [20.0, 0.0, 0.0])
    # ... until no WAT a rule uses is up.
    s = _one([0.0, 10.0, 5.0], [1, 0, 0], [INF, INF, INF], (own,))
    np.testing.assert_allclose(s.delivered[0, 0], [0.0, 10.0, 5.0])


def test_cgroup_classes_take_only_the_uplink() -> None:
    robot = Flow("control", CONTROL_MBPS, port=7400, cgroup="/system.slice/robot.service")
    by_cgroup = ClassSet("control", TrafficMatch(cgroup="/system.slice"), "smallest_delay",
                         {"nr": 0, "wifi": 1, "lifi": 0})
    flows = (robot, BULK_ALONE.flows[0])
    for direction, leaf in (("ul", 1), ("dl", 0)):
        applied = Applied.of([(by_cgroup,)], WATS, flows, direction)
        assert applied.leaf.tolist() == [[leaf, 0]]
