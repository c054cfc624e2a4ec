"""What outlives the process about the subscriptions it made at submgr: the ids (deleted by
the next start, :class:`IdStore`) and each E2 node's current subscription, shared by the
replicas (deleted by the node's next owner, :class:`NodeRecords`); in memory or in SDL.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from xapp import bounded_json
from xapp.adapters.dbaas import RedisLike, sdl_key
from xapp.adapters.sdl import LazySdlClient, SdlBackend

log = logging.getLogger(__name__)

#: SDL key (in the xApp's namespace) of the subscription ids this process made.
SDL_KEY = "e2/subscriptions"
#: SDL key prefix of each E2 node's subscription record (``e2/node/<inventory name>``): its id
#: at submgr and the replica that made it, so whoever subscribes the node next deletes one a
#: dead replica left (its per-replica key is named after a pod that never comes back).
NODE_KEY_PREFIX = "e2/node/"


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


class SdlIdStore:
    """The ids as one JSON key (``e2/subscriptions``) in the xApp's SDL namespace, written
    through: they change a few times per node and must be stored before the process can die
    with them live at submgr.  The state store (:mod:`xapp.adapters.sdl`) ignores this key."""

    MAX_IDS = 4096

    def __init__(self, namespace: str, backend_factory: Callable[[], SdlBackend],
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
