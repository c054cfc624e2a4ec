"""Online adaptive calibration of the lower bound: coverage under drift, censoring, metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from xapp.app.collector import ComponentCollector
from xapp.core.forecast import KpiFrame
from xapp.model import ModelEstimator
from xapp.model.adaptive import AdaptiveLowerBound, FamilyCalibration
from xapp.model.artifact import LoadedModel

CENTER = 100.0
SCALE = 10.0
Q0 = 1.2816  # the 10 % quantile of N(0, 1): static bound exact while the noise is N(0, SCALE)


class _FixedModel:
    """A family model whose centre is constant and whose bound is ``center - q * SCALE``."""

    lower_quantile = 0.1
    lower_q_ = Q0

    def predict_both(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        center = np.full(len(X), CENTER)
        return center, center - self.lower_q_ * SCALE


def _loaded() -> LoadedModel:
    return LoadedModel(version="fixed", models=cast(Any, {"wifi": _FixedModel()}),
                       feature_names={"wifi": ("lag0",)}, card={}, path=Path("fixed"))


def _run(eta_scale: float, n_cpes: int = 60, ticks: int = 700, seed: int = 0
         ) -> tuple[float, float, ModelEstimator]:
    """Miss rate of the lower bound over the last 400 ticks when the capacity noise grows
    from SCALE to 2.5 x SCALE at tick 50 (the static bound then misses about 30 %)."""
    rng = np.random.default_rng(seed)
    est = ModelEstimator(_loaded(), adaptive=AdaptiveLowerBound(eta_scale=eta_scale))
    cpe = np.array([f"c{i}" for i in range(n_cpes)])
    wat = np.array(["wifi"] * n_cpes)
    lower = np.full(n_cpes, np.nan)
    misses = known = 0
    for t in range(ticks):
        sigma = SCALE if t < 50 else 2.5 * SCALE
        capacity = CENTER + sigma * rng.standard_normal(n_cpes)
        if t >= ticks - 400:
            misses += int((capacity < lower).sum())
            known += n_cpes
        frame = KpiFrame(time_s=float(t), cpe=cpe, wat=wat,
                         values={"delivered_mbps": np.maximum(capacity, 0.0),
                                 "saturated": np.ones(n_cpes), "snr_db": np.full(n_cpes, 30.0)})
        lower = est.step(frame).lower_mbps
    return misses / known, est.calibration()["wifi"].coverage, est


def test_adaptive_bound_tracks_the_target_miss_rate_under_drift() -> None:
    static_miss, static_cov, _ = _run(eta_scale=0.0)
    adaptive_miss, adaptive_cov, est = _run(eta_scale=0.05)
    assert static_miss > 0.25  # the training-time calibration no longer holds
    assert abs(adaptive_miss - 0.10) < 0.02
    assert abs(adaptive_cov - 0.90) < 0.03 and static_cov < 0.75
    cal = est.calibration()["wifi"]
    # N(0, 2.5 SCALE) has its 10 % quantile at 2.5 x Q0 scales below the centre.
    assert cal.multiplier == pytest.approx(2.5 * Q0, rel=0.15)
    assert cal.initial_multiplier == Q0 and cal.periods > 0


def test_censored_periods_do_not_update() -> None:
    ad = AdaptiveLowerBound(alpha=0.1, eta_scale=0.05)
    ad.reset({"wifi": 1.0})
    idx = np.arange(4, dtype=np.intp)
    rows = np.array(["wifi"] * 4)
    fresh = np.ones(4, dtype=bool)
    center = np.full(4, 100.0)
    ad.observe(idx, rows, np.full(4, np.nan), np.full(4, np.nan), np.zeros(4, dtype=bool))
    ad.remember(idx, ad.adjust("wifi", idx, center, center - 10.0, 1.0))  # bounds of 90
    # 0: saturated miss; 1: saturated covered; 2: censored below the bound (unknown);
    # 3: censored at or above the bound (covered: capacity >= delivered >= bound).
    ad.observe(idx, rows, np.array([80.0, 95.0, 50.0, 92.0]), np.array([1.0, 0.9, 0.2, 0.2]),
               fresh)
    ad.publish(("wifi",))
    eta = 0.05 * 1.0
    q = ad._q[:4]
    np.testing.assert_allclose(q[[0, 1, 3]], [1.0 + 0.9 * eta, 1.0 - 0.1 * eta, 1.0 - 0.1 * eta])
    assert np.isnan(q[2])  # never updated: still at its initial multiplier
    cal = ad.snapshot()["wifi"]
    assert cal.periods == 3 and cal.coverage == pytest.approx(2 / 3)
    # An unknown delivered throughput, or no bound for the period, is not scored either.
    ad.remember(idx, np.full(4, 90.0))
    ad.observe(idx, rows, np.array([np.nan, 10.0, 10.0, 10.0]), np.full(4, 1.0),
               np.array([True, False, True, True]))
    assert ad._periods["wifi"] == 5
    assert np.isnan(ad._q[1])  # the stale key restarted from q0


def test_stale_key_restarts_from_the_model_multiplier() -> None:
    est = ModelEstimator(_loaded(), stale_after_s=5.0)
    one = {"delivered_mbps": np.array([10.0]), "saturated": np.array([1.0]),
           "snr_db": np.array([30.0])}
    frame = lambda t: KpiFrame(time_s=t, cpe=np.array(["c"]), wat=np.array(["wifi"]),  # noqa: E731
                               values=one)
    for t in range(20):
        est.step(frame(float(t)))
    assert est.calibration()["wifi"].multiplier > Q0  # every period missed
    low = est.step(frame(100.0))  # unseen for longer than stale_after_s
    assert est.calibration()["wifi"].multiplier == Q0
    assert low.lower_mbps[0] == pytest.approx(CENTER - Q0 * SCALE)


def test_calibration_gauges_on_metrics() -> None:
    registry = CollectorRegistry()
    snap = {"wifi": FamilyCalibration(coverage=0.9, multiplier=1.5, initial_multiplier=1.2,
                                      periods=10),
            "cellular": FamilyCalibration(coverage=float("nan"), multiplier=1.0,
                                          initial_multiplier=1.0, periods=0)}
    registry.register(ComponentCollector(estimator_calibration=lambda: snap))
    text = generate_latest(registry).decode()
    assert 'mcw_model_lower_coverage{family="wifi"} 0.9' in text
    assert 'mcw_model_lower_multiplier{family="wifi"} 1.5' in text
    assert 'mcw_model_lower_coverage{family="cellular"} NaN' in text
    assert "mcw_model_lower" not in generate_latest(_empty()).decode()


def _empty() -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ComponentCollector())
    return registry
