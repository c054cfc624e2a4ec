"""The xApp's state, kept in memory and mirrored to SDL (Redis through ricsdl).

What is kept, in the SDL namespace of ``controls.sdl_namespace`` (default ``mcw``):

``policy/<instance id>``  an accepted A1 policy instance (:class:`~xapp.adapters.a1.PolicyInstance`)
``cpe/<cpe id>``          the CPE's last published weights, their version and decision
``model/version``         the capacity model version in use
``meta/writer``           a marker; when it is missing after a reconnect, Redis lost its data

Memory is the source of truth while the process runs: the control loop and the A1 handler only
touch memory and mark keys dirty, and one background thread (:meth:`SdlStateStore.start`) flushes
dirty keys in one ``set`` per pass.  So a Redis that hangs or goes away never stalls the loop;
while it is gone :attr:`SdlStateStore.connected` is False (``/ric/v1/health/ready`` says so) and
the flusher retries with a fresh client each pass.  When it comes back the flusher catches up:
it writes what changed meanwhile, or everything if the marker shows Redis came back empty.
On the first successful connection the stored state is loaded (restart restore); keys changed
locally before that keep their local value.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from xapp.core.policy_book import PolicyInstance
from xapp.core.ports import CpeRecord, Published
from xapp.core.workers import Worker

log = logging.getLogger(__name__)

POLICY_PREFIX = "policy/"
CPE_PREFIX = "cpe/"
MODEL_KEY = "model/version"
MARKER_KEY = "meta/writer"


class SdlBackend(Protocol):
    """The part of ``ricsdl.syncstorage.SyncStorage`` the xApp uses (this store, the CPE
    registry, the E2 subscription ids)."""

    def is_active(self) -> bool: ...

    def set(self, ns: str, data_map: dict[str, bytes]) -> None: ...

    def get(self, ns: str, keys: str | AbstractSet[str]) -> dict[str, bytes]: ...

    def find_and_get(self, ns: str, key_pattern: str) -> dict[str, bytes]: ...

    def remove(self, ns: str, keys: str | AbstractSet[str]) -> None: ...

    def close(self) -> None: ...


#: How long one SDL call may wait for Redis: far below the flusher's 30 s stuck deadline, and
#: far above what a loaded Redis takes to write a tick's records or list a large namespace.
SDL_TIMEOUT_S = 3.0


def ricsdl_backend(timeout_s: float = SDL_TIMEOUT_S) -> SdlBackend:
    """A ricsdl client; reads ``DBAAS_SERVICE_HOST``/``DBAAS_SERVICE_PORT`` (and the sentinel
    and cluster variables) from the environment like every RIC component.

    ricsdl makes its redis-py clients without a socket timeout and takes none, so a Redis that
    accepts the connection and never answers would hold the caller (the state flusher, the A1
    book's read, the E2 registry's reload) until TCP gives up.  The clients are lazy (nothing
    is connected yet), so the timeouts are set in their pools' connection arguments, which
    every connection they open later is made from; a Sentinel's own clients get them too.
    (SDL notifications would read through the same pools and time out while idle: the xApp
    subscribes to none.)"""
    from ricsdl.syncstorage import SyncStorage

    storage = SyncStorage()
    for conn in storage.get_backend().clients:
        pools = [conn.redis_client.connection_pool]
        manager = getattr(pools[0], "sentinel_manager", None)
        if manager is not None:
            pools += [s.connection_pool for s in manager.sentinels]
        for pool in pools:
            pool.connection_kwargs.update(socket_timeout=timeout_s,
                                          socket_connect_timeout=timeout_s)
            # A connection opened before the update keeps no timeout: drop any.
            pool.disconnect()
    return storage  # type: ignore[no-any-return]


@dataclass
class Restored:
    """What the first successful load brought back (handed to ``on_restore``)."""

    policies: list[PolicyInstance] = field(default_factory=list)
    cpes: dict[str, CpeRecord] = field(default_factory=dict)
    model_version: str | None = None


class _PublishedRow(NamedTuple):
    """A CPE's record as row ``i`` of what a tick published (made into a record lazily)."""

    published: Published
    i: int

    def to_dict(self) -> dict[str, Any]:
        return self.published.record(self.i).to_dict()


def _record(value: object) -> CpeRecord | None:
    if isinstance(value, _PublishedRow):
        return value.published.record(value.i)
    return value if isinstance(value, CpeRecord) else None


def _encode(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


class SdlStateStore:
    """In-memory state mirrored to SDL; safe for concurrent use.

    Parameters
    ----------
    namespace : str
        SDL namespace.
    backend_factory : callable or None, default=None
        Makes a new SDL client; None keeps state in memory only (tests of the loop, ``--no-sdl``).
    on_error : callable, default=None
        Called once per failed SDL pass (metrics).
    on_restore : callable, default=None
        Called with :class:`Restored` after the first successful load, from the flusher thread.
    """

    def __init__(self, namespace: str = "mcw",
                 backend_factory: Callable[[], SdlBackend] | None = None, *,
                 on_error: Callable[[], None] | None = None,
                 on_restore: Callable[[Restored], None] | None = None,
                 interval_s: float = 0.5) -> None:
        self.namespace = namespace
        self._factory = backend_factory
        self._on_error = on_error
        self._on_restore = on_restore
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._values: dict[str, Any] = {}
        self._dirty: set[str] = set()
        self._removed: set[str] = set()
        self._backend: SdlBackend | None = None
        self._connected = False
        self._last_ok = 0.0
        self._loaded = False
        self._last_error = ""
        #: A1 instances changed here and not yet written, as of the last :meth:`read_policies`.
        self.pending_policies: frozenset[str] = frozenset()
        #: Flushes every ``interval_s`` once started (only when there is a Redis to flush to).
        self.worker = Worker("mcw-sdl", self.sync, interval_s)

    # --- state API (memory only, never blocks on Redis) -------------------------------------

    @property
    def enabled(self) -> bool:
        return self._factory is not None

    @property
    def connected(self) -> bool:
        """True when the last SDL pass succeeded recently (always True without a backend).

        "Recently" matters when Redis hangs instead of refusing: the flusher then blocks and
        no pass fails, so a stale success must not count as reachable."""
        if self._factory is None:
            return True
        stale_after = max(5.0, 10 * self._interval_s)
        return self._connected and time.monotonic() - self._last_ok < stale_after

    @property
    def last_error(self) -> str:
        return self._last_error

    def pending(self) -> int:
        """Keys waiting to be written or removed."""
        with self._lock:
            return len(self._dirty) + len(self._removed)

    def _put(self, key: str, value: Any) -> None:
        with self._lock:
            self._values[key] = value
            self._dirty.add(key)
            self._removed.discard(key)

    def _drop(self, key: str) -> None:
        with self._lock:
            self._values.pop(key, None)
            self._dirty.discard(key)
            self._removed.add(key)

    def save_policy(self, instance: PolicyInstance) -> None:
        self._put(POLICY_PREFIX + instance.instance_id, instance.to_dict())

    def delete_policy(self, instance_id: str) -> None:
        self._drop(POLICY_PREFIX + instance_id)

    def policies(self) -> list[PolicyInstance]:
        with self._lock:
            docs = [v for k, v in self._values.items() if k.startswith(POLICY_PREFIX)]
        return sorted((PolicyInstance.from_dict(d) for d in docs), key=PolicyInstance.rank)

    def put_cpe(self, cpe_id: str, record: CpeRecord) -> None:
        self._put(CPE_PREFIX + cpe_id, record)

    def put_published(self, published: Published) -> None:
        # Kept as (tick, row) and made into a record only when read or written to SDL: the
        # loop publishes thousands of CPEs a tick and most records are overwritten unread.
        # Keys and rows are made by map and the dict and set take them in bulk: no Python
        # statement runs per CPE (tuple.__new__ makes the named tuple without its Python
        # __new__).
        keys = list(map(CPE_PREFIX.__add__, published.batch.cpe_ids))
        rows = map(tuple.__new__, repeat(_PublishedRow),
                   zip(repeat(published), range(len(keys))))
        with self._lock:
            self._values.update(zip(keys, rows, strict=True))
            self._dirty.update(keys)
            if self._removed:
                self._removed.difference_update(keys)

    def cpe(self, cpe_id: str) -> CpeRecord | None:
        with self._lock:
            value = self._values.get(CPE_PREFIX + cpe_id)
        return _record(value)

    def cpes(self) -> dict[str, CpeRecord]:
        with self._lock:
            items = [(k[len(CPE_PREFIX):], v) for k, v in self._values.items()
                     if k.startswith(CPE_PREFIX)]
        return {cpe_id: r for cpe_id, v in items if (r := _record(v)) is not None}

    def forget_cpes(self, which: Callable[[str], bool]) -> int:
        """Drop this process's copy of the records of the CPEs ``which`` selects (SDL keeps
        them): another replica published for them since they were loaded or written here, so
        they must not seed the loop's decisions in force.  Returns how many were dropped."""
        with self._lock:
            gone = [k for k in self._values
                    if k.startswith(CPE_PREFIX) and which(k[len(CPE_PREFIX):])]
            for k in gone:
                del self._values[k]
                self._dirty.discard(k)
        return len(gone)

    def set_model_version(self, version: str) -> None:
        with self._lock:
            if self._values.get(MODEL_KEY) == version:
                return
        self._put(MODEL_KEY, version)

    @property
    def model_version(self) -> str | None:
        with self._lock:
            value = self._values.get(MODEL_KEY)
        return None if value is None else str(value)

    # --- SDL side ---------------------------------------------------------------------------

    def sync(self) -> bool:
        """One pass: connect if needed, load once, write what is dirty.  False on failure."""
        if self._factory is None:
            return True
        with self._io_lock:
            try:
                self._sync_once()
            except Exception as exc:  # ricsdl raises its own and redis-py's errors
                self._fail(exc)
                return False
        return True

    def _sync_once(self) -> None:
        assert self._factory is not None
        if self._backend is None:
            self._backend = self._factory()
        backend, ns = self._backend, self.namespace
        if not backend.is_active():
            raise ConnectionError("SDL backend is not active")
        if not self._loaded:
            self._load(backend)
        elif not backend.get(ns, {MARKER_KEY}):
            # Redis came back without our data (restarted without persistence): rewrite all.
            with self._lock:
                self._dirty.update(self._values)
            log.warning("SDL namespace %s lost its data; writing the whole state again", ns)
        with self._lock:
            dirty = {k: self._values[k] for k in self._dirty if k in self._values}
            removed = set(self._removed)
        data = {k: _encode(v.to_dict() if hasattr(v, "to_dict") else v) for k, v in dirty.items()}
        data[MARKER_KEY] = _encode({"time_s": time.time()})
        backend.set(ns, data)
        if removed:
            backend.remove(ns, removed)
        with self._lock:
            # Keys changed again while we were writing stay dirty for the next pass.
            for k, v in dirty.items():
                if self._values.get(k) is v:
                    self._dirty.discard(k)
            self._removed -= removed
        if not self._connected:
            log.info("SDL namespace %s connected (%d keys written)", ns, len(data) - 1)
        self._connected = True
        self._last_ok = time.monotonic()
        self._last_error = ""

    def _load(self, backend: SdlBackend) -> None:
        stored = backend.find_and_get(self.namespace, "*")
        restored = Restored()
        with self._lock:
            for key, raw in stored.items():
                if key == MARKER_KEY or key in self._dirty or key in self._removed:
                    continue
                try:
                    doc = json.loads(raw)
                    if key.startswith(POLICY_PREFIX):
                        restored.policies.append(PolicyInstance.from_dict(doc))
                        self._values[key] = doc
                    elif key.startswith(CPE_PREFIX):
                        record = CpeRecord.from_dict(doc)
                        restored.cpes[key[len(CPE_PREFIX):]] = record
                        self._values[key] = record
                    elif key == MODEL_KEY:
                        restored.model_version = str(doc)
                        self._values[key] = restored.model_version
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("SDL key %s/%s is unreadable and is ignored: %s",
                              self.namespace, key, exc)
            self._loaded = True
        restored.policies.sort(key=PolicyInstance.rank)
        log.info("SDL state restored: %d policy instances, %d CPEs, model %s",
                 len(restored.policies), len(restored.cpes), restored.model_version)
        if self._on_restore is not None:
            self._on_restore(restored)

    def read_policies(self) -> dict[str, PolicyInstance] | None:
        """The A1 instances as SDL has them now, for replicas that share one book: instances
        this process changed and has not written yet keep their local value (or stay
        deleted).  Memory follows what was read, so a catch-up after Redis lost its data does
        not write back an instance another replica deleted.  None when SDL is not reachable
        (the book stays as it is)."""
        if self._factory is None:
            return None
        with self._io_lock:
            try:
                if self._backend is None:
                    self._backend = self._factory()
                stored = self._backend.find_and_get(self.namespace, POLICY_PREFIX + "*")
            except Exception as exc:
                self._fail(exc)
                return None
        out: dict[str, PolicyInstance] = {}
        with self._lock:
            for key, raw in stored.items():
                if key in self._dirty or key in self._removed:
                    continue
                try:
                    doc = json.loads(raw)
                    out[key[len(POLICY_PREFIX):]] = PolicyInstance.from_dict(doc)
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("SDL key %s/%s is unreadable and is ignored: %s",
                              self.namespace, key, exc)
                    continue
                self._values[key] = doc
            for key in [k for k in self._values if k.startswith(POLICY_PREFIX)]:
                if (key not in stored and key not in self._dirty
                        and key not in self._removed):
                    del self._values[key]
            pending = {k[len(POLICY_PREFIX):] for k in (*self._dirty, *self._removed)
                       if k.startswith(POLICY_PREFIX)}
        self.pending_policies = frozenset(pending)
        return out

    def _fail(self, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if self._connected or message != self._last_error:
            log.error("SDL namespace %s unreachable, running from memory: %s",
                      self.namespace, message)
        self._connected = False
        self._last_error = message
        _close_quietly(self._backend)
        self._backend = None
        if self._on_error is not None:
            self._on_error()

    def start(self) -> None:
        """Flush in a background thread every ``interval_s`` until :meth:`stop`."""
        if self._factory is not None:
            self.worker.start()

    def stop(self, timeout_s: float = 3.0) -> None:
        """Stop the flusher after one last pass (bounded by ``timeout_s``)."""
        if not self.worker.stop(timeout_s=timeout_s):
            log.warning("SDL flusher did not stop within %.1f s; %d keys not written",
                        timeout_s, self.pending())
            return
        if self._factory is not None and self.connected:
            self.sync()
        _close_quietly(self._backend)
        self._backend = None


class _Closable(Protocol):
    def close(self) -> None: ...


_B = TypeVar("_B", bound=_Closable)


class LazySdlClient(Generic[_B]):
    """An SDL client made on first use and dropped after a failure, so that the next use
    connects again (ricsdl's client does not recover from every Redis outage by itself)."""

    def __init__(self, factory: Callable[[], _B]) -> None:
        self._factory = factory
        self._backend: _B | None = None
        self._lock = threading.Lock()

    @contextmanager
    def use(self) -> Iterator[_B]:
        """The client, one user at a time; an exception drops it (and propagates)."""
        with self._lock:
            try:
                yield self.get()
            except Exception:
                self.reset()
                raise

    def get(self) -> _B:
        if self._backend is None:
            self._backend = self._factory()
        return self._backend

    def reset(self) -> None:
        backend, self._backend = self._backend, None
        _close_quietly(backend)


def _close_quietly(backend: _Closable | None) -> None:
    """Close a client that may be broken: closing it may fail too, and nothing can be done."""
    if backend is None:
        return
    try:
        backend.close()
    except Exception:
        log.debug("closing the SDL client failed", exc_info=True)
