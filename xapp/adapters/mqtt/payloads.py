"""The three MQTT payloads of the channel: topics, building, and validation.

Contracts: ``schemas/mqtt-{weights,state,telemetry}.schema.json`` (JSON Schema 2020-12); the
Go agent validates against the same files. What does not validate is dropped, and the reason is
counted (``DropCounter``) and logged, so a misbehaving agent shows up in metrics and logs
instead of in the model's training data.

Validation engine: the schema files are checked against the 2020-12 meta-schema with
``jsonschema`` when loaded, and documents are validated with ``jsonschema-rs`` (compiled Rust).
The reason is the fleet: ``jsonschema`` takes about 200 µs per document here, so one tick of
10,000 weights plus 10,000 telemetry messages a second would cost four seconds of CPU per
second; ``jsonschema-rs`` takes about 1 µs. ``tests/channel/test_payloads.py`` runs every case
through both engines and requires them to agree.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final, Literal

import jsonschema_rs
from jsonschema import Draft202012Validator

from xapp.core.weights import WeightDecision
from xapp.schemas import schemas_dir

log = logging.getLogger(__name__)

TOPIC_PREFIX: Final = "mcw/v1/cpe"
WATS: Final = ("nr", "lte", "wifi", "lifi")
MODES: Final = ("load_balancing", "fixed_split", "active_standby", "latency_bound")
MAX_WEIGHT: Final = 255
CPE_ID_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

Kind = Literal["weights", "state", "telemetry"]
KINDS: Final[tuple[Kind, ...]] = ("weights", "state", "telemetry")
SCHEMA_IDS: Final[dict[Kind, str]] = {
    "weights": "mcw.weights.v1", "state": "mcw.state.v1", "telemetry": "mcw.telemetry.v1",
}


class PayloadError(ValueError):
    """A payload that does not satisfy its schema; ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@cache
def load_schema(kind: Kind) -> dict[str, Any]:
    """The JSON Schema of one payload kind, checked against the 2020-12 meta-schema."""
    path = schemas_dir() / f"mqtt-{kind}.schema.json"
    schema: dict[str, Any] = json.loads(path.read_text())
    Draft202012Validator.check_schema(schema)
    return schema


@cache
def validator(kind: Kind) -> Any:
    """The compiled (jsonschema-rs) validator of one payload kind, built once per process."""
    return jsonschema_rs.validator_for(load_schema(kind))


def topic(cpe_id: str, kind: Kind) -> str:
    """``mcw/v1/cpe/{cpe_id}/{kind}``; refuses ids that would escape their topic level."""
    if not CPE_ID_RE.match(cpe_id):
        raise PayloadError("bad-cpe-id", f"{cpe_id!r} is not a valid cpe_id")
    return f"{TOPIC_PREFIX}/{cpe_id}/{kind}"


def parse_topic(name: str) -> tuple[str, Kind] | None:
    """(cpe_id, kind) of a channel topic, or None when it is not one."""
    parts = name.split("/")
    if len(parts) != 5 or "/".join(parts[:3]) != TOPIC_PREFIX:
        return None
    cpe_id, kind = parts[3], parts[4]
    if kind not in KINDS or not CPE_ID_RE.match(cpe_id):
        return None
    return cpe_id, kind  # type: ignore[return-value]


def _first_error(kind: Kind, doc: object) -> str | None:
    v = validator(kind)
    if v.is_valid(doc):
        return None
    for err in v.iter_errors(doc):
        where = "/".join(str(p) for p in err.instance_path) or "(root)"
        return f"{where}: {err.message}"
    return "(root): invalid"


def check(kind: Kind, doc: object) -> None:
    """Raise :class:`PayloadError` (reason ``schema``) unless ``doc`` validates."""
    problem = _first_error(kind, doc)
    if problem is not None:
        raise PayloadError("schema", f"{kind} {problem}")


def build_weights(cpe_id: str, version: int, decision: WeightDecision, *, mode: str,
                  lease_s: float, issued_at_ms: int) -> dict[str, Any]:
    """The ``mcw.weights.v1`` document for one CPE, validated.

    Raises :class:`PayloadError` for weights that may never be sent (all zero, out of range,
    unknown WAT) so nothing invalid leaves the xApp.
    """
    doc: dict[str, Any] = {
        "schema": SCHEMA_IDS["weights"],
        "cpe_id": cpe_id,
        "version": int(version),
        "issued_at_ms": int(issued_at_ms),
        "lease_s": lease_s,
        "mode": mode,
        "reason": decision.reason[:256],
        "weights": {str(w): v for w, v in decision.weights.items()},
    }
    check("weights", doc)
    return doc


def encode(doc: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, the wire form of every payload."""
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class DropCounter:
    """Counts (and logs) payloads dropped per (kind, reason); safe for concurrent use."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def drop(self, kind: str, reason: str, detail: str, topic_name: str = "") -> None:
        with self._lock:
            self.counts[(kind, reason)] += 1
        log.warning("dropped %s payload on %r: %s: %s", kind, topic_name, reason, detail)

    def total(self, kind: str | None = None) -> int:
        with self._lock:
            return sum(n for (k, _), n in self.counts.items() if kind is None or k == kind)

    def snapshot(self) -> dict[str, int]:
        """``{"kind/reason": count}`` for metrics and ``--json`` output."""
        with self._lock:
            return {f"{k}/{r}": n for (k, r), n in sorted(self.counts.items())}


def decode(topic_name: str, payload: bytes, drops: DropCounter
           ) -> tuple[Kind, dict[str, Any]] | None:
    """Parse and validate a received message; None (counted, logged) when it must be dropped.

    Reasons: ``bad-topic``, ``bad-json``, ``schema``, ``cpe-id-mismatch`` (the topic's
    cpe_id differs from the payload's: a CPE may only speak for itself).
    """
    parsed = parse_topic(topic_name)
    if parsed is None:
        drops.drop("unknown", "bad-topic", "not a channel topic", topic_name)
        return None
    cpe_id, kind = parsed
    try:
        doc = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        drops.drop(kind, "bad-json", str(exc), topic_name)
        return None
    problem = _first_error(kind, doc)
    if problem is not None:
        drops.drop(kind, "schema", problem, topic_name)
        return None
    if doc["cpe_id"] != cpe_id:
        drops.drop(kind, "cpe-id-mismatch", f"payload cpe_id {doc['cpe_id']!r}", topic_name)
        return None
    return kind, doc


_ENCODE_FLOAT = float.__repr__  # what json.dumps writes for a finite float


def encode_weights(doc: Mapping[str, Any]) -> bytes:
    """:func:`encode` of a *validated* ``mcw.weights.v1`` document, about 5x faster.

    The publisher encodes one document per CPE and tick, so the generic sorted-keys
    ``json.dumps`` was a tenth of the per-message cost. After validation every field has a
    known type, and ``cpe_id`` and ``mode`` (pattern, enum) need no escaping, so the document
    is written from a fixed template in sorted key order; the output is byte-identical to
    :func:`encode` (``tests/channel/test_payloads.py`` checks that property-based).
    """
    lease = doc["lease_s"]
    weights = doc["weights"]
    reason = doc.get("reason")
    return (
        f'{{"cpe_id":"{doc["cpe_id"]}","issued_at_ms":{doc["issued_at_ms"]},'
        f'"lease_s":{_ENCODE_FLOAT(lease) if isinstance(lease, float) else int(lease)},'
        f'"mode":"{doc["mode"]}",'
        + ("" if reason is None else f'"reason":{json.dumps(reason)},')
        + f'"schema":"mcw.weights.v1","version":{doc["version"]},"weights":{{'
        + ",".join(f'"{w}":{weights[w]}' for w in sorted(weights))
        + "}}"
    ).encode()
