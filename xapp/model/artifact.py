"""Model artifacts: skops files with an explicit trusted-types list, and their model cards.

An artifact is ``capacity-<version>.skops`` (the per-family regressors and their feature names)
beside ``capacity-<version>.card.json`` (what it was trained on, how it scored against the
baselines, library versions, and the SHA-256 of the artifact).  A directory of artifacts has a
``LATEST`` file naming the current one; it is replaced atomically (write, fsync, rename), so a
reader sees the old or the new name, never half of one.

Loading never unpickles: skops rebuilds only the types listed in :data:`TRUSTED_TYPES` (plus
the scikit-learn and numpy types skops itself trusts) and refuses anything else.  The card's
hash is checked before the file is parsed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import skops.io as sio

from xapp.model.estimator import CapacityRegressor
from xapp.model.features import feature_names

#: Format of the artifact's top-level dict; bumped when the features change incompatibly.
ARTIFACT_FORMAT = 3

#: Types beyond skops' defaults that an artifact may contain.  Anything else is refused.
TRUSTED_TYPES: tuple[str, ...] = (
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "xapp.model.estimator.CapacityRegressor",
)

LATEST = "LATEST"


class ArtifactError(Exception):
    """An artifact that cannot be used: missing, damaged, tampered with or incompatible."""


@dataclass(frozen=True)
class LoadedModel:
    """A verified artifact: the per-family regressors, their feature names and the card."""

    version: str
    models: dict[str, CapacityRegressor]
    feature_names: dict[str, tuple[str, ...]]
    card: dict[str, Any]
    path: Path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    import sklearn
    import skops

    return {"python": platform.python_version(), "numpy": np.__version__,
            "scikit-learn": sklearn.__version__, "skops": skops.__version__}


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        # mkstemp creates 0600; artifacts are read by the xApp's (non-root) user in the image.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save(models: dict[str, CapacityRegressor], directory: str | Path, card: dict[str, Any],
         *, make_latest: bool = True) -> Path:
    """Write a new versioned artifact and its card into ``directory``; returns the artifact path.

    ``card`` is completed with the version, format, features, library versions, size and hash.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": ARTIFACT_FORMAT,
        "families": dict(models),
        "feature_names": {fam: list(feature_names(fam)) for fam in models},
    }
    data = sio.dumps(payload, compression=zipfile.ZIP_DEFLATED, compresslevel=9)
    digest = hashlib.sha256(data).hexdigest()
    version = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{digest[:8]}"
    path = directory / f"capacity-{version}.skops"
    _atomic_write(path, data)
    full_card = {
        "name": "mcw capacity model",
        "version": version,
        "artifact": path.name,
        "format": ARTIFACT_FORMAT,
        "sha256": digest,
        "size_bytes": len(data),
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "families": sorted(models),
        "features": payload["feature_names"],
        "libraries": library_versions(),
        **card,
    }
    _atomic_write(card_path(path), (json.dumps(full_card, indent=2, sort_keys=True) + "\n")
                  .encode())
    if make_latest:
        _atomic_write(directory / LATEST, (path.name + "\n").encode())
    return path


def card_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name.removesuffix(".skops") + ".card.json")


def resolve(path: str | Path) -> Path:
    """The artifact a path means: a ``.skops`` file itself, or a directory's ``LATEST``."""
    p = Path(path)
    if p.is_dir():
        latest = p / LATEST
        try:
            name = latest.read_text().strip()
        except OSError as exc:
            raise ArtifactError(f"{p}: no {LATEST} file naming the current artifact") from exc
        if not name or "/" in name or name.startswith("."):
            raise ArtifactError(f"{latest}: bad artifact name {name!r}")
        return p / name
    return p


def load(path: str | Path) -> LoadedModel:
    """Load and verify an artifact (file or directory); raises :class:`ArtifactError`."""
    artifact = resolve(path)
    try:
        card = json.loads(card_path(artifact).read_text())
        data = artifact.read_bytes()
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{artifact}: cannot read artifact or card: {exc}") from exc
    if not isinstance(card, dict):
        raise ArtifactError(f"{artifact}: card is not a JSON object")
    digest = hashlib.sha256(data).hexdigest()
    if card.get("sha256") != digest:
        raise ArtifactError(f"{artifact}: SHA-256 {digest} does not match the card's "
                            f"{card.get('sha256')!r} (damaged or replaced)")
    try:
        untrusted = set(sio.get_untrusted_types(data=data)) - set(TRUSTED_TYPES)
        if untrusted:
            raise ArtifactError(f"{artifact}: refusing untrusted types {sorted(untrusted)}")
        payload = sio.loads(data, trusted=list(TRUSTED_TYPES))
    except ArtifactError:
        raise
    except Exception as exc:  # skops raises many types on a malformed file
        raise ArtifactError(f"{artifact}: cannot parse: {type(exc).__name__}: {exc}") from exc
    fmt = payload.get("format") if isinstance(payload, dict) else None
    if fmt != ARTIFACT_FORMAT:
        raise ArtifactError(f"{artifact}: format {fmt!r} is not {ARTIFACT_FORMAT}")
    models = payload.get("families")
    names = payload.get("feature_names")
    if not isinstance(models, dict) or not isinstance(names, dict):
        raise ArtifactError(f"{artifact}: no per-family models")
    checked: dict[str, CapacityRegressor] = {}
    feats: dict[str, tuple[str, ...]] = {}
    for fam, model in models.items():
        if not isinstance(model, CapacityRegressor):
            raise ArtifactError(f"{artifact}: family {fam!r} is a {type(model).__name__}")
        expected = feature_names(fam)
        if tuple(names.get(fam, ())) != expected or getattr(model, "n_features_in_", -1) != len(
                expected):
            raise ArtifactError(f"{artifact}: family {fam!r} was trained on other features "
                                "than this code computes (incompatible version)")
        checked[fam] = model
        feats[fam] = expected
    return LoadedModel(version=str(card.get("version", artifact.stem)), models=checked,
                       feature_names=feats, card=card, path=artifact)
