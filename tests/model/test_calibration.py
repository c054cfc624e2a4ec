"""Lower-bound calibration: grouped split conformal holds on groups the trees never saw, and
the evaluation reports coverage per family."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from numpy.typing import NDArray

from tests.model.conftest import synthetic_table
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
        kw = {"max_iter": 50, "min_samples_leaf": 10, "lower_quantile": 0.1}
        by_rows = CapacityRegressor(**kw).fit(X_tr, y_tr)  # type: ignore[arg-type]
        by_groups = CapacityRegressor(**kw).fit(X_tr, y_tr, groups=g_tr)  # type: ignore[arg-type]
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
    cal = model.calibration_
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
