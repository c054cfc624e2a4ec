"""The censoring-aware EWMA estimator, row by row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from xapp.core.ewma import CAPPED_COLUMN, EwmaEstimator
from xapp.core.forecast import CapacityEstimator, KpiFrame


def _frame(delivered: list[float], limited: list[float], up: list[float] | None = None,
           capped: list[float] | None = None) -> KpiFrame:
    n = len(delivered)
    values = {"delivered_mbps": np.array(delivered), "saturated": np.array(limited)}
    if up is not None:
        values["up"] = np.array(up)
    if capped is not None:
        values[CAPPED_COLUMN] = np.array(capped)
    return KpiFrame(time_s=0.0, cpe=np.array(["a"] * n), wat=np.array(["nr", "wifi", "lifi"][:n]),
                    values=values)


def test_is_a_capacity_estimator() -> None:
    assert isinstance(EwmaEstimator(), CapacityEstimator)


def test_saturated_rows_are_measurements_unsaturated_are_lower_bounds() -> None:
    est = EwmaEstimator(alpha=0.5, alpha_down=1.0, explore_pct=10.0, explore_accel=2.0,
                        explore_max_pct=50.0, slow_start_pct=0.0, reprobe_wait=0)
    est.step(_frame([100.0, 100.0], [1.0, 0.0]))
    fc = est.step(_frame([200.0, 100.0], [1.0, 0.0]))
    assert fc.median_mbps[0] == pytest.approx(150.0)  # EWMA towards the measurement
    assert fc.median_mbps[1] == pytest.approx(150.0)  # lower bound: explored up 50 % (slow start)
    fc = est.step(_frame([50.0, 100.0], [1.0, 0.0]))
    assert fc.median_mbps[0] == pytest.approx(50.0)  # alpha_down=1: drops at once
    assert fc.median_mbps[1] == pytest.approx(min(400.0, 225.0))
    fc = est.step(_frame([60.0, 90.0], [0.0, 1.0]))
    assert fc.median_mbps[1] == pytest.approx(90.0)  # now saturated: measured, growth resets
    fc = est.step(_frame([60.0, 90.0], [0.0, 0.0]))
    assert fc.median_mbps[1] == pytest.approx(99.0)  # explore_pct after a saturation


def test_slow_start_until_the_first_saturation() -> None:
    est = EwmaEstimator(alpha_down=1.0, explore_pct=10.0, explore_max_pct=50.0,
                        slow_start_pct=300.0)
    est.step(_frame([10.0, 10.0], [1.0, 0.0]))
    fc = est.step(_frame([10.0, 10.0], [1.0, 0.0]))
    assert fc.median_mbps[1] == pytest.approx(40.0)  # x4 per period, never saturated
    fc = est.step(_frame([10.0, 40.0], [1.0, 0.0]))
    assert fc.median_mbps[1] == pytest.approx(160.0)
    fc = est.step(_frame([10.0, 100.0], [1.0, 1.0]))  # found: a measurement
    fc = est.step(_frame([10.0, 50.0], [1.0, 0.0]))
    assert fc.median_mbps[1] == pytest.approx(110.0)  # then the gentle explore_pct
    fc = est.step(_frame([10.0, 50.0], [1.0, 0.0]))
    assert fc.median_mbps[1] == pytest.approx(110.0 * 1.15)  # accelerated 1.5x, below 50 %


def test_a_wat_that_carries_nothing_explores_within_its_last_measurement() -> None:
    """0 delivered bounds nothing: the estimate may grow, but to headroom x the last
    measurement, not by half a period for ever (1.7e14 Mbit/s was seen)."""
    est = EwmaEstimator(headroom=4.0)
    est.step(_frame([100.0, 400.0], [1.0, 1.0]))
    est.step(_frame([100.0, 400.0], [1.0, 1.0]))
    fc = None
    for _ in range(200):
        fc = est.step(_frame([100.0, 0.0], [1.0, 0.0]))
    assert fc is not None
    assert fc.median_mbps[1] == pytest.approx(1600.0)
    # Dropped once, it is still explored: above its last measurement.
    assert est.estimate_[1] > 400.0


CAPPED = [0.0, 1.0]  # row 1's WAT is held by a rate cap


def _probe(est: EwmaEstimator, found_mbps: float, capped: list[float] = CAPPED) -> int:
    """Explore row 1 from its measurement until its estimate passes 110, then measure it at
    ``found_mbps``; the periods the exploration took."""
    periods = 0
    while est.estimate_[1] <= 110.0:
        est.step(_frame([100.0, 90.0], [1.0, 0.0], capped=capped))
        periods += 1
    est.step(_frame([100.0, found_mbps], [1.0, 1.0], capped=capped))
    return periods


def _held(est: EwmaEstimator, capped: list[float] = CAPPED) -> int:
    """Unsaturated periods row 1 holds its estimate before it explores again."""
    held = 0
    while True:
        before = float(est.estimate_[1])
        est.step(_frame([100.0, 90.0], [1.0, 0.0], capped=capped))
        if est.estimate_[1] > before:
            return held
        held += 1


def _measured_at_100(**kwargs: Any) -> EwmaEstimator:
    est = EwmaEstimator(alpha_down=1.0, explore_pct=2.0, slow_start_pct=0.0, **kwargs)
    est.step(_frame([100.0, 100.0], [1.0, 1.0]))
    est.step(_frame([100.0, 100.0], [1.0, 1.0]))
    return est


def test_a_capped_probe_that_found_nothing_waits_twice_as_long_each_time() -> None:
    est = _measured_at_100(reprobe_wait=4, reprobe_wait_max=16)
    waits = []
    for _ in range(4):
        assert _probe(est, 100.0) > 0  # the capacity where it was
        assert est.estimate_[1] == pytest.approx(100.0)
        waits.append(_held(est))
    assert waits == [4, 8, 16, 16]
    _probe(est, 100.0)
    # Held, but a period that delivered more than the estimate still raises it.
    fc = est.step(_frame([100.0, 104.0], [1.0, 0.0], capped=CAPPED))
    assert fc.median_mbps[1] == pytest.approx(104.0)
    # A probe that found more (over 10 % above where it started) explores again at once.
    est = _measured_at_100(reprobe_wait=4)
    _probe(est, 100.0)
    assert _held(est) == 4
    _probe(est, 130.0)
    assert _held(est) == 0


def test_a_wait_never_holds_a_level_a_measurement_fell_short_of() -> None:
    # A probe that ends under where it started does not wait, and keeps its count: finding
    # the level the waits held again is not finding more.
    est = _measured_at_100(reprobe_wait=4, reprobe_wait_max=32)
    _probe(est, 100.0)
    assert _held(est) == 4
    _probe(est, 60.0)
    assert est.estimate_[1] < 100.0
    assert _held(est) == 0
    _probe(est, 100.0)
    assert _held(est) == 8
    # A measurement that far under the estimate during a wait ends the wait.
    _probe(est, 100.0)
    est.step(_frame([100.0, 90.0], [1.0, 0.0], capped=CAPPED))
    est.step(_frame([100.0, 50.0], [1.0, 1.0], capped=CAPPED))
    assert _held(est) == 0
    # One within REPROBE_FOUND of it does not.
    _probe(est, 100.0)
    est.step(_frame([100.0, 95.0], [1.0, 1.0], capped=CAPPED))
    assert _held(est) > 0


@pytest.mark.parametrize(("kwargs", "capped"), [({"reprobe_wait": 0}, CAPPED),
                                               ({}, [0.0, 0.0]), ({}, [0.0, float("nan")])])
def test_no_wait_where_nothing_caps_or_waiting_is_off(kwargs: dict[str, Any],
                                                      capped: list[float]) -> None:
    est = _measured_at_100(**kwargs)
    _probe(est, 100.0, capped)
    assert _held(est, capped) == 0


def test_naive_mode_locks_in() -> None:
    est = EwmaEstimator(censoring=False, explore_pct=0.0, explore_max_pct=0.0)
    for _ in range(20):
        fc = est.step(_frame([10.0, 10.0], [1.0, 0.0]))
    assert fc.median_mbps[1] == pytest.approx(10.0)


def test_down_rows_forecast_zero_and_keep_their_estimate() -> None:
    est = EwmaEstimator()
    est.step(_frame([100.0, 80.0], [1.0, 1.0], [1.0, 1.0]))
    fc = est.step(_frame([100.0, 0.0], [1.0, 0.0], [1.0, 0.0]))
    assert fc.median_mbps[1] == 0.0 and fc.lower_mbps[1] == 0.0
    fc = est.step(_frame([100.0, 80.0], [1.0, 1.0], [1.0, 1.0]))
    assert fc.median_mbps[1] == pytest.approx(80.0)


def test_rows_are_matched_by_key() -> None:
    est = EwmaEstimator()
    est.step(_frame([100.0, 80.0], [1.0, 1.0]))
    swapped = KpiFrame(time_s=1.0, cpe=np.array(["a", "a"]), wat=np.array(["wifi", "nr"]),
                       values={"delivered_mbps": np.array([80.0, 100.0]),
                               "saturated": np.array([1.0, 1.0])})
    fc = est.step(swapped)
    assert fc.median_mbps.tolist() == pytest.approx([80.0, 100.0])


@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"alpha_down": 1.5}, {"explore_accel": 0.5},
                                    {"explore_pct": 60.0, "explore_max_pct": 50.0},
                                    {"headroom": 0.5}, {"lower_z": -1.0},
                                    {"slow_start_pct": -1.0}, {"reprobe_wait": -1},
                                    {"reprobe_wait": 8, "reprobe_wait_max": 4}])
def test_bad_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        EwmaEstimator(**kwargs).step(_frame([1.0], [1.0]))
