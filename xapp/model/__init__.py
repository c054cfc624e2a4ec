"""The capacity model: features, the scikit-learn regressor, artifacts and online use.

Typical use in the control loop::

    from xapp.model import load_estimator
    estimator = load_estimator()          # the shipped default in models/default/
    forecast = estimator.step(frame)      # CapacityForecast per (cpe, wat, direction) row

Artifacts are loaded only when signed with a trusted Ed25519 key (the project's release key
in ``keys/`` unless told otherwise); see :mod:`xapp.model.artifact`.  Importing this package
pulls in scikit-learn; the xApp imports it lazily.
"""

from __future__ import annotations

from pathlib import Path

from xapp.model.archive import Limits
from xapp.model.artifact import TRUSTED_TYPES, LoadedModel, PublicKey, load, save, sign
from xapp.model.errors import ArtifactError
from xapp.model.estimator import CapacityRegressor
from xapp.model.online import (
    EstimatorCounters,
    ModelEstimator,
    ModelHolder,
    default_model_path,
    default_public_key_path,
)
from xapp.model.signing import generate_key_pair, load_private_key, load_public_key

__all__ = [
    "TRUSTED_TYPES",
    "ArtifactError",
    "CapacityRegressor",
    "EstimatorCounters",
    "Limits",
    "LoadedModel",
    "ModelEstimator",
    "ModelHolder",
    "PublicKey",
    "default_model_path",
    "default_public_key_path",
    "generate_key_pair",
    "load",
    "load_estimator",
    "load_private_key",
    "load_public_key",
    "save",
    "sign",
]


def load_estimator(path: str | Path | None = None, *, public_key: PublicKey | None = None,
                   hot_reload: bool = False, stale_after_s: float = 10.0) -> ModelEstimator:
    """A ready :class:`ModelEstimator` on the artifact at ``path`` (default: shipped model),
    signed with ``public_key``'s private key (default: :func:`default_public_key_path`).

    With ``hot_reload`` the artifact is polled every 5 s and swapped atomically when it changes.
    Raises :class:`ArtifactError` if the artifact is missing, unsigned, damaged or incompatible.
    """
    holder = ModelHolder(default_model_path() if path is None else path, public_key)
    if hot_reload:
        holder.start()
    return ModelEstimator(holder, stale_after_s=stale_after_s)
