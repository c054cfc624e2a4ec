"""The capacity regressor: one boosted median-ish head and a calibrated lower bound.

:class:`CapacityRegressor` follows the estimator contract (parameters stored untouched in
``__init__``, validation in ``fit``, learned attributes with a trailing underscore, ``predict``
starting with ``check_is_fitted``) and passes ``parametrize_with_checks``.  It knows nothing of
KPIs: :mod:`xapp.model.features` builds its matrix, :mod:`xapp.model.online` keeps one per
technology family.

Speed is a design constraint (30,000 rows per control tick on one core), so each family has a
single small tree ensemble:

* it predicts a *correction* to a base column (the last capacity sample, i.e. persistence) when
  ``base_column`` is given: persistence is already a strong forecast, so a few shallow trees
  only have to learn when and how much the next period departs from it;
* the lower bound is not a second (quantile) model but the central forecast minus a calibrated
  multiple of a scale, ``lower = center - q * (|center| + c + volatility)``: errors grow with
  the level and with the recent volatility of the link, and ``q`` is the empirical
  ``lower_quantile`` of the scaled residuals on training rows held out of the trees (a
  split-conformal bound).  Given ``groups`` (sessions, CPEs), the held-out rows are whole
  groups and ``q`` is the conformal quantile with the finite-sample correction: rows of a
  session the trees saw have smaller residuals than rows of a new place, so a bound calibrated
  on them is too high where the model has never been.

MAPIE was considered for the calibration and not used: its split-conformal regressor has no
notion of groups at the calibration step (the split is ours either way), gives two-sided
intervals (a one-sided bound needs confidence-level arithmetic), and would only compute one
quantile of our own scale-normalised scores, which we need as a plain float applied by the
xApp's hot path (the artifact holds only trusted types) after the trees are refit on all rows,
which MAPIE's prefit mode does not model.  Split conformal is a few lines here.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

Array = NDArray[np.float64]
Rows = slice | NDArray[np.intp]

#: Levels (lower quantiles of the capacity) at which the fitted regressor keeps a calibrated
#: multiple of its scale, for :meth:`CapacityRegressor.predict_quantile`; the xApp picks the
#: level it plans with per WAT from what an error costs (:mod:`xapp.core.planning`).
QUANTILE_LEVELS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)


class CapacityRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """Gradient-boosted forecast of next-period capacity with a conservative lower bound.

    Parameters
    ----------
    loss : {"squared_error", "absolute_error"}, default="squared_error"
        Loss of the trees.  Squared error carries R², absolute error (conditional median)
        carries MAE.
    huber_quantile : float or None, default=0.7
        With squared error: refit once with Huber weights ``min(1, d / |residual|)``, ``d``
        the ``huber_quantile`` of the first fit's absolute residuals (one step of iteratively
        reweighted least squares on the Huber loss).  Large surprises then pull the trees
        less: MAE improves a lot at almost no cost in R², and prediction stays one ensemble.
        None: plain squared error.
    base_column : int or None, default=None
        Column whose value the trees correct (target ``y - X[:, base_column]``, NaN base
        counting as 0).  None: the trees predict ``y`` itself.
    scale_column : int or None, default=None
        Column of a recent-volatility feature (e.g. the standard deviation of the last
        samples) added to the scale of the lower bound, NaN counting as 0: volatile links get
        a wider bound than steady ones under the same calibrated multiple.
    lower_quantile : float, default=0.1
        Target miss rate of the lower bound (the fraction of periods below it).
    calibration_fraction : float, default=0.2
        Fraction of the rows held out of the trees to calibrate the lower bound.  Without
        ``groups``: the last rows (the latest in time order), with fewer than 50 such rows the
        training residuals are used.  With ``groups``: whole groups drawn at random (seeded by
        ``random_state``) until they hold this fraction of the rows, at least one group left
        for the trees (fewer than 2 groups or 50 calibration rows: as without groups).  The
        trees are then refit on all rows.
    max_iter : int, default=15
        Boosting iterations (trees); prediction cost grows linearly with it.
    learning_rate : float, default=0.3
    max_leaf_nodes : int, default=31
    min_samples_leaf : int, default=40
    l2_regularization : float, default=0.0
    random_state : int or None, default=0

    Attributes
    ----------
    n_features_in_ : int
    model_ : HistGradientBoostingRegressor
        The tree ensemble.
    lower_q_ : float
        Multiple of the scale subtracted for the lower bound (>= 0).
    lower_c_ : float
        Additive part of the scale (median absolute target, 5 %), so the bound stays
        meaningful near zero.
    quantile_levels_ : ndarray of shape (n_levels,)
        :data:`QUANTILE_LEVELS`, ascending.
    quantile_q_ : ndarray of shape (n_levels,)
        Calibrated multiple of the scale for each level, by the same conformal rule as
        ``lower_q_`` (non-increasing in the level; negative where that quantile lies above
        the central forecast).
    calibration_ : dict
        How the bound was calibrated: ``method`` ("grouped_conformal", "last_rows" or
        "training_rows"), ``rows``, ``groups`` (number of calibration groups, 0 without) and
        ``coverage`` (fraction of calibration rows at or above the bound).
    n_iter_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, (400, 2))
    >>> y = 3 * X[:, 0] + rng.normal(0, 1, 400)
    >>> model = CapacityRegressor(max_iter=50).fit(X, y)
    >>> bool(np.all(model.predict_lower(X[:5]) <= model.predict(X[:5])))
    True
    """

    _parameter_constraints: dict[str, list[Any]] = {  # noqa: RUF012 (sklearn's convention)
        "loss": [StrOptions({"squared_error", "absolute_error"})],
        "huber_quantile": [Interval(Real, 0.0, 1.0, closed="neither"), None],
        "base_column": [Interval(Integral, 0, None, closed="left"), None],
        "scale_column": [Interval(Integral, 0, None, closed="left"), None],
        "lower_quantile": [Interval(Real, 0.0, 0.5, closed="neither")],
        "calibration_fraction": [Interval(Real, 0.0, 0.5, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0.0, None, closed="neither")],
        "max_leaf_nodes": [Interval(Integral, 2, None, closed="left")],
        "min_samples_leaf": [Interval(Integral, 1, None, closed="left")],
        "l2_regularization": [Interval(Real, 0.0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, loss: str = "squared_error", huber_quantile: float | None = 0.7,
                 base_column: int | None = None,
                 scale_column: int | None = None, lower_quantile: float = 0.1,
                 calibration_fraction: float = 0.2,
                 max_iter: int = 15, learning_rate: float = 0.3, max_leaf_nodes: int = 31,
                 min_samples_leaf: int = 40, l2_regularization: float = 0.0,
                 random_state: int | None = 0) -> None:
        self.loss = loss
        self.huber_quantile = huber_quantile
        self.base_column = base_column
        self.scale_column = scale_column
        self.lower_quantile = lower_quantile
        self.calibration_fraction = calibration_fraction
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.random_state = random_state

    def _base(self, X: Array) -> Array:
        return self._column(X, self.base_column)

    @staticmethod
    def _column(X: Array, j: int | None) -> Array:
        if j is None:
            return np.zeros(len(X))
        col = X[:, j]
        return np.where(np.isnan(col), 0.0, col)

    def _scale(self, X: Array, center: Array) -> Array:
        return np.abs(center) + self.lower_c_ + np.abs(self._column(X, self.scale_column))

    def _split(self, n: int, groups: ArrayLike | None
               ) -> tuple[Rows, Rows, str, int]:
        """(tree rows, calibration rows, method, calibration groups)."""
        if groups is not None:
            g = np.asarray(groups)
            if g.shape != (n,):
                raise ValueError(f"groups has shape {g.shape}, expected ({n},)")
            codes, uniq = pd.factorize(g)
            if len(uniq) >= 2:
                counts = np.bincount(codes, minlength=len(uniq))
                order = np.random.default_rng(self.random_state).permutation(len(uniq))
                # Draw groups until they hold the calibration fraction; always leave one.
                n_cal_groups = int(np.searchsorted(np.cumsum(counts[order]),
                                                   n * self.calibration_fraction) + 1)
                n_cal_groups = min(n_cal_groups, len(uniq) - 1)
                is_cal = np.isin(codes, order[:n_cal_groups])
                if is_cal.sum() >= 50 and self.calibration_fraction > 0:
                    return (np.flatnonzero(~is_cal), np.flatnonzero(is_cal),
                            "grouped_conformal", n_cal_groups)
        n_cal = int(n * self.calibration_fraction)
        if n_cal >= 50:
            return slice(0, n - n_cal), slice(n - n_cal, n), "last_rows", 0
        return slice(0, n), slice(0, n), "training_rows", 0

    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None,
            groups: ArrayLike | None = None, censored: ArrayLike | None = None
            ) -> CapacityRegressor:
        """Fit the trees and calibrate the lower bound (NaN in ``X`` means "not reported").

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the trees' loss (not of the calibration).
        groups : array-like of shape (n_samples,), default=None
            Group of each row (session, CPE): the lower bound is then calibrated on whole
            groups held out of the trees, by split conformal prediction (the
            ``ceil((n + 1) (1 - lower_quantile)) / n`` quantile of the calibration rows'
            scaled over-estimates).  None: on the last rows, by their empirical quantile.
        censored : array-like of bool of shape (n_samples,), default=None
            Rows whose ``y`` is only a lower bound of the target (under WRR: a period the
            subflow was not saturated delivered its share, not its capacity).  They are left
            out of the first fit; where its forecast is below their bound they join a second
            fit with the bound as label (one step of an EM-style imputation for right-censored
            targets: the forecast is pushed up to what was certainly possible, and no further).
            They never calibrate the bound.

        Returns
        -------
        self : CapacityRegressor
        """
        self._validate_params()
        X_arr, y_arr = validate_data(self, X, y, ensure_all_finite="allow-nan", y_numeric=True)
        for name in ("base_column", "scale_column"):
            j = getattr(self, name)
            if j is not None and j >= X_arr.shape[1]:
                raise ValueError(f"{name} {j} >= {X_arr.shape[1]} features")
        w = None if sample_weight is None else _check_sample_weight(sample_weight, X_arr)
        n = len(y_arr)
        cens = np.zeros(n, dtype=bool) if censored is None else np.asarray(censored, dtype=bool)
        if cens.shape != (n,):
            raise ValueError(f"censored has shape {cens.shape}, expected ({n},)")
        if cens.all():
            raise ValueError("every row is censored: nothing to learn the target from")
        fit_rows, cal_rows, method, cal_groups = self._split(n, groups)
        fit_rows = np.arange(n)[fit_rows]
        cal_rows = np.arange(n)[cal_rows]
        cal_rows = cal_rows[~cens[cal_rows]]
        target = y_arr - self._base(X_arr)

        def trees(rows: NDArray[np.intp]) -> HistGradientBoostingRegressor:
            exact = rows[~cens[rows]]
            model = uncensored(exact)
            bounded = rows[cens[rows]]
            if len(bounded) == 0:
                return model
            below = bounded[model.predict(X_arr[bounded]) < target[bounded]]
            return uncensored(np.sort(np.r_[exact, below])) if len(below) else model

        def uncensored(rows: NDArray[np.intp]) -> HistGradientBoostingRegressor:
            X_fit = X_arr[rows]
            # A column with no value at all (a KPI this data set never reports) breaks the
            # binning of HistGradientBoosting; a constant stands in, it is never split on.
            empty = np.isnan(X_fit).all(axis=0)
            if empty.any():
                X_fit = X_fit.copy()
                X_fit[:, empty] = 0.0
            w_fit = None if w is None else w[rows]

            def one(weights: Array | None) -> HistGradientBoostingRegressor:
                return HistGradientBoostingRegressor(
                    loss=self.loss, max_iter=self.max_iter, learning_rate=self.learning_rate,
                    max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
                    l2_regularization=self.l2_regularization, random_state=self.random_state,
                    early_stopping=False).fit(X_fit, target[rows], sample_weight=weights)

            model = one(w_fit)
            if self.huber_quantile is not None and self.loss == "squared_error":
                res = np.abs(target[rows] - model.predict(X_fit))
                d = float(np.quantile(res, self.huber_quantile))
                if d > 0:
                    huber = np.minimum(1.0, d / np.maximum(res, 1e-12))
                    model = one(huber if w_fit is None else huber * w_fit)
            return model

        if len(cal_rows) < 2:  # every calibration row censored: calibrate on training rows
            cal_rows = fit_rows[~cens[fit_rows]]
            method = "training_rows"
        self.model_ = trees(fit_rows)
        self.lower_c_ = float(0.05 * np.median(np.abs(y_arr))) + 1e-9
        center = self._center(X_arr[cal_rows])
        scale = self._scale(X_arr[cal_rows], center)
        # Nonconformity score: the scaled over-estimate; the bound is center - q * scale.
        over = (center - y_arr[cal_rows]) / scale
        conformal = method == "grouped_conformal"
        self.lower_q_ = max(0.0, _score_quantile(over, self.lower_quantile, conformal))
        self.quantile_levels_ = np.array(QUANTILE_LEVELS)
        q_levels = np.array([_score_quantile(over, t, conformal) for t in QUANTILE_LEVELS])
        # Sampling noise must not make a lower level a higher bound.
        self.quantile_q_ = np.maximum.accumulate(q_levels[::-1])[::-1]
        self.calibration_: dict[str, Any] = {
            "method": method, "rows": len(over), "groups": cal_groups,
            "coverage": float(np.mean(over <= self.lower_q_))}
        if method != "training_rows":
            # The bound is calibrated on rows the trees did not see; the final trees then
            # learn from every row (they are no worse for it, the bound slightly conservative).
            self.model_ = trees(np.arange(n))
        self.n_iter_ = int(self.model_.n_iter_)
        return self

    def _center(self, X_arr: Array) -> Array:
        return np.asarray(self.model_.predict(X_arr) + self._base(X_arr), dtype=np.float64)

    def predict(self, X: ArrayLike) -> NDArray[np.float64]:
        """Central forecast for each row."""
        check_is_fitted(self)
        return self._center(validate_data(self, X, reset=False, ensure_all_finite="allow-nan"))

    def predict_lower(self, X: ArrayLike) -> NDArray[np.float64]:
        """Lower bound for each row, never above the central forecast."""
        return self.predict_both(X)[1]

    def predict_both(self, X: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(central, lower) in one pass."""
        center, scale = self.predict_center_scale(X)
        return center, center - self.lower_q_ * scale

    def predict_quantile(self, X: ArrayLike, level: ArrayLike) -> NDArray[np.float64]:
        """The ``level`` quantile forecast of each row (``level`` a scalar or one per row,
        clipped to ``quantile_levels_``; linear between the calibrated levels)."""
        center, scale = self.predict_center_scale(X)
        return center - self.multiple(level) * scale

    def multiple(self, level: ArrayLike) -> NDArray[np.float64]:
        """The calibrated multiple of the scale at ``level`` (interpolated, clipped)."""
        check_is_fitted(self)
        return np.asarray(np.interp(np.asarray(level, dtype=np.float64), self.quantile_levels_,
                                    self.quantile_q_),
                          dtype=np.float64)

    def predict_center_scale(self, X: ArrayLike
                             ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(central forecast, scale) of each row in one pass: every quantile forecast is
        ``center - multiple(level) * scale``, so the hot path derives any level from these."""
        check_is_fitted(self)
        X_arr = validate_data(self, X, reset=False, ensure_all_finite="allow-nan")
        center = self._center(X_arr)
        return center, self._scale(X_arr, center)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


def _score_quantile(over: Array, level: float, conformal: bool) -> float:
    """The multiple whose bound ``center - q * scale`` misses a fraction ``level`` of the
    calibration rows (scores ``over``): with ``conformal``, the split-conformal quantile
    ``ceil((m + 1) (1 - level)) / m`` (finite-sample valid on exchangeable groups)."""
    if conformal:
        m = len(over)
        rank = min(1.0, np.ceil((m + 1) * (1.0 - level)) / m)
        return float(np.quantile(over, rank, method="higher"))
    return float(np.quantile(over, 1.0 - level))
