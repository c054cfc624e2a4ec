"""What each flow got over a run (twin.class_stats)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from twin.class_queues import Shares
from twin.class_stats import DEADLINE_MS, N_BINS, FlowStats, percentile
from twin.traffic import Flow

FLOWS = (Flow("control", 0.2, port=5302), Flow("bulk", math.inf, port=5301))
WATS = ("nr", "wifi")


def _shares(rate: list[list[list[float]]], queue: list[list[list[float]]]) -> Shares:
    r = np.array(rate)[:, None]  # (b, 1, F, k)
    q = np.where(r > 0, np.array(queue)[:, None], np.nan)
    d = r.sum(axis=2)
    return Shares(r, q, d, d.sum(axis=-1), np.zeros(d.shape, bool))


def test_percentiles_are_over_packets() -> None:
    stats = FlowStats(FLOWS, WATS)
    base = np.array([[[20.0, 2.0]]] * 4)  # (b, n, k)
    # Control: 3 steps on wifi behind a 50 ms buffer, one step on nr with no queue.
    on_wifi: list[list[list[float]]] = [[[0.0, 0.2], [10.0, 90.0]]] * 3
    on_nr: list[list[list[float]]] = [[[0.2, 0.0], [10.0, 90.0]]]
    waits: list[list[list[float]]] = [[[0.0, 50.0], [0.0, 0.0]]] * 3 + [[[0.0] * 2] * 2]
    stats.add(_shares(on_wifi + on_nr, waits), base)
    doc = stats.summary()
    control = doc["control"]
    assert control["mbps"] == pytest.approx(0.2)
    assert control["per_wat_mbps"] == {"nr": 0.05, "wifi": 0.15}
    assert control["rtt_ms"] == {"p50": 52.0, "p95": 52.0, "p99": 52.0}
    assert control["over_deadline_pct"] == 75.0 and control["deadline_ms"] == DEADLINE_MS
    assert control["wats"]["nr"] == {"time_pct": 25.0,
                                     "rtt_ms": {"p50": 20.0, "p95": 20.0, "p99": 20.0},
                                     "queue_ms": {"p50": 0.0, "p95": 0.0, "p99": 0.0}}
    assert control["wats"]["wifi"]["queue_ms"]["p50"] == 50.0
    assert doc["bulk"] == {"class": "default", "demand_mbps": None, "mbps": 100.0,
                           "per_wat_mbps": {"nr": 10.0, "wifi": 90.0}}


def test_a_percentile_of_nothing_is_none() -> None:
    assert percentile(np.zeros((2, N_BINS)), 50) is None
    stats = FlowStats(FLOWS, WATS)
    assert stats.summary()["control"]["rtt_ms"]["p50"] is None
