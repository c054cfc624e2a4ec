"""A1 policy handling: parse, validate, combine and answer; no RMR and no I/O here.

The A1 mediator sends ``A1_POLICY_REQ`` (20010) with ``operation`` CREATE/UPDATE/DELETE,
``policy_type_id``, ``policy_instance_id`` and ``payload``.  Two encodings exist in the field:
the Python mediator sent the type id as an integer and the payload as an object, the Go mediator
sends the type id as a string and the payload as a JSON-encoded string.  Both are accepted.  The
answer, ``A1_POLICY_RESP`` (20011), always carries the type id as an integer.

The combination rule of instances lives in :mod:`xapp.core.policy_book`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import jsonschema

from xapp.core.policy import PolicyError
from xapp.core.policy_book import (
    PolicyBook,
    PolicyInstance,
)
from xapp.schemas import schemas_dir

log = logging.getLogger(__name__)

#: RMR message types used by the A1 path.
A1_POLICY_REQ = 20010
A1_POLICY_RESP = 20011
A1_POLICY_QUERY = 20012

#: The policy type this xApp owns.
POLICY_TYPE_ID = 20100
POLICY_TYPE_NAME = "mcw_steering"
POLICY_TYPE_FILE = f"a1-policy-type-{POLICY_TYPE_ID}.json"



class Operation(StrEnum):
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


class Status(StrEnum):
    OK = "OK"
    ERROR = "ERROR"
    DELETED = "DELETED"


class A1Error(ValueError):
    """A request that cannot be applied; the message is the reason that goes to the log."""


@dataclass(frozen=True)
class PolicyType:
    """The registration body of the policy type (what ``PUT /A1-P/v2/policytypes/{id}`` takes)."""

    policy_type_id: int
    name: str
    description: str
    create_schema: Mapping[str, Any]

    @classmethod
    def load(cls, directory: str | os.PathLike[str] | None = None) -> PolicyType:
        path = schemas_dir(directory) / POLICY_TYPE_FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise A1Error(f"cannot read the A1 policy type {path}: {exc}") from exc
        missing = {"policy_type_id", "name", "description", "create_schema"} - set(doc)
        if missing:
            raise A1Error(f"{path}: missing keys {sorted(missing)}")
        jsonschema.Draft7Validator.check_schema(doc["create_schema"])
        return cls(int(doc["policy_type_id"]), str(doc["name"]), str(doc["description"]),
                   doc["create_schema"])

    def validator(self) -> jsonschema.Draft7Validator:
        return jsonschema.Draft7Validator(self.create_schema)


@dataclass(frozen=True)
class A1Request:
    operation: Operation
    policy_type_id: int
    policy_instance_id: str
    #: The decoded payload; None for DELETE.
    payload: Mapping[str, Any] | None


@dataclass(frozen=True)
class A1Response:
    """What goes back in ``A1_POLICY_RESP``; ``reason`` is logged, not sent."""

    policy_type_id: int
    policy_instance_id: str
    handler_id: str
    status: Status
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"policy_type_id": self.policy_type_id,
                "policy_instance_id": self.policy_instance_id,
                "handler_id": self.handler_id, "status": self.status.value}

    def encode(self) -> bytes:
        return json.dumps(self.to_dict()).encode()


class PolicyPersistence(Protocol):
    """Where accepted instances are kept across restarts (SDL)."""

    def save_policy(self, instance: PolicyInstance) -> None: ...

    def delete_policy(self, instance_id: str) -> None: ...


def parse_request(raw: bytes | str | Mapping[str, Any]) -> A1Request:
    """Decode an ``A1_POLICY_REQ`` in either encoding; raises :class:`A1Error`."""
    if isinstance(raw, bytes | bytearray):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise A1Error("request is not UTF-8") from exc
    if isinstance(raw, str):
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise A1Error(f"request is not JSON: {exc}") from exc
    else:
        doc = raw
    if not isinstance(doc, Mapping):
        raise A1Error("request is not a JSON object")
    try:
        operation = Operation(str(doc.get("operation", "")).upper())
    except ValueError as exc:
        raise A1Error(f"unknown operation {doc.get('operation')!r}") from exc
    type_id = _type_id(doc.get("policy_type_id"))
    instance_id = doc.get("policy_instance_id")
    if not isinstance(instance_id, str | int) or isinstance(instance_id, bool) \
            or str(instance_id) == "":
        raise A1Error("policy_instance_id missing")
    payload = doc.get("payload")
    if operation is Operation.DELETE:
        return A1Request(operation, type_id, str(instance_id), None)
    if isinstance(payload, str | bytes):
        try:
            payload = json.loads(payload)
        except ValueError as exc:
            raise A1Error(f"payload is a string but not JSON: {exc}") from exc
    if not isinstance(payload, Mapping):
        raise A1Error("payload must be a JSON object (or a JSON-encoded object)")
    return A1Request(operation, type_id, str(instance_id), payload)


def _type_id(value: Any) -> int:
    if isinstance(value, bool):
        raise A1Error("policy_type_id must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise A1Error(f"policy_type_id must be an integer or a decimal string, got {value!r}")


def _ids_best_effort(raw: bytes | str | Mapping[str, Any]) -> tuple[int, str]:
    """Ids for an ERROR answer to a request that did not parse (0 and "" when unknown)."""
    try:
        doc = json.loads(raw) if isinstance(raw, bytes | bytearray | str) else raw
    except ValueError:
        return 0, ""
    if not isinstance(doc, Mapping):
        return 0, ""
    try:
        type_id = _type_id(doc.get("policy_type_id"))
    except A1Error:
        type_id = 0
    iid = doc.get("policy_instance_id")
    return type_id, "" if iid is None else str(iid)


class A1Handler:
    """Applies ``A1_POLICY_REQ`` messages to a :class:`PolicyBook`.

    ``observe(operation, status)`` is called once per request (metrics).  An invalid request
    changes nothing: the book and the persisted instances keep their previous content.
    """

    def __init__(self, book: PolicyBook, policy_type: PolicyType, handler_id: str,
                 persistence: PolicyPersistence | None = None,
                 observe: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.book = book
        self.policy_type = policy_type
        self.handler_id = handler_id
        self._persistence = persistence
        self._observe = observe
        self._clock = clock
        self._validator = policy_type.validator()
        # Serialises requests: the RMR dispatch thread is the only caller in production, but
        # tests and a future REST path may call concurrently.
        self._lock = threading.Lock()

    def handle(self, raw: bytes | str | Mapping[str, Any]) -> A1Response:
        """Apply one request and return the response to send back by RTS."""
        with self._lock:
            try:
                req = parse_request(raw)
            except A1Error as exc:
                type_id, iid = _ids_best_effort(raw)
                return self._done("?", A1Response(type_id or self.policy_type.policy_type_id,
                                                  iid, self.handler_id, Status.ERROR, str(exc)))
            try:
                status = self._apply(req)
                reason = ""
            except A1Error as exc:
                status, reason = Status.ERROR, str(exc)
            return self._done(req.operation.value, A1Response(
                req.policy_type_id, req.policy_instance_id, self.handler_id, status, reason))

    def _apply(self, req: A1Request) -> Status:
        if req.policy_type_id != self.policy_type.policy_type_id:
            raise A1Error(f"policy type {req.policy_type_id} is not handled here "
                          f"(this xApp handles {self.policy_type.policy_type_id})")
        if req.operation is Operation.DELETE:
            self.book.remove(req.policy_instance_id)
            if self._persistence is not None:
                self._persistence.delete_policy(req.policy_instance_id)
            return Status.DELETED
        assert req.payload is not None
        errors = sorted(self._validator.iter_errors(req.payload), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "(payload)"
            raise A1Error(f"payload does not match policy type {self.policy_type.name}: "
                          f"{where}: {first.message}")
        body = {k: v for k, v in req.payload.items() if k != "scope"}
        cpes = frozenset((req.payload.get("scope") or {}).get("cpes") or [])
        try:
            policy = self.book.check(body)
        except PolicyError as exc:
            raise A1Error(f"policy rejected: {exc}") from exc
        previous = self.book.get(req.policy_instance_id)
        # An UPDATE (or a CREATE the mediator resends after our restart) keeps the rank.
        created = previous.created_s if previous is not None else self._clock()
        instance = PolicyInstance(req.policy_instance_id, body, cpes, created)
        self.book.put(instance, policy)
        if self._persistence is not None:
            self._persistence.save_policy(instance)
        return Status.OK

    def _done(self, operation: str, resp: A1Response) -> A1Response:
        if resp.status is Status.ERROR:
            log.error("A1 %s of policy instance %r (type %s) refused: %s", operation,
                      resp.policy_instance_id, resp.policy_type_id, resp.reason)
        else:
            log.info("A1 %s of policy instance %r: %s", operation, resp.policy_instance_id,
                     resp.status.value)
        if self._observe is not None:
            self._observe(operation, resp.status.value)
        return resp


def query_message(policy_type_id: int = POLICY_TYPE_ID) -> bytes:
    """Payload of ``A1_POLICY_QUERY``: asks the mediator to resend this type's instances."""
    return json.dumps({"policy_type_id": policy_type_id}).encode()
