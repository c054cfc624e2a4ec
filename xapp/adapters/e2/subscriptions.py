"""E2SM-KPM subscriptions through the O-RAN SC Subscription Manager's REST API.

The JSON contract, as found (not as ricxappframe serialises it)
---------------------------------------------------------------
Sources read: o-ran-sc/ric-plt-xapp-frame ``api/xapp_rest_api.yaml`` (swagger 2.0, basePath
``/ric/v1``) and ``pkg/clientmodel/*.go`` / ``pkg/models/*.go`` (the ``json:"..."`` tags the
Subscription Manager's go-swagger server decodes with); o-ran-sc/ric-plt-submgr
``pkg/control/control.go`` (``RESTSubscriptionHandler``, ``sendE2TSubscriptionRequest``),
``pkg/control/e2ap.go`` (``FillSubscriptionReqMsgs``), ``pkg/control/restendpoint.go``
(``ConstructEndpointAddresses``); xapp-frame ``pkg/xapp/subscription.go`` (``Notify``).

* ``POST /ric/v1/subscriptions`` with PascalCase keys::

    {"ClientEndpoint": {"Host": "service-ricxapp-mcw-xapp-http.ricxapp",
                        "HTTPPort": 8080, "RMRPort": 4560},
     "Meid": "gnb_208_092_0000000a", "RANFunctionID": 2,
     "SubscriptionDetails": [{"XappEventInstanceId": 1,
                              "EventTriggers": [bytes as integers 0..255],
                              "ActionToBeSetupList": [{"ActionID": 1, "ActionType": "report",
                                  "ActionDefinition": [integers],
                                  "SubsequentAction": {"SubsequentActionType": "continue",
                                                       "TimeToWait": "zero"}}]}]}

  answered ``201 {"SubscriptionId": "<id>", ...}``; ``503`` when the node's E2 link is down.
  ``HTTPPort`` and ``RMRPort`` are both sent: submgr dereferences both pointers.  submgr
  derives the RMR endpoint from Host by replacing "http" with "rmr" (the chart's service
  names follow that pattern).
* ricxappframe 3.2.2's ``xapp_subscribe.NewSubscriber.Subscribe`` sends
  ``subs_params.to_dict()`` (``ricxappframe/xapp_subscribe.py`` line 101), whose keys are the
  generated models' Python attribute names (``client_endpoint``, ``ran_function_id``,
  ``xapp_event_instance_id``, ``action_to_be_setup_list``...), not their ``attribute_map``
  (``subsclient/models/subscription_params.py``): submgr's required ``ClientEndpoint``,
  ``Meid``, ``RANFunctionID`` and ``SubscriptionDetails`` are then missing (Go's
  case-insensitive match does not bridge the underscores).  Hence plain JSON here.
* ``DELETE /ric/v1/subscriptions/{SubscriptionId}`` answered 204 when deleted and also for an
  id submgr does not know; 400 only while "Handling of the REST Subscription Request still
  ongoing" (the POST's notification has not been sent yet): not deleted, so retried with
  back-off until 204 (or 404), never taken for gone.  submgr then deletes at the node
  asynchronously: a POST for the same node meanwhile fails in its notification with
  "Tracker: Similar transaction ... is ongoing" (ErrorSource SUBMGR); that is retried at the
  shortest back-off, not counted towards a longer one.
* The callback: submgr POSTs ``http://Host:HTTPPort/ric/v1/subscriptions/response`` once per
  SubscriptionDetail with ``{"SubscriptionId": ..., "SubscriptionInstances":
  [{"XappEventInstanceId": n, "E2EventInstanceId": m, "ErrorCause": "...", "ErrorSource":
  "SUBMGR|RTMGR|DBAAS|ASN1|E2Node", "TimeoutType": "E2-Timeout|..."}]}`` and retries (10
  times, 5 s apart) until it gets 200.  ``E2EventInstanceId`` is the RIC Request ID's
  instance the E2 node sees.  Success and failure are told apart by it alone
  (``sendSuccesfullResponseNotification`` / ``sendUnsuccesfullResponseNotification``): a
  success carries the node's instance id, ``"ErrorSource": "E2Node"`` and ``"ErrorCause": " "``
  on every instance (``CheckActionNotAdmittedList`` formats two empty strings), or a
  "partially accepted" cause listing actions the node did not admit; a failure carries
  ``E2EventInstanceId`` 0, the cause, its source and, on time-outs, ``TimeoutType``.
  ``E2SubscriptionDirectives`` (time-out, retries) is optional and not sent: submgr's
  defaults apply.
* The RIC Request ID's requestor towards the node is submgr's constant ``ricRequestorId =
  123`` (control.go, ``sendE2TSubscriptionRequest``); nodes echo it in their indications (the
  O-RAN SC KPM simulator's golden indication carries 123; ``match_requestor`` off is for
  nodes that do not echo it).

What this module keeps
----------------------
:class:`SubscriptionBook` holds the confirmed subscriptions the indication path checks every
RIC Indication against.  :class:`E2Subscriber` is one supervised worker's step: it reads the
nodes (:mod:`xapp.adapters.e2.nodes`), subscribes the connected ones with a KPM function,
retries failures with back-off, drops and resubscribes a node that went away and came back,
deletes at start what a previous run left (subscription ids persisted in SDL), and deletes
everything it made at stop.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from xapp.adapters import bounded_json
from xapp.adapters.dbaas import RedisLike, sdl_key
from xapp.adapters.e2.mapping import DEFAULT_MAP, FAMILY_RULES, MeasurementMap, family_of
from xapp.adapters.e2.nodes import NodeSource, node_view
from xapp.adapters.e2.records import ActiveSubscription, E2Node, RicRequestId
from xapp.adapters.sdl import LazySdlClient

log = logging.getLogger(__name__)

SUBSCRIPTIONS_PATH = "/ric/v1/subscriptions"
#: Where submgr posts its answers (xapp-frame ``Subscriber.clientUrl``).
CALLBACK_PATH = "/ric/v1/subscriptions/response"
#: submgr's ``ricRequestorId`` (ric-plt-submgr pkg/control/control.go).
SUBMGR_REQUESTOR_ID = 123
#: submgr answers with a few hundred bytes; more is refused.
MAX_RESPONSE_BYTES = 64 * 1024
CALLBACK_LIMITS = bounded_json.JsonLimits(max_bytes=64 * 1024, max_depth=8)
#: Sizes the swagger allows (XappEventInstanceId, E2EventInstanceId 0..65535; RANFunctionID
#: 0..4095).
MAX_INSTANCE_ID = 65535
MAX_RAN_FUNCTION_ID = 4095
#: SDL key (in the xApp's namespace) of the subscription ids this process made.
SDL_KEY = "e2/subscriptions"
#: SDL key prefix of each E2 node's subscription record (``e2/node/<inventory name>``): its id
#: at submgr and the replica that made it, so whoever subscribes the node next deletes one a
#: dead replica left (its per-replica key is named after a pod that never comes back).
NODE_KEY_PREFIX = "e2/node/"
#: Callbacks that arrive before the POST that asked for them returned (submgr answers from a
#: goroutine), kept this long at most, this many at most.
EARLY_CALLBACK_S = 60.0
MAX_EARLY_CALLBACKS = 64
#: Requests to submgr in one step at most, so a step against a hung submgr stays well inside
#: the worker's deadline (each request is bounded by ``http_timeout_s``); the rest waits for
#: the next step.
MAX_REQUESTS_PER_STEP = 8
#: A DELETE answered 400 (submgr still handling the subscription's POST) at stop: tried this
#: many times at most, the waits doubling from DELETE_RETRY_S, within the stop's time.
MAX_DELETE_ATTEMPTS = 6
DELETE_RETRY_S = 0.25
#: Quick retries of a subscription submgr refused because a transaction of the node is still
#: ongoing (its asynchronous delete); past this many in a row the usual back-off applies.
MAX_BUSY_RETRIES = 30
#: Ids this process deleted, remembered so one is not deleted twice (bounded).
MAX_DELETED_IDS = 4096


class SubmgrError(Exception):
    """The Subscription Manager refused or did not answer; ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SubmgrBusy(SubmgrError):
    """A DELETE answered 400: submgr is still handling the subscription's request.  The
    subscription is live; delete it again later."""


def submgr_busy(cause: str) -> bool:
    """submgr's cause for a request that collided with an ongoing transaction of the same
    node or subscription (its tracker: "Similar transaction ... is ongoing", "got already
    transaction ongoing"): worth retrying soon, not a refusal."""
    return "ongoing" in cause.lower()


@dataclass(frozen=True)
class E2SubscribeSettings:
    """What the subscriber asks for; built from ``controls.e2``."""

    submgr_url: str
    client_host: str
    http_port: int = 8080
    rmr_port: int = 4560
    requestor_id: int = SUBMGR_REQUESTOR_ID
    match_requestor: bool = True
    measurements: tuple[str, ...] = ("DRB.UEThpDl", "DRB.UEThpUl", "RRU.PrbUsedDl",
                                     "RRU.PrbAvailDl", "RRU.PrbUsedUl", "RRU.PrbAvailUl")
    #: REPORT styles asked for where the node offers them: 1 (cell/node level, format 1)
    #: and 4 (UEs matching a condition, reported per UE in format 3).
    report_styles: tuple[int, ...] = (1, 4)
    report_period_ms: int = 1000
    granularity_ms: int = 1000
    #: Wait for submgr's callback this long before the attempt counts as failed.
    response_timeout_s: float = 30.0
    retry_min_s: float = 2.0
    retry_max_s: float = 120.0
    http_timeout_s: float = 5.0


# --- the Subscription Manager's REST API ------------------------------------------------------


class SubmgrApi(Protocol):
    def subscribe(self, params: Mapping[str, Any]) -> str: ...

    def unsubscribe(self, subscription_id: str) -> None: ...


class SubmgrClient:
    """``POST``/``DELETE`` on ``<base>/ric/v1/subscriptions`` with bounded bodies and timeouts."""

    def __init__(self, base_url: str, timeout_s: float = 5.0) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/ric/v1"):
            base = base[: -len("/ric/v1")]
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"submgr URL must be http(s)://host[:port], got {base_url!r}")
        self.base = base
        self.timeout_s = timeout_s

    def subscribe(self, params: Mapping[str, Any]) -> str:
        status, body = self._request("POST", SUBSCRIPTIONS_PATH,
                                     json.dumps(params, separators=(",", ":")).encode())
        if status not in (200, 201):
            raise SubmgrError(f"submgr refused the subscription: HTTP {status} "
                              f"{body[:200]!r}", status)
        try:
            doc = bounded_json.loads(body, CALLBACK_LIMITS)
        except bounded_json.BoundedJsonError as exc:
            raise SubmgrError(f"submgr's answer is not usable JSON: {exc}", status) from exc
        sid = doc.get("SubscriptionId") if isinstance(doc, dict) else None
        if not isinstance(sid, str) or not sid or len(sid) > 256:
            raise SubmgrError(f"submgr's answer has no SubscriptionId: {body[:200]!r}", status)
        return sid

    def unsubscribe(self, subscription_id: str) -> None:
        path = f"{SUBSCRIPTIONS_PATH}/{urllib.parse.quote(subscription_id, safe='')}"
        status, body = self._request("DELETE", path, None)
        # 204: deleted, or an id submgr does not know; 404 the same from other versions.
        if status == 400:
            raise SubmgrBusy(f"submgr still handles subscription {subscription_id}: HTTP 400 "
                             f"{body[:200]!r}", status)
        if status not in (200, 204, 404):
            raise SubmgrError(f"submgr refused to delete {subscription_id}: HTTP {status} "
                              f"{body[:200]!r}", status)

    def _request(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return int(resp.status), _read_bounded(resp)
        except urllib.error.HTTPError as exc:
            try:
                return int(exc.code), _read_bounded(exc)
            finally:
                exc.close()
        except (OSError, ValueError) as exc:  # refused, timeout, DNS, bad URL
            raise SubmgrError(f"submgr {method} {path} failed: {exc}") from exc


def _read_bounded(resp: Any) -> bytes:
    body = bytes(resp.read(MAX_RESPONSE_BYTES + 1))
    if len(body) > MAX_RESPONSE_BYTES:
        raise SubmgrError(f"submgr answered more than {MAX_RESPONSE_BYTES} bytes")
    return body


def subscription_params(settings: E2SubscribeSettings, node: E2Node,
                        details: Sequence[Detail]) -> dict[str, Any]:
    """The ``SubscriptionParams`` document submgr decodes (see the module docstring)."""
    assert node.kpm is not None
    return {
        "ClientEndpoint": {"Host": settings.client_host, "HTTPPort": settings.http_port,
                           "RMRPort": settings.rmr_port},
        "Meid": node.inventory_name,
        "RANFunctionID": node.kpm.ran_function_id,
        "SubscriptionDetails": [{
            "XappEventInstanceId": d.xapp_event_instance_id,
            "EventTriggers": list(d.event_trigger),
            "ActionToBeSetupList": [{
                "ActionID": 1, "ActionType": "report",
                "ActionDefinition": list(d.action_definition),
                "SubsequentAction": {"SubsequentActionType": "continue",
                                     "TimeToWait": "zero"}}],
        } for d in details],
    }


# --- the book the indication path reads ---------------------------------------------------------


class SubscriptionBook:
    """Confirmed subscriptions by (RIC instance, RAN function); safe for concurrent use.

    ``lookup`` runs for every RIC Indication (RMR's thread): one dictionary access under a
    lock.  It also counts, per subscription, the indications that matched, and the ones that
    matched none (``misses``).
    """

    def __init__(self, requestor_id: int = SUBMGR_REQUESTOR_ID, *,
                 match_requestor: bool = True) -> None:
        self.requestor_id = requestor_id
        self.match_requestor = match_requestor
        self._subs: dict[tuple[int, int], ActiveSubscription] = {}
        self._hits: dict[tuple[int, int], int] = {}
        self._dialects: dict[tuple[str, int], str] = {}
        self.misses = 0
        #: Changes with every change of what decoding needs (subscriptions, dialects): the
        #: decoder process's copy (:meth:`decode_view`) is sent again when it moved.
        self.version = 0
        self._lock = threading.Lock()

    def lookup(self, request: RicRequestId, ran_function_id: int) -> ActiveSubscription | None:
        key = (request.instance, ran_function_id)
        with self._lock:
            sub = self._subs.get(key)
            if sub is None or (self.match_requestor and request.requestor != self.requestor_id):
                self.misses += 1
                return None
            self._hits[key] = self._hits.get(key, 0) + 1
            return sub

    def peek(self, request: RicRequestId, ran_function_id: int) -> ActiveSubscription | None:
        """What :meth:`lookup` finds, without counting (the decoding half of the ingest)."""
        with self._lock:
            sub = self._subs.get((request.instance, ran_function_id))
            if sub is None or (self.match_requestor and request.requestor != self.requestor_id):
                return None
            return sub

    def add(self, sub: ActiveSubscription) -> None:
        key = (sub.request.instance, sub.ran_function_id)
        with self._lock:
            self._subs[key] = sub
            self._hits.setdefault(key, 0)
            self.version += 1

    def remove_subscription(self, subscription_id: str) -> int:
        """Forget every instance of a submgr subscription; how many there were."""
        with self._lock:
            keys = [k for k, s in self._subs.items() if s.subscription_id == subscription_id]
            for k in keys:
                del self._subs[k]
                self._hits.pop(k, None)
            self.version += 1
        return len(keys)

    def clear(self) -> None:
        with self._lock:
            self._subs.clear()
            self._hits.clear()
            self.version += 1

    def indications(self, instance: int, ran_function_id: int) -> int:
        with self._lock:
            return self._hits.get((instance, ran_function_id), 0)

    def dialect(self, node: str, ran_function_id: int) -> str | None:
        """The E2SM-KPM dialect the node's indications last decoded with, None before one."""
        with self._lock:
            return self._dialects.get((node, ran_function_id))

    def remember_dialect(self, node: str, ran_function_id: int, dialect: str) -> None:
        """Kept per node and RAN function (not per subscription): it outlives resubscribing."""
        with self._lock:
            if self._dialects.get((node, ran_function_id)) != dialect:
                self._dialects[(node, ran_function_id)] = dialect
                self.version += 1

    def active(self) -> list[ActiveSubscription]:
        with self._lock:
            return list(self._subs.values())

    def decode_view(self) -> dict[str, Any]:
        """What decoding indications needs of the book, as plain JSON data (the decoder
        process's copy, :class:`xapp.adapters.e2.decoder.BookCopy`): the subscriptions'
        keys, nodes, KPM versions, dialects and measurement lists, the dialects remembered
        per node and RAN function, and :attr:`version`."""
        with self._lock:
            return {
                "version": self.version,
                "requestor": self.requestor_id if self.match_requestor else None,
                "subscriptions": [
                    [s.request.instance, s.ran_function_id, s.subscription_id, s.node,
                     s.kpm_version, s.dialect, sorted(s.measurement_ids.items()),
                     list(s.measurements)] for s in self._subs.values()],
                "dialects": [[node, fn, d] for (node, fn), d in self._dialects.items()],
            }


# --- persistence of the ids this process made ---------------------------------------------------


class IdStore(Protocol):
    """Where the ids of the subscriptions this process made survive a restart."""

    def load(self) -> set[str]: ...

    def save(self, ids: set[str]) -> None: ...


class MemoryIdStore:
    def __init__(self) -> None:
        self.ids: set[str] = set()

    def load(self) -> set[str]:
        return set(self.ids)

    def save(self, ids: set[str]) -> None:
        self.ids = set(ids)


class SdlBackendLike(Protocol):
    def get(self, ns: str, keys: Any) -> dict[str, bytes]: ...

    def set(self, ns: str, data_map: dict[str, bytes]) -> None: ...

    def close(self) -> None: ...


class SdlIdStore:
    """The ids as one JSON key (``e2/subscriptions``) in the xApp's SDL namespace, written
    through: they change a few times per node and must be stored before the process can die
    with them live at submgr.  The state store (:mod:`xapp.adapters.sdl`) ignores this key."""

    MAX_IDS = 4096

    def __init__(self, namespace: str, backend_factory: Callable[[], SdlBackendLike],
                 key: str = SDL_KEY) -> None:
        self.namespace = namespace
        #: One key per replica when several share the fleet: a replica starting must not
        #: delete, as left over, the live subscriptions of the others.
        self.key = key
        self._sdl = LazySdlClient(backend_factory)

    def load(self) -> set[str]:
        with self._sdl.use() as sdl:
            raw = sdl.get(self.namespace, {self.key}).get(self.key)
        if raw is None:
            return set()
        try:
            doc = bounded_json.loads(raw)
            ids = doc.get("ids") if isinstance(doc, dict) else None
            if not isinstance(ids, list):
                raise ValueError("no 'ids' list")
            return {i for i in ids[: self.MAX_IDS] if isinstance(i, str) and 0 < len(i) <= 256}
        except ValueError as exc:
            log.error("SDL key %s/%s is unreadable and is ignored: %s", self.namespace, self.key,
                      exc)
            return set()

    def save(self, ids: set[str]) -> None:
        data = {self.key: json.dumps({"ids": sorted(ids)[: self.MAX_IDS]}).encode()}
        with self._sdl.use() as sdl:
            sdl.set(self.namespace, data)


@dataclass(frozen=True)
class NodeSubscription:
    """What the node's record says: the subscription id at submgr and who made it."""

    subscription_id: str
    owner: str

    def encode(self) -> bytes:
        # Deterministic: the compare-and-delete compares the stored bytes.
        return json.dumps({"id": self.subscription_id, "owner": self.owner},
                          separators=(",", ":"), sort_keys=True).encode()


class NodeRecords(Protocol):
    """Each E2 node's current subscription, shared by the replicas."""

    def get(self, node: str) -> NodeSubscription | None: ...

    def put(self, node: str, record: NodeSubscription) -> None: ...

    def clear(self, node: str, record: NodeSubscription) -> None:
        """Remove the node's record only if it is still ``record`` (the node's next owner may
        have written its own since)."""
        ...


class MemoryNodeRecords:
    """One process's records (tests share one between subscribers standing for replicas)."""

    def __init__(self) -> None:
        self.records: dict[str, NodeSubscription] = {}
        self._lock = threading.Lock()

    def get(self, node: str) -> NodeSubscription | None:
        with self._lock:
            return self.records.get(node)

    def put(self, node: str, record: NodeSubscription) -> None:
        with self._lock:
            self.records[node] = record

    def clear(self, node: str, record: NodeSubscription) -> None:
        with self._lock:
            if self.records.get(node) == record:
                del self.records[node]


_DELETE_IF = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class SdlNodeRecords:
    """The records in the xApp's SDL namespace, one key per node (``e2/node/<name>``, stored
    as ricsdl stores a key, ``{<namespace>},<key>``), written through.  The clear is a
    compare-and-delete script through redis-py: ricsdl's ``remove_if`` needs the DBaaS
    image's Redis module (``DELIE``), which a plain Redis does not have."""

    def __init__(self, namespace: str, client_factory: Callable[[], RedisLike]) -> None:
        self.namespace = namespace
        self._factory = client_factory
        self._client: RedisLike | None = None
        self._delete_if: Any = None
        self._lock = threading.Lock()

    def key(self, node: str) -> str:
        return sdl_key(self.namespace, NODE_KEY_PREFIX + node)

    def _redis(self) -> RedisLike:
        with self._lock:
            if self._client is None:
                self._client = self._factory()
                self._delete_if = self._client.register_script(_DELETE_IF)
            return self._client

    def get(self, node: str) -> NodeSubscription | None:
        key = self.key(node)
        raw = self._redis().get(key)
        if raw is None:
            return None
        try:
            doc = bounded_json.loads(raw)
            sid, owner = (doc.get("id"), doc.get("owner")) if isinstance(doc, dict) else (None,
                                                                                          None)
            if not isinstance(sid, str) or not 0 < len(sid) <= 256 or not isinstance(owner, str):
                raise ValueError("no 'id' and 'owner' strings")
        except ValueError as exc:
            log.error("SDL key %s is unreadable and is ignored: %s", key, exc)
            return None
        return NodeSubscription(sid, owner)

    def put(self, node: str, record: NodeSubscription) -> None:
        self._redis().set(self.key(node), record.encode())

    def clear(self, node: str, record: NodeSubscription) -> None:
        self._redis()
        self._delete_if(keys=[self.key(node)], args=[record.encode()])


# --- the subscriber -------------------------------------------------------------------------


@dataclass(frozen=True)
class Detail:
    """One SubscriptionDetail: one REPORT style of one node, one E2 subscription."""

    xapp_event_instance_id: int
    style: int
    measurements: tuple[str, ...]
    event_trigger: bytes
    action_definition: bytes


@dataclass
class _Instance:
    detail: Detail
    e2_instance_id: int | None = None
    error: str = ""
    #: submgr's cause on a success (actions the node did not admit), shown, not an error.
    note: str = ""


@dataclass
class _NodeSub:
    node: E2Node
    state: str = "new"  # new | pending | active | partial | failed | unusable | disconnected
    subscription_id: str | None = None
    instances: dict[int, _Instance] = field(default_factory=dict)
    last_error: str = ""
    attempts: int = 0
    next_at: float = 0.0
    requested_at: float = 0.0
    backoff_s: float = 0.0
    #: Failures in a row because submgr was busy with the node (retried at once).
    busy: int = 0


def choose_measurements(configured: Sequence[str], offered: Sequence[str] | None,
                        table: MeasurementMap, family: str) -> tuple[str, ...]:
    """What to ask a node for in one style: the configured names it offers, plus the names
    of its family's table it offers (srsRAN's CQI/RSRP/RSRQ); when that leaves nothing, every
    name it offers that the table maps.  A node that lists no names gets the configured ones.
    A node is unusable in a style only when nothing it offers maps."""
    if not offered:
        return tuple(configured)
    have = set(offered)
    chosen = [m for m in configured if m in have]
    chosen += [m for m in FAMILY_RULES.get(family, {}) if m in have and m not in chosen]
    if not chosen:
        chosen = [m for m in dict.fromkeys(offered) if table.known(m)]
    return tuple(chosen[:MAX_SUBSCRIBED_MEASUREMENTS])


#: Measurements asked for in one action definition (a node may offer hundreds).
MAX_SUBSCRIBED_MEASUREMENTS = 64


class Encoder(Protocol):
    """The codec's two encoders (:mod:`xapp.adapters.e2.kpm_encode`)."""

    def event_trigger(self, period_ms: int, kpm_version: int) -> bytes: ...

    def action_definition(self, measurements: Sequence[str], granularity_ms: int,
                          kpm_version: int, style: int, *, dialect: str | None = None,
                          cell: str | None = None) -> bytes: ...


class CodecEncoder:
    """:class:`Encoder` over :mod:`xapp.adapters.e2.kpm_encode` (imported when first used)."""

    def event_trigger(self, period_ms: int, kpm_version: int) -> bytes:
        from xapp.adapters.e2 import kpm_encode

        return kpm_encode.encode_event_trigger(period_ms, kpm_version)

    def action_definition(self, measurements: Sequence[str], granularity_ms: int,
                          kpm_version: int, style: int, *, dialect: str | None = None,
                          cell: str | None = None) -> bytes:
        from xapp.adapters.e2 import kpm_encode

        # Under the definitions the node speaks: srsRAN's v2-labelled function gets v3's
        # formats 4/5, FlexRIC's its moved-marker CHOICE.
        return kpm_encode.encode_action_definition(measurements, granularity_ms, kpm_version,
                                                   style=style, dialect=dialect, cell=cell)


class E2Subscriber:
    """Keeps one KPM subscription per connected E2 node; :meth:`step` is a worker's step.

    Thread use: :meth:`step` and :meth:`stop` run on the worker's (or the stopping) thread,
    :meth:`on_response` on the HTTP server's threads, :meth:`view` on any; one lock guards the
    per-node state, and no HTTP request is made while holding it.
    """

    def __init__(self, settings: E2SubscribeSettings, nodes: NodeSource, book: SubscriptionBook,
                 *, api: SubmgrApi | None = None, ids: IdStore | None = None,
                 encoder: Encoder | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 records: NodeRecords | None = None, owner: str = "",
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        #: Waits between DELETE attempts at stop (tests advance their clock with it).
        self._sleep = sleep
        #: Ids deleted by this process (oldest first), so none is deleted twice.
        self._deleted: dict[str, None] = {}
        #: Stale ids submgr was still busy with -> (attempts, when to try again).
        self._retry_delete: dict[str, tuple[int, float]] = {}
        #: Nodes already warned about having no cell for cell-level reports.
        self._no_cell_warned: set[str] = set()
        #: Shared per-node records (None: no other replica can leave one of ours behind).
        self._records = records
        self.owner = owner
        #: The node of each subscription this process made, until deleted (clears its record).
        self._sid_node: dict[str, str] = {}
        self.book = book
        self._nodes = nodes
        self._api: SubmgrApi = api if api is not None else SubmgrClient(
            settings.submgr_url, settings.http_timeout_s)
        self._ids: IdStore = ids if ids is not None else MemoryIdStore()
        self._encoder: Encoder = encoder if encoder is not None else CodecEncoder()
        self._clock = clock
        self._lock = threading.Lock()
        self._subs: dict[str, _NodeSub] = {}
        self._early: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._next_xapp_id = 0
        self._stale: set[str] | None = None  # None: not loaded from the id store yet
        self.counters: dict[str, int] = {}
        self._counters_lock = threading.Lock()
        self._budget = MAX_REQUESTS_PER_STEP
        self.nodes_seen: list[E2Node] = []

    # --- counters -----------------------------------------------------------------------------

    def _count(self, event: str, n: int = 1) -> None:
        with self._counters_lock:  # HTTP threads and the worker count concurrently
            self.counters[event] = self.counters.get(event, 0) + n

    def counts(self) -> dict[str, int]:
        with self._counters_lock:
            return dict(self.counters)

    def _spend(self) -> bool:
        """One request of this step's budget; False when it is used up."""
        if self._budget <= 0:
            return False
        self._budget -= 1
        return True

    # --- the worker's step ----------------------------------------------------------------------

    def step(self) -> None:
        """Delete stale subscriptions, read the nodes, (re)subscribe what needs it."""
        self._budget = MAX_REQUESTS_PER_STEP
        self._delete_stale()
        nodes = self._nodes.nodes()
        now = self._clock()
        current = {n.inventory_name: n for n in nodes}
        to_delete: list[str] = []
        to_subscribe: list[_NodeSub] = []
        with self._lock:
            self.nodes_seen = nodes
            for name, sub in list(self._subs.items()):
                node = current.get(name)
                if node is None or not node.connected or node.kpm != sub.node.kpm:
                    why = ("gone from the RIC" if node is None else "disconnected"
                           if not node.connected else "changed its KPM function")
                    if sub.subscription_id is not None:
                        log.info("E2 node %s %s; subscription %s dropped", name, why,
                                 sub.subscription_id)
                        to_delete.append(self._forget(sub))
                    if node is None:
                        del self._subs[name]
                        continue
                    sub.node, sub.state, sub.last_error = node, "disconnected", why
                    sub.next_at, sub.backoff_s = now, 0.0
            for node in nodes:
                found = self._subs.get(node.inventory_name)
                if found is None:
                    found = self._subs[node.inventory_name] = _NodeSub(node, next_at=now)
                sub = found
                sub.node = node
                if not node.connected:
                    sub.state = "disconnected"
                    continue
                if node.kpm is None:
                    sub.state, sub.last_error = "unusable", "no supported KPM RAN function"
                    continue
                if sub.state == "pending" and now - sub.requested_at > \
                        self.settings.response_timeout_s:
                    self._count("response_timeouts")
                    self._fail(sub, f"no answer from submgr within "
                                    f"{self.settings.response_timeout_s:.0f} s", now)
                    to_delete.append(self._forget(sub))
                if sub.state in ("new", "failed", "disconnected") and now >= sub.next_at:
                    to_subscribe.append(sub)
            self._expire_early(now)
        for sid in to_delete:
            self._delete(sid)
        for sub in to_subscribe:
            if not self._spend():
                self._count("requests_deferred")
                continue  # still due: the next step asks
            self._subscribe(sub)

    def _forget(self, sub: _NodeSub) -> str:
        """Drop ``sub``'s subscription from the book; its id (to delete at submgr)."""
        sid = sub.subscription_id
        assert sid is not None
        self.book.remove_subscription(sid)
        sub.subscription_id = None
        sub.instances = {}
        return sid

    def _fail(self, sub: _NodeSub, error: str, now: float) -> None:
        s = self.settings
        sub.state, sub.last_error = "failed", error
        if submgr_busy(error) and sub.busy < MAX_BUSY_RETRIES:
            # submgr is still deleting at the node (ours, or what a previous run left): that
            # ends by itself within its E2 time-outs, so ask again soon, not later and later.
            sub.busy += 1
            self._count("submgr_busy")
            sub.backoff_s = s.retry_min_s
        else:
            sub.busy = 0
            sub.backoff_s = min(s.retry_max_s, max(s.retry_min_s, sub.backoff_s * 2))
        sub.next_at = now + sub.backoff_s
        log.warning("E2 subscription of node %s failed (%s); retry in %.0f s",
                    sub.node.inventory_name, error, sub.backoff_s)

    def _speaks(self, node: E2Node) -> tuple[str, str]:
        """(dialect, measurement table family) of ``node``: what its indications decoded with
        once one has (a resubscription then uses it), until then the description's guess."""
        kpm = node.kpm
        assert kpm is not None
        dialect = self.book.dialect(node.inventory_name, kpm.ran_function_id) or kpm.dialect
        return dialect, family_of(dialect, (m for ms in kpm.measurements.values() for m in ms),
                                  kpm.kpm_version)

    def _details(self, node: E2Node) -> list[Detail]:
        s = self.settings
        kpm = node.kpm
        assert kpm is not None
        dialect, family = self._speaks(node)
        table = DEFAULT_MAP.for_family(family)
        details: list[Detail] = []
        errors: list[str] = []
        for style in s.report_styles:
            if kpm.report_styles and style not in kpm.report_styles:
                continue
            measurements = choose_measurements(s.measurements, kpm.measurements.get(style),
                                               table, family)
            if not measurements:
                log.info("node offers none of the configured measurements in style %d, and "
                         "none the %s table maps", style, family)
                continue
            trigger = self._encoder.event_trigger(s.report_period_ms, kpm.kpm_version)
            try:
                action = self._encoder.action_definition(
                    measurements, s.granularity_ms, kpm.kpm_version, style, dialect=dialect,
                    cell=node.cell if style in (1, 3) else None)
            except ValueError as exc:
                # One style the codec cannot encode for this node (styles 2 and 5 name UEs the
                # xApp does not know; v02.00 and ONF's v02.00.03 have no style 4 or 5): the
                # others still go.
                errors.append(f"style {style}: {exc}")
                continue
            self._next_xapp_id = self._next_xapp_id % MAX_INSTANCE_ID + 1
            details.append(Detail(self._next_xapp_id, style, measurements, trigger, action))
        if errors and not details:
            raise ValueError("; ".join(errors))
        for error in errors:
            self._count("encode_errors")
            log.warning("E2 node %s: %s left out", node.inventory_name, error)
        return details

    def _subscribe(self, sub: _NodeSub) -> None:
        node = sub.node
        assert node.kpm is not None
        now = self._clock()
        try:
            details = self._details(node)
        except ValueError as exc:  # the codec cannot encode for this node's KPM version
            with self._lock:
                sub.state, sub.last_error = "unusable", f"cannot encode: {exc}"
            self._count("encode_errors")
            log.error("E2 node %s: %s", node.inventory_name, sub.last_error)
            return
        if not details:
            with self._lock:
                sub.state = "unusable"
                sub.last_error = ("the node offers none of the report styles "
                                  f"{list(self.settings.report_styles)} with the configured "
                                  "measurements")
            return
        self._warn_no_cell(node, details)
        if not self._take_over(sub, now):
            return
        params = subscription_params(self.settings, node, details)
        with self._lock:
            sub.attempts += 1
        self._count("requests")
        try:
            sid = self._api.subscribe(params)
        except SubmgrError as exc:
            self._count("request_errors")
            with self._lock:
                self._fail(sub, str(exc), now)
            return
        with self._lock:
            sub.subscription_id = sid
            sub.instances = {d.xapp_event_instance_id: _Instance(d) for d in details}
            sub.state, sub.requested_at, sub.last_error = "pending", now, ""
            early = self._early.pop(sid, None)
            self._sid_node[sid] = node.inventory_name
        self._remember(sid)
        self._record(node.inventory_name, sid)
        log.info("E2 node %s: KPM v%d subscription %s requested (styles %s)",
                 node.inventory_name, node.kpm.kpm_version, sid,
                 [d.style for d in details])
        for instance in ([] if early is None else early[1]):
            self._apply(sid, instance)

    def _warn_no_cell(self, node: E2Node, details: Sequence[Detail]) -> None:
        """Once per node: cell-level reports (styles 1 and 3) name no cell without the
        node's, so they become no rows.  Real e2mgr writes served cells only from an EN-DC
        setup or its update-gNB REST call, never from an E2 Setup: an operator step."""
        cell_level = [d.style for d in details if d.style in (1, 3)]
        name = node.inventory_name
        if node.cell is not None or not cell_level or name in self._no_cell_warned:
            return
        if len(self._no_cell_warned) < MAX_DELETED_IDS:
            self._no_cell_warned.add(name)
        log.warning("E2 node %s has no cell: its cell-level reports (style %s) cannot be "
                    "mapped to CPEs until it has one; give it one in the R-NIB (e2mgr's "
                    "update-gNB call with its served NR cell) or in controls.e2.nodes[].cell "
                    "(docs/e2.md, \"A node's cell\")", name, ", ".join(map(str, cell_level)))

    def _take_over(self, sub: _NodeSub, now: float) -> bool:
        """Delete at submgr the subscription the node's record names, if any, before this one
        subscribes it; False when that has to wait (the attempt then counts as failed).

        This process holds no subscription of the node while it subscribes, so a recorded one
        is another replica's (it died with it live, or lost the shard and has not deleted it
        yet) or a previous run's: submgr would otherwise keep delivering its indications."""
        if self._records is None:
            return True
        name = sub.node.inventory_name
        try:
            found = self._records.get(name)
        except Exception as exc:
            self._count("store_errors")
            with self._lock:
                self._fail(sub, f"the node's subscription record is not readable: {exc}", now)
            return False
        if found is None:
            return True
        with self._lock:
            done = found.subscription_id in self._deleted
            pending = found.subscription_id in (self._stale or ())
        if pending:
            # Already being deleted (a previous run's, submgr still busy with it): the delete
            # retries on its own schedule; subscribing now would collide with it.
            self._count("requests_deferred")
            with self._lock:
                sub.last_error = (f"waiting for submgr to delete subscription "
                                  f"{found.subscription_id} first")
            return False
        if done:
            # Deleted already (by _delete_stale: a previous run's id is in the id store and in
            # the node's record); a second DELETE would only race submgr's first one.
            self._clear_record(name, found)
            return True
        if not self._spend():
            self._count("requests_deferred")
            return False  # still due: the next step deletes, then subscribes
        try:
            self._api.unsubscribe(found.subscription_id)
        except SubmgrError as exc:
            self._count("delete_errors")
            with self._lock:
                self._fail(sub, f"subscription {found.subscription_id} of {found.owner or '?'} "
                                f"not deleted: {exc}", now)
            return False
        self._count("taken_over")
        self._mark_deleted(found.subscription_id)
        log.info("E2 node %s: deleted subscription %s that %s left", name,
                 found.subscription_id, found.owner or "a previous run")
        self._clear_record(name, found)
        return True

    def _clear_record(self, name: str, found: NodeSubscription) -> None:
        if self._records is None:
            return
        try:
            self._records.clear(name, found)
        except Exception as exc:  # the record written after subscribing replaces it anyway
            self._count("store_errors")
            log.warning("E2 node %s: clearing its subscription record failed: %s", name, exc)

    def _mark_deleted(self, sid: str) -> None:
        with self._lock:
            self._deleted[sid] = None
            while len(self._deleted) > MAX_DELETED_IDS:
                del self._deleted[next(iter(self._deleted))]

    def _record(self, node: str, sid: str) -> None:
        if self._records is None:
            return
        try:
            self._records.put(node, NodeSubscription(sid, self.owner))
        except Exception as exc:
            self._count("store_errors")
            log.error("E2 node %s: recording subscription %s failed (if this replica dies, the "
                      "node's next owner will not delete it): %s", node, sid, exc)

    # --- submgr's callback ----------------------------------------------------------------------

    def on_response(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """``POST /ric/v1/subscriptions/response``: (HTTP status, JSON answer).  Never raises.

        200 for every well-formed notification (also one for a subscription this process does
        not know: submgr would retry it ten times for nothing); 400 for a malformed one."""
        try:
            doc = bounded_json.loads(body, CALLBACK_LIMITS)
            sid, instances = _parse_callback(doc)
        except ValueError as exc:
            self._count("callbacks_refused")
            log.warning("subscription callback refused: %s", exc)
            return 400, {"error": str(exc)}
        except Exception as exc:  # outside bytes: nothing gets out of here
            self._count("callbacks_refused")
            log.exception("subscription callback failed")
            return 400, {"error": f"{type(exc).__name__}"}
        self._count("callbacks")
        with self._lock:
            known = any(s.subscription_id == sid for s in self._subs.values())
            if not known:
                # The POST that made it may not have returned yet (submgr answers from a
                # goroutine): keep it for a while.
                if len(self._early) < MAX_EARLY_CALLBACKS:
                    entry = self._early.setdefault(sid, (self._clock(), []))
                    entry[1].extend(instances)
                self._count("callbacks_unknown")
                return 200, {}
        for instance in instances:
            self._apply(sid, instance)
        return 200, {}

    def _apply(self, sid: str, instance: dict[str, Any]) -> None:
        now = self._clock()
        to_delete: str | None = None
        with self._lock:
            sub = next((s for s in self._subs.values() if s.subscription_id == sid), None)
            if sub is None or sub.node.kpm is None:
                return
            inst = sub.instances.get(instance["xapp"])
            if inst is None:
                self._count("callbacks_unknown")
                return
            if instance["error"]:
                inst.error = instance["error"]
                self._count("instances_failed")
            else:
                inst.e2_instance_id, inst.error = instance["e2"], ""
                inst.note = instance["note"]
                if inst.note:
                    self._count("instances_partial")
                    log.warning("E2: subscription %s style %d active with submgr's note: %s",
                                sid, inst.detail.style, inst.note)
                kpm = sub.node.kpm
                dialect, family = self._speaks(sub.node)
                self.book.add(ActiveSubscription(
                    subscription_id=sid, node=sub.node.inventory_name,
                    request=RicRequestId(self.settings.requestor_id, instance["e2"]),
                    ran_function_id=kpm.ran_function_id, kpm_version=kpm.kpm_version,
                    report_style=inst.detail.style,
                    measurement_ids=dict(kpm.measurement_ids), dialect=dialect,
                    measurements=inst.detail.measurements,
                    cell=sub.node.cell if inst.detail.style in (1, 3) else None,
                    family=family,
                    prb_total=sub.node.prb_total, granularity_ms=self.settings.granularity_ms))
                self._count("instances_active")
            answered = [i for i in sub.instances.values() if i.e2_instance_id is not None
                        or i.error]
            if len(answered) < len(sub.instances):
                return
            ok = [i for i in sub.instances.values() if i.e2_instance_id is not None]
            errors = "; ".join(f"style {i.detail.style}: {i.error}"
                               for i in sub.instances.values() if i.error)
            if not ok:
                # Nothing usable: delete it at submgr and try again after a back-off.
                self._fail(sub, errors, now)
                to_delete = self._forget(sub)
            else:
                # A style the node refused is not retried while another one works.
                sub.state = "active" if not errors else "partial"
                sub.last_error, sub.backoff_s, sub.busy = errors, 0.0, 0
                log.info("E2 node %s: subscription %s %s (instances %s)%s",
                         sub.node.inventory_name, sid, sub.state,
                         [i.e2_instance_id for i in ok], f"; {errors}" if errors else "")
        if to_delete is not None:
            self._delete(to_delete, budgeted=False)  # on submgr's callback thread

    def _expire_early(self, now: float) -> None:
        for sid in [k for k, (t, _) in self._early.items() if now - t > EARLY_CALLBACK_S]:
            del self._early[sid]

    # --- deletion and persistence ---------------------------------------------------------------

    def _remember(self, sid: str) -> None:
        with self._lock:
            ids = {s.subscription_id for s in self._subs.values() if s.subscription_id}
            ids |= self._stale or set()
        ids.add(sid)
        try:
            self._ids.save(ids)
        except Exception as exc:
            self._count("store_errors")
            log.error("storing E2 subscription ids failed (a restart may leave %s at submgr): "
                      "%s", sid, exc)

    def _delete(self, sid: str, *, budgeted: bool = True) -> bool:
        return self._try_delete(sid, budgeted=budgeted) == "deleted"

    def _try_delete(self, sid: str, *, budgeted: bool = True) -> str:
        """"deleted", "busy" (400: submgr still handles its request; retried with back-off),
        "failed" or "deferred" (no request left in this step); what is not deleted stays
        stale, in the id store, for a later step or the next run."""
        if budgeted and not self._spend():
            with self._lock:  # deleted by a later step
                self._stale = (self._stale or set()) | {sid}
            return "deferred"
        try:
            self._api.unsubscribe(sid)
        except SubmgrBusy as exc:
            self._count("delete_busy")
            s = self.settings
            with self._lock:
                self._stale = (self._stale or set()) | {sid}
                attempts = self._retry_delete.get(sid, (0, 0.0))[0] + 1
                wait = min(s.retry_max_s, s.retry_min_s * 2 ** min(attempts - 1, 16))
                self._retry_delete[sid] = (attempts, self._clock() + wait)
            log.info("E2 subscription %s not deleted yet (%s); trying again in %.1f s", sid,
                     exc, wait)
            return "busy"
        except SubmgrError as exc:
            self._count("delete_errors")
            log.warning("deleting E2 subscription %s failed: %s", sid, exc)
            with self._lock:  # deleted at the next step (or by the next run)
                self._stale = (self._stale or set()) | {sid}
            return "failed"
        self._count("deletes")
        self._mark_deleted(sid)
        with self._lock:
            if self._stale is not None:
                self._stale.discard(sid)
            self._retry_delete.pop(sid, None)
            node = self._sid_node.pop(sid, None)
        if node is not None and self._records is not None:
            try:
                self._records.clear(node, NodeSubscription(sid, self.owner))
            except Exception as exc:
                self._count("store_errors")
                log.warning("E2 node %s: clearing its subscription record failed: %s", node, exc)
        with self._lock:
            ids = {s.subscription_id for s in self._subs.values() if s.subscription_id}
            ids |= self._stale or set()
        try:
            self._ids.save(ids)
        except Exception as exc:
            self._count("store_errors")
            log.error("storing E2 subscription ids failed: %s", exc)
        return "deleted"

    def _delete_stale(self) -> None:
        """Delete what a previous run (or a failed delete) left at submgr."""
        if self._stale is None:
            try:
                loaded = self._ids.load()
            except Exception as exc:
                self._count("store_errors")
                raise RuntimeError(f"E2 subscription ids not readable from SDL: {exc}") from exc
            with self._lock:
                self._stale = loaded
            if loaded:
                log.info("deleting %d E2 subscriptions a previous run left: %s", len(loaded),
                         sorted(loaded))
        now = self._clock()
        with self._lock:
            # One submgr is still busy with waits for its time (it ends by itself).
            stale = sorted(sid for sid in self._stale or ()
                           if self._retry_delete.get(sid, (0, now))[1] <= now)
        for sid in stale:
            if self._delete(sid):
                self._count("stale_deleted")

    def stop(self, timeout_s: float | None = None) -> None:
        """Delete every subscription this process made, one request at a time (each bounded by
        the client's timeout), starting none after ``timeout_s``: what is not deleted stays in
        SDL for the next run to delete, so a stop with many slow nodes still fits its grace
        period (overrunning it by one request at most)."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._lock:
            subs = [s for s in self._subs.values() if s.subscription_id is not None]
            ids = [self._forget(s) for s in subs]
            for s in subs:
                s.state = "stopped"
            # Kept as stale until deleted, so every save below still lists the ones not done.
            self._stale = (self._stale or set()) | set(ids)
        self.book.clear()
        for done, sid in enumerate(ids):
            if deadline is not None and self._clock() >= deadline:
                self._count("delete_deferred", len(ids) - done)
                log.warning("E2: no time left to delete %d subscriptions; the next start deletes "
                            "them", len(ids) - done)
                break
            self._delete_at_stop(sid, deadline)

    def _delete_at_stop(self, sid: str, deadline: float | None) -> None:
        """Delete ``sid``, again while submgr answers 400 (it is still handling the request
        that made it: stopped during set-up), a bounded number of times with doubling waits
        that end before ``deadline``; what is still not deleted stays in the id store."""
        wait = DELETE_RETRY_S
        for attempt in range(1, MAX_DELETE_ATTEMPTS + 1):
            if self._try_delete(sid, budgeted=False) != "busy":
                return
            left = None if deadline is None else deadline - self._clock()
            if attempt == MAX_DELETE_ATTEMPTS or (left is not None and left <= wait):
                break
            self._sleep(wait)
            wait *= 2
        log.warning("E2: submgr still busy with subscription %s; the next start deletes it", sid)

    # --- what /ric/v1/e2/subscriptions shows ------------------------------------------------------

    def view(self) -> dict[str, Any]:
        with self._lock:
            nodes: dict[str, Any] = {}
            for name, sub in sorted(self._subs.items()):
                kpm = sub.node.kpm
                nodes[name] = {
                    **node_view(sub.node),
                    "dialect": {"assumed": None if kpm is None else kpm.dialect,
                                "detected": None if kpm is None else
                                self.book.dialect(name, kpm.ran_function_id)},
                    "subscription": {
                        "id": sub.subscription_id, "state": sub.state,
                        "last_error": sub.last_error, "attempts": sub.attempts,
                        "instances": [{
                            "xapp_event_instance_id": i.detail.xapp_event_instance_id,
                            "e2_instance_id": i.e2_instance_id, "style": i.detail.style,
                            "measurements": list(i.detail.measurements),
                            "state": ("active" if i.e2_instance_id is not None else
                                      "failed" if i.error else "pending"),
                            "error": i.error, "note": i.note,
                            "indications": (0 if i.e2_instance_id is None or kpm is None else
                                            self.book.indications(i.e2_instance_id,
                                                                  kpm.ran_function_id)),
                        } for i in sub.instances.values()],
                    },
                }
            stale = sorted(self._stale or ())
        counters = self.counts()
        return {"submgr_url": self.settings.submgr_url,
                "requestor_id": self.settings.requestor_id,
                "match_requestor": self.settings.match_requestor,
                "nodes": nodes, "stale": stale, "counters": counters,
                "unmatched_indications": self.book.misses}

    def states(self) -> dict[str, int]:
        """Nodes per subscription state (metrics)."""
        with self._lock:
            out: dict[str, int] = {}
            for sub in self._subs.values():
                out[sub.state] = out.get(sub.state, 0) + 1
        return out


def _parse_callback(doc: Any) -> tuple[str, list[dict[str, Any]]]:
    """(SubscriptionId, [{"xapp", "e2", "error"}]) of a submgr notification; ValueError."""
    if not isinstance(doc, dict):
        raise ValueError("the notification is not a JSON object")
    sid = doc.get("SubscriptionId")
    if not isinstance(sid, str) or not 0 < len(sid) <= 256:
        raise ValueError("SubscriptionId missing or not a string of 1..256 characters")
    raw = doc.get("SubscriptionInstances")
    if not isinstance(raw, list) or not 0 < len(raw) <= 256:
        raise ValueError("SubscriptionInstances missing, empty or longer than 256")
    out: list[dict[str, Any]] = []
    for inst in raw:
        if not isinstance(inst, dict):
            raise ValueError("a SubscriptionInstance is not an object")
        xid, eid = inst.get("XappEventInstanceId"), inst.get("E2EventInstanceId")
        for name, value in (("XappEventInstanceId", xid), ("E2EventInstanceId", eid)):
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not 0 <= value <= MAX_INSTANCE_ID:
                raise ValueError(f"{name} must be an integer in 0..{MAX_INSTANCE_ID}")
        cause, source, timeout = (inst.get(k) or "" for k in ("ErrorCause", "ErrorSource",
                                                               "TimeoutType"))
        for name, value in (("ErrorCause", cause), ("ErrorSource", source),
                            ("TimeoutType", timeout)):
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string")
        detail = " ".join(p[:200] for p in (cause.strip(), f"({source})" if source else "",
                                            f"[{timeout}]" if timeout else "") if p)
        # submgr tells success from failure by the E2 instance id alone: a success carries
        # the node's instance id and, always, ErrorSource "E2Node" with ErrorCause " " (two
        # empty strings formatted with a space), or "RICSubscriptionResponse partially
        # accepted: ActionNotAdmittedList: [...]"; a failure carries 0 with the cause (and
        # TimeoutType on time-outs).  So a cause on a non-zero id is a note, not an error.
        if eid == 0:
            out.append({"xapp": xid, "e2": 0,
                        "error": detail or "submgr answered E2 instance id 0 without a cause",
                        "note": ""})
        else:
            note = cause.strip()[:400]
            out.append({"xapp": xid, "e2": eid, "error": "", "note": note})
    return sid, out
