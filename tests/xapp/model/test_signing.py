"""Signed artifacts: key files, what the signature covers, and the shipped release key."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.xapp.model.conftest import KeyPair
from xapp.cli import main
from xapp.model import ArtifactError, load, sign
from xapp.model.artifact import LATEST, card_path, release_public_key_path, resolve
from xapp.model.online import default_model_path, default_public_key_path
from xapp.model.signing import (
    generate_key_pair,
    key_id,
    load_private_key,
    load_public_key,
    signature_path,
)


def _copy(model_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "models"
    shutil.copytree(model_dir, dst)
    return dst


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path: Path) -> None:
    kid = generate_key_pair(tmp_path / "k", tmp_path / "k.pub")
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "k.pub").stat().st_mode) == 0o644
    assert (tmp_path / "k").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert key_id(load_public_key(tmp_path / "k.pub")) == kid
    assert key_id(load_private_key(tmp_path / "k").public_key()) == kid
    with pytest.raises(ArtifactError, match="not overwriting"):
        generate_key_pair(tmp_path / "k", tmp_path / "other.pub")


def test_raw_and_pem_keys_are_the_same_key(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    (tmp_path / "raw.key").write_bytes(raw)
    (tmp_path / "raw.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw))
    assert key_id(load_private_key(tmp_path / "raw.key").public_key()) == key_id(
        load_public_key(tmp_path / "raw.pub")) == key_id(key.public_key())


@pytest.mark.parametrize("content", [b"", b"hello", b"-----BEGIN PUBLIC KEY-----\nAAAAAAAA\n",
                                     b"x" * 10_000])
def test_bad_key_files_are_artifact_errors(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad").write_bytes(content)
    with pytest.raises(ArtifactError):
        load_public_key(tmp_path / "bad")
    with pytest.raises(ArtifactError):
        load_private_key(tmp_path / "bad")
    with pytest.raises(ArtifactError, match="cannot read"):
        load_public_key(tmp_path / "missing")


def test_rsa_key_is_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key(
    ).public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "rsa.pub").write_bytes(pem)
    with pytest.raises(ArtifactError, match="not an Ed25519 key"):
        load_public_key(tmp_path / "rsa.pub")


def test_unsigned_artifact_is_refused(model_dir: Path, tmp_path: Path,
                                      signing_key: KeyPair) -> None:
    d = _copy(model_dir, tmp_path)
    signature_path(resolve(d)).unlink()
    with pytest.raises(ArtifactError, match="unsigned: no signature file"):
        load(d, public_key=signing_key.public)


def test_artifact_signed_with_another_key_is_refused(model_dir: Path, tmp_path: Path,
                                                     signing_key: KeyPair,
                                                     other_key: KeyPair) -> None:
    d = _copy(model_dir, tmp_path)
    sign(d, other_key.private)
    with pytest.raises(ArtifactError, match=f"but the trusted key is {key_id(signing_key.public)}"):
        load(d, public_key=signing_key.public)
    assert load(d, public_key=other_key.public_file).key_id == key_id(other_key.public)


def test_signature_covers_the_card(model_dir: Path, tmp_path: Path,
                                   signing_key: KeyPair) -> None:
    """The card cannot be edited (its scores, say) nor swapped for another artifact's."""
    d = _copy(model_dir, tmp_path)
    card = card_path(resolve(d))
    doc = json.loads(card.read_text())
    doc["metrics_heldout"] = {"r2": 0.999}
    card.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="card changed after it was signed"):
        load(d, public_key=signing_key.public)


def test_signature_is_bound_to_the_artifact_name(model_dir: Path, tmp_path: Path,
                                                 signing_key: KeyPair) -> None:
    d = _copy(model_dir, tmp_path)
    src = resolve(d)
    dst = d / "capacity-renamed.skops"
    for a, b in ((src, dst), (card_path(src), card_path(dst)),
                 (signature_path(src), signature_path(dst))):
        shutil.copy(a, b)
    (d / LATEST).write_text(dst.name)
    with pytest.raises(ArtifactError, match="signature is of artifact"):
        load(d, public_key=signing_key.public)


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda doc: {**doc, "signature": "A" * 86 + "=="}, "does not verify"),
    (lambda doc: {**doc, "signature": "not base64!"}, "not base64"),
    (lambda doc: {**doc, "signature": 12}, "not base64"),
    (lambda doc: {**doc, "algorithm": "rsa"}, "not ed25519"),
    (lambda doc: {**doc, "format": "v0"}, "not in format"),
    (lambda doc: [doc], "nested deeper than 1 level"),
])
def test_forged_signature_files_are_refused(model_dir: Path, tmp_path: Path,
                                            signing_key: KeyPair, edit: object,
                                            reason: str) -> None:
    d = _copy(model_dir, tmp_path)
    sig = signature_path(resolve(d))
    sig.write_text(json.dumps(edit(json.loads(sig.read_text()))))  # type: ignore[operator]
    with pytest.raises(ArtifactError, match=reason):
        load(d, public_key=signing_key.public)


@pytest.mark.parametrize("content", [b"", b"{" * 3000, b"\xff" * 100, b" " * 5000])
def test_garbage_signature_files_are_refused(model_dir: Path, tmp_path: Path,
                                             signing_key: KeyPair, content: bytes) -> None:
    d = _copy(model_dir, tmp_path)
    signature_path(resolve(d)).write_bytes(content)
    with pytest.raises(ArtifactError):
        load(d, public_key=signing_key.public)


def test_a_signature_file_read_two_ways_is_refused(model_dir: Path, tmp_path: Path,
                                                   signing_key: KeyPair) -> None:
    """A key given twice is read as the first by some parsers and the last by others: the
    model's JSON goes through the same bounded parser as every other outside document."""
    d = _copy(model_dir, tmp_path)
    sig = signature_path(resolve(d))
    text = sig.read_text()
    sig.write_text(text.replace('"algorithm": "ed25519"',
                                '"algorithm": "rsa", "algorithm": "ed25519"'))
    with pytest.raises(ArtifactError, match="duplicate key 'algorithm'"):
        load(d, public_key=signing_key.public)


def test_sign_refuses_a_card_nested_past_the_bound(model_dir: Path, tmp_path: Path,
                                                   signing_key: KeyPair) -> None:
    d = _copy(model_dir, tmp_path)
    card_path(resolve(d)).write_text("[" * 500 + "]" * 500)
    with pytest.raises(ArtifactError, match="card is not JSON within bounds: nested deeper"):
        sign(d, signing_key.private)


def test_sign_refuses_an_artifact_its_card_does_not_name(model_dir: Path, tmp_path: Path,
                                                         signing_key: KeyPair) -> None:
    d = _copy(model_dir, tmp_path)
    resolve(d).write_bytes(b"PK\x05\x06" + bytes(18))
    with pytest.raises(ArtifactError, match="not signing"):
        sign(d, signing_key.private)


def test_cli_keygen_sign_info(model_dir: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(model_dir, tmp_path)
    key = tmp_path / "op.key"
    assert main(["model", "keygen", str(key)]) == 0
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert main(["model", "info", "--model", str(d), "--public-key", f"{key}.pub"]) == 1
    assert "signed by key" in capsys.readouterr().err
    assert main(["model", "sign", "--signing-key", str(key), "--model", str(d)]) == 0
    capsys.readouterr()
    assert main(["model", "info", "--model", str(d), "--public-key", f"{key}.pub",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"]
    assert main(["model", "keygen", str(key)]) == 1  # never overwrites
    assert "not overwriting" in capsys.readouterr().err


def test_shipped_model_is_signed_with_the_committed_release_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCW_MODEL", raising=False)
    monkeypatch.delenv("MCW_MODEL_PUBLIC_KEY_FILE", raising=False)
    assert default_public_key_path() == release_public_key_path()
    assert release_public_key_path().read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    loaded = load(default_model_path(), public_key=default_public_key_path())
    assert set(loaded.models) == {"cellular", "wifi", "lifi"}
    assert loaded.key_id == key_id(load_public_key(release_public_key_path()))
    # No private key is committed next to it.
    keys_dir = release_public_key_path().parent
    assert not [p for p in keys_dir.iterdir() if b"PRIVATE KEY" in p.read_bytes()]


def test_public_key_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("MCW_MODEL_PUBLIC_KEY_FILE", str(tmp_path / "op.pub"))
    assert default_public_key_path() == tmp_path / "op.pub"
