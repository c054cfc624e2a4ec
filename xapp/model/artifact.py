"""Model artifacts: signed skops files, their model cards, and loading them safely.

An artifact is three files in a directory:

- ``capacity-<version>.skops``: the per-family regressors and their feature names
  (:mod:`xapp.model.payload`), a skops zip archive;
- ``capacity-<version>.card.json``: what it was trained on, how it scored against the
  baselines, library versions, and the SHA-256 of the artifact;
- ``capacity-<version>.sig``: the operator's Ed25519 signature over the artifact's and the
  card's bytes (:mod:`xapp.model.signing`).

A ``LATEST`` file names the current artifact; it is replaced atomically after the three files
are in place, so a reader sees the old or the new name, never half of one.

:func:`load` trusts nothing in the directory, in this order: each file's size is capped before
it is read (:class:`~xapp.model.archive.Limits`); the signature is checked with the trusted
public key before anything is parsed; the archive's declared sizes and array headers are checked
before skops allocates them (:mod:`xapp.model.archive`); skops rebuilds only the types listed in
:data:`TRUSTED_TYPES` (plus the scikit-learn and numpy types skops itself trusts), never
unpickles; and the payload must hold every family the xApp needs, fit on this code's features,
with trees whose node tables are sound (:mod:`xapp.model.payload`).  Every failure is an
:class:`ArtifactError` naming the file and the reason.

Which key is trusted is the caller's choice (``controls.model.public_key_file`` in the xApp).
The repository ships the project's release public key, :func:`release_public_key_path`
(``keys/model-signing.pub``); the bundled ``models/default`` artifact is signed with its
private key, which is not in the repository.  An operator who trains its own models generates
its own pair (``mcw model keygen``), signs with the private key (``mcw model train
--signing-key``, ``mcw model sign``) and gives the xApp the public key.
"""

from __future__ import annotations

import hashlib
import json
import platform
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import skops.io as sio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from xapp import bounded_json
from xapp.bounded_json import BoundedJsonError, JsonLimits
from xapp.files import atomic_write
from xapp.model import payload as payload_mod
from xapp.model import signing
from xapp.model.archive import DEFAULT_LIMITS, Limits, check_archive
from xapp.model.errors import ArtifactError
from xapp.model.estimator import CapacityRegressor
from xapp.model.files import read_bounded
from xapp.model.payload import ARTIFACT_FORMAT, REQUIRED_FAMILIES

__all__ = [
    "ARTIFACT_FORMAT",
    "LATEST",
    "REQUIRED_FAMILIES",
    "TRUSTED_TYPES",
    "ArtifactError",
    "Limits",
    "LoadedModel",
    "card_path",
    "load",
    "release_public_key_path",
    "resolve",
    "save",
    "sign",
    "signature_path",
]

#: Types beyond skops' defaults that an artifact may contain.  Anything else is refused.
#: skops leaves TreePredictor out of its defaults on purpose: scikit-learn walks its node
#: table without bounds checks.  It is trusted here only because :func:`payload.check` checks
#: every node (children, features, no categories) before anything predicts with it.
TRUSTED_TYPES: tuple[str, ...] = (
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "xapp.model.estimator.CapacityRegressor",
)

LATEST = "LATEST"
#: ``LATEST`` holds one file name.
MAX_LATEST_BYTES = 256

signature_path = signing.signature_path

#: Where a trusted public key may come from: a loaded key or a key file.
PublicKey = Ed25519PublicKey | str | Path


@dataclass(frozen=True)
class LoadedModel:
    """A verified artifact: the per-family regressors, their feature names, the card and the
    id of the key that signed it."""

    version: str
    models: dict[str, CapacityRegressor]
    feature_names: dict[str, tuple[str, ...]]
    card: dict[str, Any]
    path: Path
    key_id: str = ""


def release_public_key_path() -> Path:
    """The project's release public key in the repository, ``keys/model-signing.pub``: the key
    the bundled ``models/default`` artifact is signed with."""
    return Path(__file__).resolve().parents[2] / "keys" / "model-signing.pub"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    import cryptography
    import sklearn
    import skops

    return {"python": platform.python_version(), "numpy": np.__version__,
            "scikit-learn": sklearn.__version__, "skops": skops.__version__,
            "cryptography": cryptography.__version__}


def card_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name.removesuffix(".skops") + ".card.json")


def save(models: dict[str, CapacityRegressor], directory: str | Path, card: dict[str, Any],
         *, signing_key: Ed25519PrivateKey, make_latest: bool = True,
         limits: Limits = DEFAULT_LIMITS) -> Path:
    """Write a new versioned, signed artifact and its card into ``directory``; returns the
    artifact path.

    ``card`` is completed with the version, format, features, library versions, size, hash and
    signing key id.  Refuses (:class:`ArtifactError`, nothing written) an artifact that
    :func:`load` would refuse: a missing family, or one above ``limits``.
    """
    directory = Path(directory)
    payload = payload_mod.build(models)
    data = sio.dumps(payload, compression=zipfile.ZIP_DEFLATED, compresslevel=9)
    check_archive(data, limits)
    digest = hashlib.sha256(data).hexdigest()
    version = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{digest[:8]}"
    path = directory / f"capacity-{version}.skops"
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
        "signing_key_id": signing.key_id(signing_key.public_key()),
        **card,
    }
    card_data = (json.dumps(full_card, indent=2, sort_keys=True) + "\n").encode()
    if len(card_data) > limits.max_card_bytes:
        raise ArtifactError(f"card of {len(card_data)} bytes is above the "
                            f"{limits.max_card_bytes}-byte cap")
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)
    atomic_write(card_path(path), card_data)
    atomic_write(signature_path(path), signing.sign(path.name, data, card_data, signing_key))
    if make_latest:
        atomic_write(directory / LATEST, (path.name + "\n").encode())
    return path


def sign(path: str | Path, signing_key: Ed25519PrivateKey,
         limits: Limits = DEFAULT_LIMITS) -> Path:
    """(Re)sign an existing artifact (file or directory) and its card as they are; returns the
    signature file.  The card's hash must match the artifact: a key signs what it vouches for.
    The card itself is left untouched (its bytes are what is signed)."""
    artifact = resolve(path)
    data = read_bounded(artifact, limits.max_file_bytes, "artifact")
    card_data = read_bounded(card_path(artifact), limits.max_card_bytes, "card")
    card = _parse_card(card_data)
    digest = hashlib.sha256(data).hexdigest()
    if card.get("sha256") != digest:
        raise ArtifactError(f"{artifact}: SHA-256 {digest} does not match the card's "
                            f"{card.get('sha256')!r}; not signing")
    out = signature_path(artifact)
    atomic_write(out, signing.sign(artifact.name, data, card_data, signing_key))
    return out


def resolve(path: str | Path) -> Path:
    """The artifact a path means: a ``.skops`` file itself, or a directory's ``LATEST``."""
    p = Path(path)
    if p.is_dir():
        latest = p / LATEST
        try:
            name = read_bounded(latest, MAX_LATEST_BYTES, LATEST).decode().strip()
        except UnicodeDecodeError as exc:
            raise ArtifactError(f"{latest}: not a file name") from exc
        except ArtifactError as exc:
            raise ArtifactError(f"{p}: no readable {LATEST} file naming the current artifact "
                                f"({exc})") from exc
        if not name or "/" in name or "\\" in name or name.startswith(".") \
                or not name.endswith(".skops"):
            raise ArtifactError(f"{latest}: bad artifact name {name!r}")
        return p / name
    return p


def load(path: str | Path, *, public_key: PublicKey,
         limits: Limits = DEFAULT_LIMITS) -> LoadedModel:
    """Load and verify an artifact (file or directory) signed with ``public_key``'s private
    key; raises :class:`ArtifactError` and nothing else (see the module docstring)."""
    artifact = Path(path)
    try:
        artifact = resolve(path)
        return _load(artifact, public_key, limits)
    except ArtifactError as exc:
        text = str(exc)
        raise ArtifactError(text if text.startswith(str(artifact)) else f"{artifact}: {text}"
                            ) from exc
    except Exception as exc:  # whatever a library raised on a file it could not handle
        raise ArtifactError(f"{artifact}: cannot load: {type(exc).__name__}: {exc}") from exc


def _load(artifact: Path, public_key: PublicKey, limits: Limits) -> LoadedModel:
    key = public_key if isinstance(public_key, Ed25519PublicKey) else \
        signing.load_public_key(public_key)
    data = read_bounded(artifact, limits.max_file_bytes, "artifact")
    card_data = read_bounded(card_path(artifact), limits.max_card_bytes, "card")
    sig_file = signature_path(artifact)
    if not sig_file.exists():
        raise ArtifactError(f"unsigned: no signature file {sig_file.name} (sign it with "
                            "`mcw model sign`)")
    sig = read_bounded(sig_file, signing.MAX_SIGNATURE_BYTES, "signature")
    key_id = signing.verify(artifact.name, data, card_data, sig, key)
    card = _parse_card(card_data)
    digest = hashlib.sha256(data).hexdigest()
    if card.get("sha256") != digest:  # signed, but the signer's card names other bytes
        raise ArtifactError(f"SHA-256 {digest} does not match the card's "
                            f"{card.get('sha256')!r}")
    check_archive(data, limits)
    try:
        untrusted = set(sio.get_untrusted_types(data=data)) - set(TRUSTED_TYPES)
    except Exception as exc:  # skops raises many types on a malformed schema
        raise ArtifactError(f"cannot parse: {type(exc).__name__}: {exc}") from exc
    if untrusted:
        raise ArtifactError(f"refusing untrusted types {sorted(untrusted)[:10]}")
    try:
        payload = sio.loads(data, trusted=list(TRUSTED_TYPES))
    except Exception as exc:
        raise ArtifactError(f"cannot parse: {type(exc).__name__}: {exc}") from exc
    models, feats = payload_mod.check(payload)
    return LoadedModel(version=str(card.get("version", artifact.stem)), models=models,
                       feature_names=feats, card=card, path=artifact, key_id=key_id)


def _parse_card(card_data: bytes) -> dict[str, Any]:
    # Its size was bounded when it was read (``Limits.max_card_bytes``).
    try:
        card = bounded_json.loads(card_data, JsonLimits(max_bytes=len(card_data)))
    except BoundedJsonError as exc:
        raise ArtifactError(f"card is not JSON within bounds: {exc}") from exc
    if not isinstance(card, dict):
        raise ArtifactError("card is not a JSON object")
    return card
