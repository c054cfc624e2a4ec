"""The capacity regressor: a scikit-learn estimator with a median and a lower-quantile head.

:class:`CapacityRegressor` follows the estimator contract (parameters stored untouched in
``__init__``, validation in ``fit``, learned attributes with a trailing underscore, ``predict``
starting with ``check_is_fitted``) and passes ``parametrize_with_checks``.  It knows nothing of
KPIs: :mod:`xapp.model.features` builds its matrix, :mod:`xapp.model.online` keeps one per
technology family.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data


class CapacityRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """Gradient-boosted forecast of next-period capacity with a conservative lower quantile.

    Parameters
    ----------
    center : {"blend", "squared_error", "absolute_error"}, default="blend"
        Loss of the central forecast.  ``"blend"`` averages a squared-error model (which
        carries R²) and an absolute-error model (the conditional median, which carries MAE);
        on the Raca traces the blend beats either alone on both scores.
    lower_quantile : float, default=0.1
        Quantile of the lower forecast; the weight engine uses it to stay conservative.
    max_iter : int, default=200
        Boosting iterations of each head.
    learning_rate : float, default=0.08
    max_leaf_nodes : int, default=31
    min_samples_leaf : int, default=40
    l2_regularization : float, default=0.0
    random_state : int or None, default=0

    Attributes
    ----------
    n_features_in_ : int
    heads_ : list of HistGradientBoostingRegressor
        The central-forecast models (one, or two for ``"blend"``).
    lower_ : HistGradientBoostingRegressor
        The lower-quantile model.
    n_iter_ : int
        Boosting iterations run (the largest over the heads).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, (400, 2))
    >>> y = 3 * X[:, 0] + rng.normal(0, 1, 400)
    >>> model = CapacityRegressor(max_iter=50).fit(X, y)
    >>> bool(np.all(model.predict_lower(X[:5]) <= model.predict(X[:5]) + 1.0))
    True
    """

    _parameter_constraints: dict[str, list[Any]] = {  # noqa: RUF012 (sklearn's convention)
        "center": [StrOptions({"blend", "squared_error", "absolute_error"})],
        "lower_quantile": [Interval(Real, 0.0, 0.5, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0.0, None, closed="neither")],
        "max_leaf_nodes": [Interval(Integral, 2, None, closed="left")],
        "min_samples_leaf": [Interval(Integral, 1, None, closed="left")],
        "l2_regularization": [Interval(Real, 0.0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, center: str = "blend", lower_quantile: float = 0.1, max_iter: int = 200,
                 learning_rate: float = 0.08, max_leaf_nodes: int = 31,
                 min_samples_leaf: int = 40, l2_regularization: float = 0.0,
                 random_state: int | None = 0) -> None:
        self.center = center
        self.lower_quantile = lower_quantile
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.random_state = random_state

    def _hgb(self, loss: str, **extra: Any) -> HistGradientBoostingRegressor:
        return HistGradientBoostingRegressor(
            loss=loss, max_iter=self.max_iter, learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
            l2_regularization=self.l2_regularization, random_state=self.random_state,
            early_stopping=False, **extra)

    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
            ) -> CapacityRegressor:
        """Fit the central and lower heads on ``X`` (NaN allowed: it means "not reported")."""
        self._validate_params()
        X_arr, y_arr = validate_data(self, X, y, ensure_all_finite="allow-nan", y_numeric=True)
        # A column with no value at all (a KPI this data set never reports) breaks the
        # binning of HistGradientBoosting; a constant stands in, it is never split on.
        empty = np.isnan(X_arr).all(axis=0)
        if empty.any():
            X_arr = X_arr.copy()
            X_arr[:, empty] = 0.0
        losses = (["squared_error", "absolute_error"] if self.center == "blend"
                  else [self.center])
        self.heads_ = [self._hgb(loss).fit(X_arr, y_arr, sample_weight=sample_weight)
                       for loss in losses]
        self.lower_ = self._hgb("quantile", quantile=self.lower_quantile).fit(
            X_arr, y_arr, sample_weight=sample_weight)
        self.n_iter_ = max(int(m.n_iter_) for m in [*self.heads_, self.lower_])
        return self

    def predict(self, X: ArrayLike) -> NDArray[np.float64]:
        """Central forecast for each row."""
        check_is_fitted(self)
        X_arr = validate_data(self, X, reset=False, ensure_all_finite="allow-nan")
        preds = [head.predict(X_arr) for head in self.heads_]
        return np.asarray(np.mean(preds, axis=0), dtype=np.float64)

    def predict_lower(self, X: ArrayLike) -> NDArray[np.float64]:
        """Lower-quantile forecast for each row, never above the central one."""
        check_is_fitted(self)
        X_arr = validate_data(self, X, reset=False, ensure_all_finite="allow-nan")
        center = np.mean([head.predict(X_arr) for head in self.heads_], axis=0)
        return np.asarray(np.minimum(self.lower_.predict(X_arr), center), dtype=np.float64)

    def predict_both(self, X: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(central, lower) in one validation pass: the hot path of the online estimator."""
        check_is_fitted(self)
        X_arr = validate_data(self, X, reset=False, ensure_all_finite="allow-nan")
        center = np.mean([head.predict(X_arr) for head in self.heads_], axis=0)
        lower = np.minimum(self.lower_.predict(X_arr), center)
        return np.asarray(center, dtype=np.float64), np.asarray(lower, dtype=np.float64)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags
