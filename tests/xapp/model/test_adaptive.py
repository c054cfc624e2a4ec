"""Online adaptive calibration of the lower bound: coverage under drift, censoring, metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from scipy.stats import norm

from xapp.app.collector import ComponentCollector
from xapp.core.forecast import KpiFrame
from xapp.model import ModelEstimator
from xapp.model.adaptive import AdaptiveLowerBound, FamilyCalibration
from xapp.model.artifact import LoadedModel

CENTER = 100.0
SCALE = 10.0
Q0 = 1.2816  # the 10 % quantile of N(0, 1): static bound exact while the noise is N(0, SCALE)


class _FixedModel:
    """A family model whose centre is constant and whose ``tau`` quantile is
    ``center - Q(tau) * SCALE``, Q the N(0, 1) quantiles (exact while the noise is N(0, SCALE))."""

    lower_quantile = 0.1
    lower_q_ = Q0

    def predict_center_scale(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.full(len(X), CENTER), np.full(len(X), SCALE)

    def multiple(self, level: np.ndarray) -> np.ndarray:
        return np.asarray(-norm.ppf(np.clip(level, 0.01, 0.5)), dtype=np.float64)


def _loaded() -> LoadedModel:
    return LoadedModel(version="fixed", models=cast(Any, {"wifi": _FixedModel()}),
                       feature_names={"wifi": ("lag0",)}, card={}, path=Path("fixed"))


def _run(eta: float, n_cpes: int = 60, ticks: int = 700, seed: int = 0
         ) -> tuple[float, float, ModelEstimator]:
    """Miss rate of the lower bound over the last 400 ticks when the capacity noise grows
    from SCALE to 2.5 x SCALE at tick 50 (the static bound then misses about 30 %)."""
    rng = np.random.default_rng(seed)
    est = ModelEstimator(_loaded(), adaptive=AdaptiveLowerBound(eta=eta), level=0.1)
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
    static_miss, static_cov, _ = _run(eta=0.0)
    adaptive_miss, adaptive_cov, est = _run(eta=0.05)
    assert static_miss > 0.25  # the training-time calibration no longer holds
    assert abs(adaptive_miss - 0.10) < 0.02
    assert abs(adaptive_cov - 0.90) < 0.03 and static_cov < 0.75
    cal = est.calibration()["wifi"]
    # N(0, 2.5 SCALE) has its 10 % quantile 2.5 x further below the centre.
    assert cal.multiplier == pytest.approx(2.5, rel=0.15)
    assert cal.target == pytest.approx(0.9) and cal.periods > 0


def test_cost_levels_follow_the_shares_and_the_factor_tracks_them() -> None:
    """Two WATs per CPE at 75 % / 25 % of the forecast: planned at their 50 % (clipped) and
    25 % quantiles; the minor WAT's misses track 25 % once the noise has doubled."""
    rng = np.random.default_rng(1)
    n = 200
    loaded = LoadedModel(version="fixed", models=cast(Any, {"wifi": _FixedModel(),
                                                           "lifi": _Scaled(1 / 3)}),
                         feature_names={"wifi": ("lag0",), "lifi": ("lag0",)}, card={},
                         path=Path("fixed"))
    est = ModelEstimator(loaded, adaptive=AdaptiveLowerBound(eta=0.05))
    cpe = np.repeat([f"c{i}" for i in range(n)], 2)
    wat = np.tile(["wifi", "lifi"], n)
    lower = np.full(2 * n, np.nan)
    misses = known = 0
    for t in range(600):
        sigma = np.tile([SCALE, 2 * SCALE / 3], n)
        capacity = np.tile([CENTER, CENTER / 3], n) + sigma * rng.standard_normal(2 * n)
        if t >= 200:
            misses += int((capacity[1::2] < lower[1::2]).sum())
            known += n
        frame = KpiFrame(time_s=float(t), cpe=cpe, wat=wat,
                         values={"delivered_mbps": np.maximum(capacity, 0.0),
                                 "saturated": np.ones(2 * n), "snr_db": np.full(2 * n, 30.0)})
        forecast = est.step(frame)
        lower = forecast.lower_mbps
    assert forecast.lower_mbps[0] == pytest.approx(CENTER)  # the 75 % WAT: level 0.5
    assert abs(misses / known - 0.25) < 0.03
    cal = est.calibration()
    assert cal["lifi"].target == pytest.approx(0.75)
    assert cal["lifi"].multiplier == pytest.approx(2.0, rel=0.2)


class _Scaled(_FixedModel):
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def predict_center_scale(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.full(len(X), CENTER * self.factor), np.full(len(X), SCALE * self.factor)


def test_censored_periods_do_not_update() -> None:
    ad = AdaptiveLowerBound(eta=0.05)
    idx = np.arange(4, dtype=np.intp)
    rows = np.array(["wifi"] * 4)
    fresh = np.ones(4, dtype=bool)
    tau = np.full(4, 0.1)
    adjustable = np.ones(4, dtype=bool)
    ad.observe(idx, rows, np.full(4, np.nan), np.full(4, np.nan), np.zeros(4, dtype=bool))
    assert (ad.factor("wifi", idx) == 1.0).all()
    ad.remember(idx, np.full(4, 90.0), tau, adjustable)
    # 0: saturated miss; 1: saturated covered; 2: censored below the bound (unknown);
    # 3: censored at or above the bound (covered: capacity >= delivered >= bound).
    ad.observe(idx, rows, np.array([80.0, 95.0, 50.0, 92.0]), np.array([1.0, 0.9, 0.2, 0.2]),
               fresh)
    ad.publish(("wifi",))
    m = ad._m[:4]
    np.testing.assert_allclose(m[[0, 1, 3]], [1.0 + 0.9 * 0.05, 1.0 - 0.1 * 0.05,
                                              1.0 - 0.1 * 0.05])
    assert np.isnan(m[2])  # never updated: still at the model's own calibration
    cal = ad.snapshot()["wifi"]
    assert cal.periods == 3 and cal.coverage == pytest.approx(2 / 3)
    assert cal.target == pytest.approx(0.9)
    # An unknown delivered throughput, or no bound for the period, is not scored either.
    ad.remember(idx, np.full(4, 90.0), tau, adjustable)
    ad.observe(idx, rows, np.array([np.nan, 10.0, 10.0, 10.0]), np.full(4, 1.0),
               np.array([True, False, True, True]))
    assert ad._periods["wifi"] == 5
    assert np.isnan(ad._m[1])  # the stale key restarted from the model's calibration
    # A bound planned at or above the centre is scored but does not move the factor.
    ad.remember(idx, np.full(4, 90.0), np.full(4, 0.5), np.zeros(4, dtype=bool))
    before = ad._m[:4].copy()
    ad.observe(idx, rows, np.full(4, 10.0), np.ones(4), fresh)
    np.testing.assert_array_equal(ad._m[:4], before)
    assert ad._periods["wifi"] == 9


def test_stale_key_restarts_from_the_model_calibration() -> None:
    est = ModelEstimator(_loaded(), stale_after_s=5.0, level=0.1)
    one = {"delivered_mbps": np.array([10.0]), "saturated": np.array([1.0]),
           "snr_db": np.array([30.0])}

    def frame(t: float) -> KpiFrame:
        return KpiFrame(time_s=t, cpe=np.array(["c"]), wat=np.array(["wifi"]), values=one)

    for t in range(20):
        est.step(frame(float(t)))
    assert est.calibration()["wifi"].multiplier > 1.0  # every period missed
    low = est.step(frame(100.0))  # unseen for longer than stale_after_s
    assert est.calibration()["wifi"].multiplier == 1.0
    assert low.lower_mbps[0] == pytest.approx(CENTER - Q0 * SCALE, rel=1e-4)


def test_calibration_gauges_on_metrics() -> None:
    registry = CollectorRegistry()
    snap = {"wifi": FamilyCalibration(coverage=0.9, target=0.8, multiplier=1.5, periods=10),
            "cellular": FamilyCalibration(coverage=float("nan"), target=float("nan"),
                                          multiplier=1.0, periods=0)}
    registry.register(ComponentCollector(estimator_calibration=lambda: snap))
    text = generate_latest(registry).decode()
    assert 'mcw_model_lower_coverage{family="wifi"} 0.9' in text
    assert 'mcw_model_lower_multiplier{family="wifi"} 1.5' in text
    assert 'mcw_model_lower_coverage_target{family="wifi"} 0.8' in text
    assert 'mcw_model_lower_coverage{family="cellular"} NaN' in text
    assert "mcw_model_lower" not in generate_latest(_empty()).decode()


def _empty() -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ComponentCollector())
    return registry
