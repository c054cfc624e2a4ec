"""A1 policy handling: parse, validate, combine and answer; no RMR and no I/O here.

The A1 mediator sends ``A1_POLICY_REQ`` (20010) with ``operation`` CREATE/UPDATE/DELETE,
``policy_type_id``, ``policy_instance_id`` and ``payload``.  Two encodings exist in the field:
the Python mediator sent the type id as an integer and the payload as an object, the Go mediator
sends the type id as a string and the payload as a JSON-encoded string.  Both are accepted.  The
answer, ``A1_POLICY_RESP`` (20011), always carries the type id as an integer.

The combination rule of instances lives in :mod:`xapp.core.policy_book`.

Nothing a request holds can stop the handler: it is parsed within :data:`A1_LIMITS` (size,
depth, number length) before it is decoded, identifiers are checked whole, and anything that
still goes wrong becomes an ERROR answer with a logged reason.  The RMR dispatch thread that
calls :meth:`A1Handler.handle` never sees an exception.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from xapp.adapters.a1_types import POLICY_TYPE_IDS, PolicyType, excerpt
from xapp.bounded_json import BoundedJsonError, JsonLimits
from xapp.bounded_json import loads as bounded_loads
from xapp.core.ids import TYPE_ID_RE, is_cpe_id, is_instance_id
from xapp.core.policy import PolicyError
from xapp.core.policy_book import (
    PolicyBook,
    PolicyInstance,
)

log = logging.getLogger(__name__)

#: RMR message types used by the A1 path.
A1_POLICY_REQ = 20010
A1_POLICY_RESP = 20011
A1_POLICY_QUERY = 20012

#: What one A1 request may hold.  A policy with a scope of 10,000 CPE ids is about 300 KiB;
#: the deepest valid document (request > payload > limits > wat) has four levels.
A1_LIMITS = JsonLimits(max_bytes=1024 * 1024, max_depth=16, max_int_digits=20)
#: How much of a request that does not parse is scanned for its ids (for the ERROR answer).
ID_SCAN_BYTES = 64 * 1024

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
    if isinstance(raw, bytes | bytearray | str):
        try:
            doc = bounded_loads(raw, A1_LIMITS)
        except BoundedJsonError as exc:
            raise A1Error(f"request refused: {exc}") from exc
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
    if isinstance(instance_id, int) and not isinstance(instance_id, bool) and instance_id >= 0:
        instance_id = str(instance_id)
    if not is_instance_id(instance_id):
        raise A1Error(f"policy_instance_id must be 1-128 of A-Z a-z 0-9 _ . : ~ -, "
                      f"got {excerpt(instance_id)}")
    payload = doc.get("payload")
    if operation is Operation.DELETE:
        return A1Request(operation, type_id, str(instance_id), None)
    if isinstance(payload, str | bytes):
        try:
            payload = bounded_loads(payload, A1_LIMITS)
        except BoundedJsonError as exc:
            raise A1Error(f"payload is a string but not acceptable JSON: {exc}") from exc
    if not isinstance(payload, Mapping):
        raise A1Error("payload must be a JSON object (or a JSON-encoded object)")
    return A1Request(operation, type_id, str(instance_id), payload)


def _type_id(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9:
        return value
    if isinstance(value, str) and TYPE_ID_RE.fullmatch(value):
        return int(value)
    raise A1Error(f"policy_type_id must be an integer of at most 9 digits or such a decimal "
                  f"string, got {excerpt(value)}")


def _excerpt_message(message: str) -> str:
    """jsonschema's messages quote the whole failing value, which may be an array of 1 MiB."""
    return message if len(message) <= 300 else message[:297] + "..."


def _ids_best_effort(raw: bytes | str | Mapping[str, Any]) -> tuple[int, str]:
    """Ids for an ERROR answer to a request that did not parse (0 and "" when unknown); only
    ids that pass their checks are echoed back."""
    try:
        doc = bounded_loads(raw, A1_LIMITS) if isinstance(raw, bytes | bytearray | str) else raw
    except BoundedJsonError:
        return scan_ids(raw) if isinstance(raw, bytes | bytearray | str) else (0, "")
    if not isinstance(doc, Mapping):
        return 0, ""
    try:
        type_id = _type_id(doc.get("policy_type_id"))
    except A1Error:
        type_id = 0
    iid = doc.get("policy_instance_id")
    if isinstance(iid, int) and not isinstance(iid, bool):
        iid = str(iid)
    return type_id, iid if is_instance_id(iid) else ""


# A JSON string (escapes included) or a bracket: enough to know the nesting depth of every
# key while skipping what strings hold.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_VALUE = re.compile(rb'\s*:\s*("(?:[^"\\]|\\.){0,1024}"|-?[0-9]{1,20})')
_SCANNED = {b'"policy_type_id"': "type", b'"policy_instance_id"': "instance"}
_TAIL_CANDIDATES = 4


def scan_ids(raw: bytes | bytearray | str, limit: int = ID_SCAN_BYTES) -> tuple[int, str]:
    """The type and instance ids of a request that cannot be parsed whole (too large, too deep,
    broken further on), from its first and last ``limit`` bytes: top-level keys only, each
    value checked as in a parsed request; 0 and "" for what is not found there."""
    data = raw.encode("utf-8", "replace") if isinstance(raw, str) else bytes(raw)
    found = _scan_head(data[:limit])
    if len(found) < 2 and len(data) > limit:
        for key, value in _scan_tail(data[-limit:]).items():
            found.setdefault(key, value)
    try:
        type_id = _type_id(found.get("type"))
    except A1Error:
        type_id = 0
    iid = found.get("instance")
    if isinstance(iid, int) and not isinstance(iid, bool) and iid >= 0:
        iid = str(iid)
    return type_id, iid if is_instance_id(iid) else ""


def _scan_head(data: bytes) -> dict[str, Any]:
    """Top-level ids in the first bytes of a request: depth counted from the start."""
    found: dict[str, Any] = {}
    depth = 0
    for token in _TOKENS.finditer(data):
        text = token.group()
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and text in _SCANNED:
            value = _VALUE.match(data, token.end())
            if value is None:
                continue
            try:
                found.setdefault(_SCANNED[text], json.loads(value.group(1)))
            except ValueError:
                continue
        if len(found) == 2:
            break
    return found


def _scan_tail(data: bytes) -> dict[str, Any]:
    """Top-level ids in the last bytes of a request (the ids may follow a huge payload): a key
    is top-level when what follows its value closes exactly one object, at the very end."""
    found: dict[str, Any] = {}
    for name, key in _SCANNED.items():
        # The last few only: a real request has one such key, and each try reads to the end.
        for candidate in list(re.finditer(re.escape(name), data))[-_TAIL_CANDIDATES:]:
            value = _VALUE.match(data, candidate.end())
            if value is None or not _closes_one_object(data, value.end()):
                continue
            try:
                found[key] = json.loads(value.group(1))
            except ValueError:
                continue
    return found


def _closes_one_object(data: bytes, start: int) -> bool:
    depth = 1
    for token in _TOKENS.finditer(data, start):
        text = token.group()
        depth += 1 if text in (b"{", b"[") else -1 if text in (b"}", b"]") else 0
        if depth == 0:
            return not data[token.end():].strip()
    return False


class A1Handler:
    """Applies ``A1_POLICY_REQ`` messages to a :class:`PolicyBook`.

    ``observe(operation, status)`` is called once per request (metrics).  An invalid request
    changes nothing: the book and the persisted instances keep their previous content.
    """

    def __init__(self, book: PolicyBook, policy_types: Sequence[PolicyType], handler_id: str,
                 persistence: PolicyPersistence | None = None,
                 observe: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if not policy_types:
            raise ValueError("A1Handler needs at least one policy type")
        self.book = book
        self.policy_types = {t.policy_type_id: t for t in policy_types}
        self.handler_id = handler_id
        self._persistence = persistence
        self._observe = observe
        self._clock = clock
        self._validators = {t.policy_type_id: t.validator() for t in policy_types}
        #: Instance id -> monotonic time of its last applied request.
        self._seen: dict[str, float] = {}
        # Serialises requests: the RMR dispatch thread is the only caller in production, but
        # tests and a future REST path may call concurrently.
        self._lock = threading.Lock()

    @property
    def type_ids(self) -> tuple[int, ...]:
        """The policy types handled, oldest first."""
        return tuple(sorted(self.policy_types))

    @property
    def default_type_id(self) -> int:
        """The type an answer names when the request named none that could be read: the
        newest."""
        return max(self.policy_types)

    def handle(self, raw: bytes | str | Mapping[str, Any]) -> A1Response:
        """Apply one request and return the response to send back by RTS; never raises."""
        with self._lock:
            try:
                req = parse_request(raw)
            except Exception as exc:
                return self._refused(raw, "?", exc)
            try:
                status = self._apply(req)
                reason = ""
            except Exception as exc:
                if not isinstance(exc, A1Error):
                    log.exception("A1 %s of policy instance %r failed unexpectedly",
                                  req.operation.value, req.policy_instance_id)
                status, reason = Status.ERROR, _reason(exc)
            else:
                self._seen[req.policy_instance_id] = time.monotonic()
            return self._done(req.operation.value, A1Response(
                req.policy_type_id, req.policy_instance_id, self.handler_id, status, reason))

    def responsive(self, timeout_s: float = 1.0) -> bool:
        """Whether a request could be handled now: no request has held the handler longer
        than ``timeout_s``.  Waits up to that long, so the RMR health check does not call it:
        it reads the A1 worker's state instead (:class:`~xapp.adapters.rmr.RmrGlue`)."""
        if not self._lock.acquire(timeout=timeout_s):
            return False
        self._lock.release()
        return True

    def _refused(self, raw: Any, operation: str, exc: Exception) -> A1Response:
        if not isinstance(exc, A1Error):
            log.exception("A1 request failed to parse unexpectedly")
        try:
            type_id, iid = _ids_best_effort(raw)
        except Exception:
            type_id, iid = 0, ""
        return self._done(operation, A1Response(type_id or self.default_type_id,
                                                iid, self.handler_id, Status.ERROR,
                                                _reason(exc)))

    def seen_since(self, t_monotonic: float) -> tuple[set[str], float | None]:
        """Instance ids applied (CREATE, UPDATE or DELETE) since ``t_monotonic``, and when the
        last of them arrived; what :class:`A1Resync` reconciles against."""
        with self._lock:
            recent = {iid: t for iid, t in self._seen.items() if t >= t_monotonic}
        return set(recent), max(recent.values(), default=None)

    def remove_stale(self, instance_ids: Iterable[str], reason: str) -> list[str]:
        """Remove instances the mediator no longer has (book and persistence); the removed."""
        removed = []
        with self._lock:
            for iid in instance_ids:
                if self.book.remove(iid):
                    removed.append(iid)
                if self._persistence is not None:
                    self._persistence.delete_policy(iid)
        for iid in removed:
            log.warning("A1 policy instance %r removed: %s", iid, reason)
            if self._observe is not None:
                self._observe("RECONCILE", Status.DELETED.value)
        return removed

    def _apply(self, req: A1Request) -> Status:
        ptype = self.policy_types.get(req.policy_type_id)
        if ptype is None:
            raise A1Error(f"policy type {req.policy_type_id} is not handled here "
                          f"(this xApp handles {list(self.type_ids)})")
        previous = self.book.get(req.policy_instance_id)
        if previous is not None and previous.policy_type_id != req.policy_type_id:
            # The mediator keeps instance ids per type; this xApp combines all its instances
            # by id, so one id stands for one instance whatever its type.
            raise A1Error(f"policy instance {req.policy_instance_id!r} is in force under "
                          f"policy type {previous.policy_type_id}, not {req.policy_type_id}: "
                          "nothing changed (instance ids are one namespace here: delete it "
                          "under its type first, or use another id)")
        if req.operation is Operation.DELETE:
            self.book.remove(req.policy_instance_id)
            if self._persistence is not None:
                self._persistence.delete_policy(req.policy_instance_id)
            return Status.DELETED
        assert req.payload is not None
        where_type = f"policy type {ptype.name} ({ptype.policy_type_id})"
        cpes, payload = self._scope(req.payload, where_type)
        # The first error only: looking for more would check every item of a long array
        # after a bound on its length already failed.
        first = next(iter(self._validators[ptype.policy_type_id].iter_errors(payload)), None)
        if first is not None:
            where = "/".join(str(p) for p in first.absolute_path) or "(payload)"
            raise A1Error(f"payload does not match {where_type}: "
                          f"{where}: {_excerpt_message(first.message)}")
        body = {k: v for k, v in req.payload.items() if k != "scope"}
        try:
            policy = self.book.check(body)
        except PolicyError as exc:
            raise A1Error(f"policy rejected: {exc}") from exc
        # An UPDATE (or a CREATE the mediator resends after our restart) keeps the rank.
        created = previous.created_s if previous is not None else self._clock()
        instance = PolicyInstance(req.policy_instance_id, body, cpes, created,
                                  ptype.policy_type_id)
        self.book.put(instance, policy)
        if self._persistence is not None:
            self._persistence.save_policy(instance)
        return Status.OK

    def _scope(self, payload: Mapping[str, Any], where_type: str
               ) -> tuple[frozenset[str], Mapping[str, Any]]:
        """``scope.cpes`` checked in one linear pass (the one array a policy may fill with
        tens of thousands of items), and the payload with that list emptied for the schema.

        Each id must be a whole CPE id: the schema's pattern is checked with re.search, where
        "$" also matches before a final newline, so "cpe-1\\n" would pass it and silently match
        no CPE.
        """
        scope = payload.get("scope")
        if not isinstance(scope, Mapping) or not isinstance(scope.get("cpes"), list):
            return frozenset(), payload
        cpes: set[str] = set()
        for index, cpe in enumerate(scope["cpes"]):
            if not is_cpe_id(cpe):
                raise A1Error(f"payload does not match {where_type}: "
                              f"scope/cpes/{index}: {excerpt(cpe)} is not a CPE id")
            if cpe in cpes:
                raise A1Error(f"payload does not match {where_type}: "
                              f"scope/cpes/{index}: {cpe!r} is repeated")
            cpes.add(cpe)
        return frozenset(cpes), {**payload, "scope": {**scope, "cpes": []}}

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


def _reason(exc: BaseException) -> str:
    if isinstance(exc, A1Error):
        return str(exc)
    return f"internal error ({type(exc).__name__}); the request changed nothing"


def query_message(policy_type_id: int) -> bytes:
    """Payload of ``A1_POLICY_QUERY``: asks the mediator to resend this type's instances."""
    return json.dumps({"policy_type_id": policy_type_id}).encode()


#: How long the mediator's resends may pause before the resync counts them as complete.
RESYNC_QUIET_S = 5.0
#: How long to wait for a first resend before concluding the mediator has nothing to send.
RESYNC_GIVE_UP_S = 60.0


class A1Resync:
    """After a (re)start, makes the instances in force exactly the mediator's.

    The xApp restores its instances from SDL at start, then sends ``A1_POLICY_QUERY``; the
    mediator answers by resending every instance it has as a CREATE, one message each, with no
    end marker.  An instance deleted at the mediator while the xApp was down is simply not
    resent, so the restored set must be cut down to what the mediator confirms.  Two ways to
    know the mediator's set, the first that works wins:

    1. **The mediator's northbound list** (``GET /A1-P/v2/policytypes/{id}/policies``, when
       ``list_instances`` is given): exact, and the only way to learn that the mediator has
       *no* instances.
    2. **A quiet period** after the resends: once at least one instance came back and none
       for ``quiet_s``, every restored instance that was not resent is removed.

    If neither answers (no list, and not one resend within ``give_up_s``), the restored
    instances stay: the mediator may be down, and dropping the operator's policies because a
    RIC component is away is the worse error.  That case is logged.  An instance the mediator
    sends after the resync is applied as usual; an instance restored from SDL after the
    resync (Redis came back late) is admitted only if the mediator confirmed it.
    """

    def __init__(self, handler: A1Handler,
                 list_instances: Callable[[], Iterable[str]] | None = None, *,
                 quiet_s: float = RESYNC_QUIET_S, give_up_s: float = RESYNC_GIVE_UP_S) -> None:
        self.handler = handler
        self._list = list_instances
        self.quiet_s = quiet_s
        self.give_up_s = give_up_s
        self._query_at: float | None = None
        self._lock = threading.Lock()
        #: The mediator's set once known (None before, or when it could not be learned).
        self.confirmed: frozenset[str] | None = None
        self.done = threading.Event()
        #: How the resync ended: "list", "quiet-period", "nothing-resent"; "" while running.
        self.outcome = ""
        self.removed: list[str] = []

    def query_sent(self) -> None:
        """``A1_POLICY_QUERY`` went out: resends count from now."""
        with self._lock:
            if self._query_at is None:
                # The handler stamps requests with time.monotonic(): the same clock here.
                self._query_at = time.monotonic()

    def admits(self, instance_id: str) -> bool:
        """Whether an instance restored from SDL may be put in force."""
        confirmed = self.confirmed
        return confirmed is None or instance_id in confirmed

    def step(self) -> bool:
        """Try to finish the resync; True once done (call until then, e.g. every second)."""
        if self.done.is_set():
            return True
        with self._lock:
            query_at = self._query_at
        if query_at is None:
            return False
        seen, last = self.handler.seen_since(query_at)
        if self._list is not None:
            try:
                listed = {str(i) for i in self._list()}
            except Exception as exc:
                log.warning("A1 mediator's instance list not available (%s); reconciling "
                            "by the quiet period after the query", exc)
            else:
                return self._finish(listed | seen, "list")
        now = time.monotonic()
        if last is not None and now - last >= self.quiet_s and now - query_at >= self.quiet_s:
            return self._finish(seen, "quiet-period")
        if last is None and now - query_at >= self.give_up_s:
            log.warning("the A1 mediator resent no instance within %.0f s of the query; the "
                        "%d restored instances stay in force (configure the mediator URL for "
                        "an exact resync)", self.give_up_s, len(self.handler.book.instances()))
            self.outcome = "nothing-resent"
            self.done.set()
            return True
        return False

    def _finish(self, confirmed: set[str], outcome: str) -> bool:
        self.confirmed = frozenset(confirmed)
        stale = [i.instance_id for i in self.handler.book.instances()
                 if i.instance_id not in self.confirmed]
        self.removed = self.handler.remove_stale(
            stale, f"not at the A1 mediator after the restart ({outcome})")
        self.outcome = outcome
        self.done.set()
        log.info("A1 instances reconciled with the mediator (%s): %d in force, %d removed",
                 outcome, len(self.handler.book.instances()), len(self.removed))
        return True


#: What the mediator's instance list may hold (ids only; 100,000 ids is under 4 MiB).
_LIST_LIMITS = JsonLimits(max_bytes=4 * 1024 * 1024, max_depth=2, max_int_digits=20)


def mediator_lister(base_url: str, policy_type_ids: Sequence[int] = POLICY_TYPE_IDS,
                    timeout_s: float = 5.0) -> Callable[[], list[str]]:
    """``list_instances`` for :class:`A1Resync` from the mediator's northbound API
    (``base_url`` like ``http://service-ricplt-a1mediator-http.ricplt:10000``): the instances
    of every type in ``policy_type_ids``.  A type the mediator does not know (404: not
    registered there yet) has none."""
    base = base_url.rstrip("/")

    def list_type(type_id: int) -> list[str]:
        url = f"{base}/A1-P/v2/policytypes/{type_id}/policies"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                body = resp.read(_LIST_LIMITS.max_bytes + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise
        doc = bounded_loads(body, _LIST_LIMITS)
        if not isinstance(doc, list):
            raise A1Error(f"{url} did not answer a JSON list")
        ids = [str(i) if isinstance(i, int) and not isinstance(i, bool) else i for i in doc]
        bad = [i for i in ids if not is_instance_id(i)]
        if bad:
            raise A1Error(f"{url} listed invalid instance ids {excerpt(bad[:3])}")
        return ids

    def list_instances() -> list[str]:
        return [i for t in policy_type_ids for i in list_type(t)]

    return list_instances
