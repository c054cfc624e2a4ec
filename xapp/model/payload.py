"""The artifact's payload: the dict an artifact holds, built for saving and checked on loading.

An artifact holds ``{"format": ARTIFACT_FORMAT, "families": {family: CapacityRegressor},
"feature_names": {family: [name, ...]}}`` with exactly the families the xApp serves
(:data:`REQUIRED_FAMILIES`): a missing family would turn every forecast of its WATs into NaN,
an unknown one means the artifact was made for other code.  Each regressor must have been fit
on the feature columns this code computes, in this order.

The checks also look inside the trees before anything predicts with them: scikit-learn's tree
walker is compiled code that trusts its node table (child indices, feature indices, categorical
bitsets), so a node pointing outside the table or at a feature the input lacks must be refused
here rather than read out of bounds later.  Every check raises :class:`ArtifactError` only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.ensemble._hist_gradient_boosting.common import PREDICTOR_RECORD_DTYPE
from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

from xapp.core.kpis import FAMILIES
from xapp.model.errors import ArtifactError
from xapp.model.estimator import CapacityRegressor
from xapp.model.features import feature_names

#: Format of the payload dict; bumped when the features or the regressor's learned state
#: change incompatibly (4: quantile multiples for the planning level).
ARTIFACT_FORMAT = 4

#: Families every artifact must hold: the xApp forecasts each of them.
REQUIRED_FAMILIES: tuple[str, ...] = FAMILIES


def build(models: Mapping[str, CapacityRegressor]) -> dict[str, Any]:
    """The payload of ``models``; refuses what :func:`check` would refuse on loading."""
    payload: dict[str, Any] = {
        "format": ARTIFACT_FORMAT,
        "families": dict(models),
        "feature_names": {fam: list(feature_names(fam)) for fam in models
                          if fam in REQUIRED_FAMILIES},
    }
    check(payload)
    return payload


def check(payload: object) -> tuple[dict[str, CapacityRegressor], dict[str, tuple[str, ...]]]:
    """The per-family regressors and feature names of a loaded payload, after checking them."""
    fmt = payload.get("format") if isinstance(payload, dict) else None
    if fmt != ARTIFACT_FORMAT:
        raise ArtifactError(f"format {fmt!r} is not {ARTIFACT_FORMAT}: an artifact of another "
                            "version of mcw (retrain it with `mcw model train`)")
    assert isinstance(payload, dict)
    models = payload.get("families")
    names = payload.get("feature_names")
    if not isinstance(models, dict) or not isinstance(names, dict):
        raise ArtifactError("no per-family models and feature names")
    unknown = sorted(repr(f)[:40] for f in (set(models) | set(names)) - set(REQUIRED_FAMILIES))
    if unknown:
        raise ArtifactError(f"unknown families {', '.join(unknown)} (known: "
                            f"{', '.join(REQUIRED_FAMILIES)})")
    missing = [f for f in REQUIRED_FAMILIES if f not in models]
    if missing:
        raise ArtifactError(f"no model for families {', '.join(missing)}: the xApp needs "
                            f"{', '.join(REQUIRED_FAMILIES)}")
    checked: dict[str, CapacityRegressor] = {}
    feats: dict[str, tuple[str, ...]] = {}
    for fam in REQUIRED_FAMILIES:
        expected = feature_names(fam)
        got = names.get(fam)
        if not isinstance(got, list) or tuple(got) != expected:
            raise ArtifactError(f"family {fam!r} was trained on other features than this code "
                                "computes (incompatible version or malformed names)")
        model = models[fam]
        if not isinstance(model, CapacityRegressor):
            raise ArtifactError(f"family {fam!r} is a {type(model).__name__}, not a "
                                "CapacityRegressor")
        _check_regressor(model, len(expected), fam)
        checked[fam] = model
        feats[fam] = expected
    return checked, feats


def _check_regressor(model: CapacityRegressor, n_features: int, fam: str) -> None:
    where = f"family {fam!r}"
    if getattr(model, "n_features_in_", None) != n_features:
        raise ArtifactError(f"{where} expects {getattr(model, 'n_features_in_', None)!r} "
                            f"features, this code computes {n_features}")
    for name in ("base_column", "scale_column"):
        j = getattr(model, name, None)
        if j is not None and not (isinstance(j, int) and 0 <= j < n_features):
            raise ArtifactError(f"{where}: {name} {j!r} is not a feature column")
    for name in ("lower_c_", "lower_q_"):
        v = getattr(model, name, None)
        if not isinstance(v, float | int) or not math.isfinite(v):
            raise ArtifactError(f"{where}: {name} {v!r} is not a finite number")
    levels = getattr(model, "quantile_levels_", None)
    mult = getattr(model, "quantile_q_", None)
    if (not isinstance(levels, np.ndarray) or not isinstance(mult, np.ndarray)
            or levels.dtype != np.float64 or mult.dtype != np.float64
            or levels.ndim != 1 or not 1 <= len(levels) <= 64 or mult.shape != levels.shape
            or not np.isfinite(levels).all() or not np.isfinite(mult).all()
            or not ((levels > 0.0) & (levels < 1.0)).all() or (np.diff(levels) <= 0).any()):
        raise ArtifactError(f"{where}: quantile levels and multiples are not two finite, "
                            "equally long float arrays over ascending levels in (0, 1)")
    trees = getattr(model, "model_", None)
    if not isinstance(trees, HistGradientBoostingRegressor):
        raise ArtifactError(f"{where}: fitted model is a {type(trees).__name__}")
    if (getattr(trees, "n_features_in_", None) != n_features
            or getattr(trees, "is_categorical_", None) is not None
            or getattr(trees, "n_trees_per_iteration_", None) != 1):
        raise ArtifactError(f"{where}: trees fit on another input (features, categorical "
                            "columns or outputs)")
    # The raw-input predictor builds category bitsets from the bin mapper in compiled code.
    cats = getattr(getattr(trees, "_bin_mapper", None), "is_categorical_", None)
    if not isinstance(cats, np.ndarray) or cats.shape != (n_features,) or cats.any():
        raise ArtifactError(f"{where}: bin mapper is not of {n_features} numeric features")
    predictors = getattr(trees, "_predictors", None)
    if not isinstance(predictors, list) or not predictors:
        raise ArtifactError(f"{where}: no trees")
    for i, iteration in enumerate(predictors):
        if not isinstance(iteration, list) or len(iteration) != 1:
            raise ArtifactError(f"{where}: iteration {i} does not hold one tree")
        _check_tree(iteration[0], n_features, f"{where} tree {i}")


def _check_tree(tree: object, n_features: int, where: str) -> None:
    if not isinstance(tree, TreePredictor):
        raise ArtifactError(f"{where} is a {type(tree).__name__}")
    nodes = tree.nodes
    if not isinstance(nodes, np.ndarray) or nodes.dtype != PREDICTOR_RECORD_DTYPE \
            or nodes.ndim != 1 or len(nodes) == 0:
        raise ArtifactError(f"{where}: node table is not scikit-learn's predictor records")
    if nodes["is_categorical"].any():
        raise ArtifactError(f"{where}: categorical split in a model without categories")
    inner = np.flatnonzero(nodes["is_leaf"] == 0)
    feature = nodes["feature_idx"][inner]
    left = nodes["left"][inner].astype(np.int64)
    right = nodes["right"][inner].astype(np.int64)
    n = len(nodes)
    # Children after their parent: the walk from the root ends in at most n steps (no cycle).
    if ((feature < 0) | (feature >= n_features)).any() or \
            ((left <= inner) | (left >= n) | (right <= inner) | (right >= n)).any():
        raise ArtifactError(f"{where}: a split points outside the node table or the features")
