"""The MQTT payloads' contract: the kinds, their schemas, and validation against them.

Contracts: ``schemas/mqtt-{weights,state,telemetry,proxy-state}.schema.json`` (JSON Schema
2020-12); the Go agent validates against the same files.  Topics are in
:mod:`xapp.adapters.mqtt.topics`, the weights encoder in
:mod:`xapp.adapters.mqtt.weights_encoder`, the receive side in
:mod:`xapp.adapters.mqtt.decoder`.

Validation engine: the schema files are checked against the 2020-12 meta-schema with
``jsonschema`` when loaded, and documents are validated with ``jsonschema-rs`` (compiled Rust).
The reason is the fleet: ``jsonschema`` takes about 200 µs per document here, so one tick of
10,000 weights plus 10,000 telemetry messages a second would cost four seconds of CPU per
second; ``jsonschema-rs`` takes about 1 µs. ``tests/xapp/adapters/mqtt/test_payloads.py`` runs
every case through both engines and requires them to agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any, Final, Literal

import jsonschema_rs
from jsonschema import Draft202012Validator

from xapp.schemas import schemas_dir

WATS: Final = ("nr", "lte", "wifi", "lifi")
MODES: Final = ("load_balancing", "fixed_split", "active_standby", "latency_bound", "priority",
                 "smallest_delay")
MAX_WEIGHT: Final = 255
#: ``$defs/cap`` of the weights schema: a rate cap is in [CAP_MIN_MBPS, CAP_MAX_MBPS] Mbit/s
#: (the floor is the shares backend's, to which :mod:`xapp.core.caps` clips).
CAP_MAX_MBPS: Final = 100_000.0

Kind = Literal["weights", "state", "telemetry", "proxy-state"]
KINDS: Final[tuple[Kind, ...]] = ("weights", "state", "telemetry", "proxy-state")
#: Kinds of the per-CPE topics (``mcw/v1/cpe/{cpe_id}/{kind}``).
CPE_KINDS: Final[tuple[Kind, ...]] = ("weights", "state", "telemetry")
SCHEMA_IDS: Final[dict[Kind, str]] = {
    "weights": "mcw.weights.v2", "state": "mcw.state.v2", "telemetry": "mcw.telemetry.v2",
    "proxy-state": "mcw.proxy-state.v1",
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


def first_error(kind: Kind, doc: object) -> str | None:
    """Where and why ``doc`` does not validate as ``kind`` (the first error); None if it does."""
    v = validator(kind)
    if v.is_valid(doc):
        return None
    for err in v.iter_errors(doc):
        where = "/".join(str(p) for p in err.instance_path) or "(root)"
        return f"{where}: {err.message}"
    return "(root): invalid"


def check(kind: Kind, doc: object) -> None:
    """Raise :class:`PayloadError` (reason ``schema``) unless ``doc`` validates."""
    problem = first_error(kind, doc)
    if problem is not None:
        raise PayloadError("schema", f"{kind} {problem}")


def encode(doc: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, the wire form of every payload."""
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

