"""Lower-bound calibration: grouped split conformal holds on groups the trees never saw, and
the evaluation reports coverage per family."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.typing import NDArray

from tests.xapp.model.conftest import synthetic_table
from xapp.model import training
from xapp.model.estimator import CapacityRegressor

Array = NDArray[np.float64]


def shifted_groups(seed: int, n_groups: int = 200, per_group: int = 50
                   ) -> tuple[Array, Array, NDArray[np.int_], NDArray[np.intp], Array, Array]:
    """Rows of ``n_groups`` places, each with its own offset the features do not explain but
    which the trees can memorise through a place feature; a quarter of the places (at random)
    is held out whole.  Training rows are shuffled, so the last rows are a random row sample
    of places the trees saw."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_groups), per_group)
    offset = rng.normal(0, 6, n_groups)[g]
    x0 = rng.uniform(0, 10, len(g))
    place = g + rng.uniform(0, 0.5, len(g))
    y = 20 + 3 * x0 + offset + rng.normal(0, 1, len(g))
    X = np.column_stack([x0, place])
    test = np.isin(g, rng.permutation(n_groups)[:n_groups // 4])
    train = rng.permutation(np.flatnonzero(~test))
    return X[train], y[train], g[train], np.flatnonzero(test), X, y


def test_grouped_calibration_covers_new_groups_where_row_calibration_does_not() -> None:
    grouped, rows = [], []
    for seed in range(3):
        X_tr, y_tr, g_tr, test, X, y = shifted_groups(seed)
        kw: dict[str, Any] = {"max_iter": 50, "min_samples_leaf": 10, "lower_quantile": 0.1}
        by_rows = CapacityRegressor(**kw).fit(X_tr, y_tr)
        by_groups = CapacityRegressor(**kw).fit(X_tr, y_tr, groups=g_tr)
        assert by_rows.calibration_["method"] == "last_rows"
        assert by_groups.calibration_["method"] == "grouped_conformal"
        assert by_groups.calibration_["groups"] >= 20
        rows.append(float(np.mean(y[test] >= by_rows.predict_lower(X[test]))))
        grouped.append(float(np.mean(y[test] >= by_groups.predict_lower(X[test]))))
        assert grouped[-1] > rows[-1]
    # Target 0.90: rows of seen places under-state the error at a new place.
    assert 0.86 <= np.mean(grouped) <= 0.96, grouped
    assert np.mean(rows) < 0.84, rows


def test_conformal_quantile_has_the_finite_sample_correction() -> None:
    """On the calibration rows themselves the bound covers at least ceil((n+1)(1-a))/n."""
    rng = np.random.default_rng(3)
    n_groups, per = 30, 20
    g = np.repeat(np.arange(n_groups), per)
    X = rng.uniform(0, 10, (len(g), 2))
    y = 5 * X[:, 0] + rng.normal(0, 3, len(g))
    model = CapacityRegressor(max_iter=10, lower_quantile=0.1).fit(X, y, groups=g)
    cal: dict[str, Any] = model.calibration_
    assert cal["method"] == "grouped_conformal" and cal["rows"] % per == 0
    m = cal["rows"]
    assert cal["coverage"] >= np.ceil((m + 1) * 0.9) / m
    # Without groups: today's empirical quantile on the last rows.
    plain = CapacityRegressor(max_iter=10, lower_quantile=0.1).fit(X, y)
    assert plain.calibration_["method"] == "last_rows"


def test_groups_fallbacks_and_validation() -> None:
    rng = np.random.default_rng(4)
    X = rng.uniform(0, 10, (400, 2))
    y = 2 * X[:, 0] + rng.normal(0, 1, 400)
    one = CapacityRegressor(max_iter=5).fit(X, y, groups=np.zeros(400))
    assert one.calibration_["method"] == "last_rows"  # a single group: nothing to hold out
    few = CapacityRegressor(max_iter=5).fit(X[:100], y[:100], groups=np.arange(100) % 4)
    assert few.calibration_["method"] == "training_rows"  # under 50 calibration rows
    strings = CapacityRegressor(max_iter=5).fit(X, y, groups=[f"s{i % 10}" for i in range(400)])
    assert strings.calibration_["method"] == "grouped_conformal"
    with pytest.raises(ValueError, match="groups has shape"):
        CapacityRegressor(max_iter=5).fit(X, y, groups=np.zeros(10))


def test_fit_families_calibrates_on_held_out_cpes() -> None:
    ds = training.replay(pd.concat([synthetic_table(0), synthetic_table(1)], ignore_index=True))
    models = training.fit_families(ds, None, {"max_iter": 10})
    assert {m.calibration_["method"] for m in models.values()} == {"grouped_conformal"}


def test_evaluate_reports_lower_coverage_per_family(
        trained_models: dict[str, CapacityRegressor]) -> None:
    ds = training.replay(synthetic_table(2))
    res = training.evaluate(trained_models, ds)
    fams = res["families"]
    assert isinstance(fams, dict) and set(fams) == {"cellular", "wifi", "lifi"}
    for fam, block in fams.items():
        rows = ds.rows(fam)
        _, lower = training.predict_rows({fam: trained_models[fam]}, ds, rows)
        assert block["lower_coverage"] == pytest.approx(np.mean(ds.label[rows] >= lower))
        assert block["lower_coverage_target"] == pytest.approx(0.9)
    assert 0.0 <= float(res["lower_coverage"]) <= 1.0  # type: ignore[arg-type]
    assert res["lower_coverage_target"] == pytest.approx(0.9)


def test_quantile_multiples_are_calibrated_and_ordered() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, 20_000)
    y = 20 + 3 * x + rng.normal(0, 1, len(x)) * (1 + 0.3 * x)
    X = x[:, None]
    model = CapacityRegressor(max_iter=50, min_samples_leaf=20).fit(X[:10_000], y[:10_000])
    test = np.arange(10_000, 20_000)
    assert (np.diff(model.quantile_q_) <= 0).all()
    np.testing.assert_allclose(model.predict_quantile(X[test], 0.1),
                               model.predict_lower(X[test]))
    for level in (0.02, 0.1, 0.3, 0.5):
        covered = float(np.mean(y[test] >= model.predict_quantile(X[test], level)))
        assert abs(covered - (1.0 - level)) < 0.03, (level, covered)
    # Per-row levels, interpolated between the calibrated ones and clipped to their range.
    both = model.predict_quantile(X[:2], [0.001, 0.99])
    np.testing.assert_allclose(both, [model.predict_quantile(X[:1], 0.01)[0],
                                      model.predict_quantile(X[1:2], 0.5)[0]])


def test_censored_rows_push_the_forecast_up_to_what_was_carried() -> None:
    """Under WRR the periods a WAT was not the bottleneck delivered less than its capacity;
    labels from the saturated periods only are biased low (saturation happens when capacity
    is low).  Censored rows with their delivered throughput as a floor correct the bias."""
    rng = np.random.default_rng(3)
    n = 6000
    x = rng.uniform(0, 10, n)
    capacity = 50 + 5 * x + rng.normal(0, 8, n)
    share = 50 + 5 * x  # what the weights let the WAT carry
    saturated = capacity < share
    delivered = np.minimum(capacity, share)
    X = x[:, None]
    kw: dict[str, Any] = {"max_iter": 40, "min_samples_leaf": 20}
    dropped = CapacityRegressor(**kw).fit(X[saturated], delivered[saturated])
    aware = CapacityRegressor(**kw).fit(X, delivered, censored=~saturated)
    grid = np.linspace(1, 9, 9)[:, None]
    truth = 50 + 5 * grid[:, 0]
    bias_dropped = float(np.mean(dropped.predict(grid) - truth))
    bias_aware = float(np.mean(aware.predict(grid) - truth))
    assert bias_dropped < -4.0  # the selection bias: under-forecast
    assert abs(bias_aware) < abs(bias_dropped) / 2
    # Censored rows never calibrate the bound; a fit with nothing exact is refused.
    assert aware.calibration_["rows"] <= int(saturated.sum())
    with pytest.raises(ValueError, match="every row is censored"):
        CapacityRegressor().fit(X[:100], delivered[:100], censored=np.ones(100, dtype=bool))


def test_replay_gives_censored_periods_a_floor_not_a_label() -> None:
    df = pd.DataFrame({
        "time_s": [0.0, 1.0, 2.0, 3.0], "cpe": ["c"] * 4, "wat": ["wifi"] * 4,
        "delivered_mbps": [100.0, 40.0, 120.0, 90.0], "saturated": [1.0, 0.2, 1.0, 0.1],
        "snr_db": [30.0] * 4})
    ds = training.replay(df)
    np.testing.assert_array_equal(ds.label[:3], [np.nan, 120.0, np.nan])
    np.testing.assert_array_equal(ds.floor[:3], [40.0, np.nan, 90.0])
    assert np.isnan(ds.label[3]) and np.isnan(ds.floor[3])  # no next period
    np.testing.assert_array_equal(ds.rows("wifi"), [1])
    np.testing.assert_array_equal(ds.rows("wifi", censored=True), [0, 1, 2])
