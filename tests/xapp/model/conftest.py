"""Fixtures of the model tests: signing keys made for the session, and small trained artifacts
signed with them (the real influxd is tests/support/servers.py's)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from xapp.model.estimator import CapacityRegressor


@pytest.fixture(scope="session", autouse=True)
def _one_openmp_thread() -> Iterator[None]:
    """Tiny fits and predictions are slower with OpenMP threads (and the test machine is
    shared): run the model code on one thread, as the benchmark measures it."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def synthetic_table(seed: int = 0, n_cpes: int = 3, duration_s: float = 120.0) -> pd.DataFrame:
    """Twin telemetry of the wifi-walk scenario (all three families)."""
    from twin.kpis import synthesize
    from twin.scenarios import build

    scn = build("wifi-walk", n_cpes=n_cpes, seed=seed, duration_s=duration_s)
    return synthesize(scn, period_s=1.0, censor_fraction=0.1, seed=seed,
                      cpe_prefix=f"s{seed}-")


@dataclass(frozen=True)
class KeyPair:
    """A signing key made for the test session, and its public key file."""

    private: Ed25519PrivateKey
    private_file: Path
    public_file: Path

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    """An Ed25519 key pair generated for this session (never the project's release key)."""
    from xapp.model.signing import generate_key_pair, load_private_key

    d = tmp_path_factory.mktemp("keys")
    generate_key_pair(d / "test.key", d / "test.pub")
    return KeyPair(load_private_key(d / "test.key"), d / "test.key", d / "test.pub")


@pytest.fixture(scope="session")
def other_key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    """A second key pair: an attacker's, or the previous operator's."""
    from xapp.model.signing import generate_key_pair, load_private_key

    d = tmp_path_factory.mktemp("other-keys")
    generate_key_pair(d / "other.key", d / "other.pub")
    return KeyPair(load_private_key(d / "other.key"), d / "other.key", d / "other.pub")


@pytest.fixture(scope="session")
def trained_models() -> dict[str, CapacityRegressor]:
    """Small per-family regressors trained on synthetic data."""
    from xapp.model import training

    ds = training.replay(pd.concat([synthetic_table(0), synthetic_table(1)], ignore_index=True))
    return training.fit_families(ds, None, {"max_iter": 20})


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory, signing_key: KeyPair,
              trained_models: dict[str, CapacityRegressor]) -> Path:
    """A directory with one small artifact signed with :func:`signing_key` (and LATEST)."""
    from xapp.model import artifact

    directory = tmp_path_factory.mktemp("models")
    artifact.save(trained_models, directory, {"training": {"note": "test"}},
                  signing_key=signing_key.private)
    return directory


def write_signed(directory: Path, data: bytes, key: Ed25519PrivateKey | None,
                 name: str = "capacity-test.skops", *, latest: bool = True) -> Path:
    """Write raw artifact bytes with a matching card, signed with ``key`` (unsigned if None),
    and point LATEST at them: how a crafted artifact reaches the parser past the signature."""
    from xapp.model import artifact, signing

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    card = (json.dumps({"version": name, "artifact": name,
                        "sha256": hashlib.sha256(data).hexdigest()}) + "\n").encode()
    artifact.card_path(path).write_bytes(card)
    sig = signing.signature_path(path)
    if key is None:
        sig.unlink(missing_ok=True)
    else:
        sig.write_bytes(signing.sign(name, data, card, key))
    if latest:
        (directory / artifact.LATEST).write_text(name + "\n")
    return path
