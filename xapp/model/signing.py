"""Ed25519 signatures of model artifacts: who made an artifact, not only that it is intact.

The card's SHA-256 proves the artifact was not damaged; anyone who can write the model volume
can also write a matching card.  A signature proves the operator's key made both.

A signature is a small JSON file beside the artifact, ``capacity-<version>.sig``::

    {"format": "mcw-model-signature/1", "algorithm": "ed25519", "key_id": "<16 hex>",
     "artifact": "capacity-<version>.skops", "artifact_sha256": "<hex>",
     "card_sha256": "<hex>", "signature": "<base64 of 64 bytes>"}

The signed message (:func:`message`) is a fixed prefix, the artifact's file name, the SHA-256
of the artifact's bytes and the SHA-256 of the card's bytes exactly as stored: neither file can
be edited, swapped for another artifact's or renamed without breaking it.  The card is signed
byte for byte, so it needs no canonical JSON form; that is why the signature is a file of its
own rather than a field of the card (a card cannot hold a signature over its own bytes), and
re-signing with a new key rewrites only the ``.sig``.  The hashes and the key id in the file
serve the error messages ("the card changed after signing", "signed by another key");
verification recomputes the hashes from the bytes it read and checks the signature over those.

Key files (:func:`load_private_key`, :func:`load_public_key`): PEM, as ``mcw model keygen`` and
``openssl genpkey -algorithm ed25519`` / ``openssl pkey -pubout`` write them (PKCS#8
``BEGIN PRIVATE KEY``, unencrypted, and ``BEGIN PUBLIC KEY``), or the raw 32-byte key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from xapp import bounded_json
from xapp.bounded_json import BoundedJsonError, JsonLimits
from xapp.files import atomic_write
from xapp.model.errors import ArtifactError
from xapp.model.files import read_bounded

SIGNATURE_FORMAT = "mcw-model-signature/1"
SIGNATURE_SUFFIX = ".sig"
#: A signature file is about 500 bytes; a key file under 200.
MAX_SIGNATURE_BYTES = 4096
#: A signature file is one flat object.
SIGNATURE_JSON_LIMITS = JsonLimits(max_bytes=MAX_SIGNATURE_BYTES, max_depth=1)
MAX_KEY_BYTES = 4096
_RAW_KEY_BYTES = 32
_SIGNATURE_BYTES = 64


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short fingerprint of a public key (first 16 hex digits of the SHA-256 of its raw
    bytes), to tell keys apart in messages and file names."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in ``path`` (PEM PKCS#8 or the raw 32-byte seed)."""
    p = Path(path)
    data = read_bounded(p, MAX_KEY_BYTES, "signing key")
    if len(data) == _RAW_KEY_BYTES:
        return Ed25519PrivateKey.from_private_bytes(data)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ArtifactError(f"signing key {p}: not an unencrypted PEM private key or a raw "
                            f"32-byte Ed25519 key ({exc})") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ArtifactError(f"signing key {p}: a {type(key).__name__}, not an Ed25519 key")
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """The Ed25519 public key in ``path`` (PEM ``BEGIN PUBLIC KEY`` or the raw 32 bytes)."""
    p = Path(path)
    data = read_bounded(p, MAX_KEY_BYTES, "public key")
    try:
        key = (Ed25519PublicKey.from_public_bytes(data) if len(data) == _RAW_KEY_BYTES
               else serialization.load_pem_public_key(data))
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ArtifactError(f"public key {p}: not a PEM public key or a raw 32-byte Ed25519 "
                            f"key ({exc})") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ArtifactError(f"public key {p}: a {type(key).__name__}, not an Ed25519 key")
    return key


def generate_key_pair(private_path: str | Path, public_path: str | Path) -> str:
    """Write a new key pair (private PEM with mode 0600, public PEM with 0644); returns the key
    id.  Refuses to overwrite either file: a lost signing key cannot be recovered."""
    priv, pub = Path(private_path), Path(public_path)
    for p in (priv, pub):
        if p.exists():
            raise ArtifactError(f"{p} exists; not overwriting a key file")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    public = key.public_key()
    atomic_write(priv, pem, mode=0o600)
    atomic_write(pub, public.public_bytes(serialization.Encoding.PEM,
                                          serialization.PublicFormat.SubjectPublicKeyInfo))
    return key_id(public)


def signature_path(artifact: Path) -> Path:
    """Where the signature of ``artifact`` lives: ``capacity-<version>.sig`` beside it."""
    return artifact.with_name(artifact.name.removesuffix(".skops") + SIGNATURE_SUFFIX)


def message(artifact_name: str, artifact_sha256: str, card_sha256: str) -> bytes:
    """The bytes an artifact's signature is made over (see the module docstring)."""
    return (f"{SIGNATURE_FORMAT}\nartifact {artifact_name}\nartifact-sha256 {artifact_sha256}\n"
            f"card-sha256 {card_sha256}\n").encode()


def sign(artifact_name: str, artifact_data: bytes, card_data: bytes,
         key: Ed25519PrivateKey) -> bytes:
    """The signature file's content for an artifact and its card, as stored."""
    a = hashlib.sha256(artifact_data).hexdigest()
    c = hashlib.sha256(card_data).hexdigest()
    doc = {"format": SIGNATURE_FORMAT, "algorithm": "ed25519",
           "key_id": key_id(key.public_key()), "artifact": artifact_name,
           "artifact_sha256": a, "card_sha256": c,
           "signature": base64.b64encode(key.sign(message(artifact_name, a, c))).decode()}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def verify(artifact_name: str, artifact_data: bytes, card_data: bytes, signature_file: bytes,
           public_key: Ed25519PublicKey) -> str:
    """Check that ``public_key`` signed this artifact and card; returns the key id.

    Raises :class:`ArtifactError` naming the reason: not a signature file, signed by another
    key, artifact or card changed after signing, or a signature that does not verify.
    """
    try:
        doc: Any = bounded_json.loads(signature_file, SIGNATURE_JSON_LIMITS)
    except BoundedJsonError as exc:
        raise ArtifactError(f"signature file is not JSON within bounds: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != SIGNATURE_FORMAT:
        raise ArtifactError(f"signature file is not in format {SIGNATURE_FORMAT}")
    if doc.get("algorithm") != "ed25519":
        raise ArtifactError(f"signature algorithm {doc.get('algorithm')!r} is not ed25519")
    trusted = key_id(public_key)
    if doc.get("key_id") != trusted:
        raise ArtifactError(f"signed by key {doc.get('key_id')!r}, but the trusted key is "
                            f"{trusted}")
    a = hashlib.sha256(artifact_data).hexdigest()
    c = hashlib.sha256(card_data).hexdigest()
    if doc.get("artifact") != artifact_name:
        raise ArtifactError(f"signature is of artifact {doc.get('artifact')!r}, not "
                            f"{artifact_name!r}")
    if doc.get("artifact_sha256") != a:
        raise ArtifactError("artifact changed after it was signed (SHA-256 "
                            f"{a} is not the signed {doc.get('artifact_sha256')!r})")
    if doc.get("card_sha256") != c:
        raise ArtifactError("card changed after it was signed (SHA-256 "
                            f"{c} is not the signed {doc.get('card_sha256')!r})")
    sig = doc.get("signature")
    try:
        raw = base64.b64decode(sig, validate=True) if isinstance(sig, str) else b""
    except (ValueError, binascii.Error) as exc:
        raise ArtifactError("signature is not base64") from exc
    if len(raw) != _SIGNATURE_BYTES:
        raise ArtifactError(f"signature is not base64 of {_SIGNATURE_BYTES} bytes")
    try:
        public_key.verify(raw, message(artifact_name, a, c))
    except InvalidSignature as exc:
        raise ArtifactError(f"signature does not verify with trusted key {trusted}") from exc
    return trusted
