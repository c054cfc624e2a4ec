"""The capacity model: features, the scikit-learn regressor, artifacts and online use.

Typical use in the control loop::

    from xapp.model import load_estimator
    estimator = load_estimator()          # the shipped default in models/default/
    forecast = estimator.step(frame)      # CapacityForecast per (cpe, wat) row

Importing this package pulls in scikit-learn; the xApp imports it lazily.
"""

from __future__ import annotations

from pathlib import Path

from xapp.model.artifact import TRUSTED_TYPES, ArtifactError, LoadedModel, load, save
from xapp.model.estimator import CapacityRegressor
from xapp.model.online import (
    EstimatorCounters,
    ModelEstimator,
    ModelHolder,
    default_model_path,
)

__all__ = [
    "TRUSTED_TYPES",
    "ArtifactError",
    "CapacityRegressor",
    "EstimatorCounters",
    "LoadedModel",
    "ModelEstimator",
    "ModelHolder",
    "default_model_path",
    "load",
    "load_estimator",
    "save",
]


def load_estimator(path: str | Path | None = None, *, hot_reload: bool = False,
                   stale_after_s: float = 10.0) -> ModelEstimator:
    """A ready :class:`ModelEstimator` on the artifact at ``path`` (default: shipped model).

    With ``hot_reload`` the artifact is polled every 5 s and swapped atomically when it changes.
    Raises :class:`ArtifactError` if the artifact is missing, damaged or incompatible.
    """
    holder = ModelHolder(default_model_path() if path is None else path)
    if hot_reload:
        holder.start()
    return ModelEstimator(holder, stale_after_s=stale_after_s)
