"""The xApp's weight publisher: latest weights per CPE, retained, QoS 1, over mutual TLS.

Delivery rules, and why:

* **One message in flight per CPE.** A CPE's next weights are sent only after the broker
  acknowledged the previous ones, so messages of one CPE can never overtake each other, not
  even across a reconnect. The broker's retained message therefore always ends at the newest
  version. The queues are :class:`~xapp.adapters.mqtt.outbox.Outbox`'s.
* **Coalescing.** While a CPE has a message in flight, or the broker is unreachable, newer
  weights for it replace the queued ones: after an outage each CPE gets its latest weights
  once, not the backlog of every tick. A message that was in flight when the connection
  dropped is sent again after the reconnect, unless newer weights replaced it meanwhile.
* **Versions only grow**, across restarts and changes of owner: see
  :mod:`xapp.adapters.mqtt.versions`. A replica that acquires a shard :meth:`forget`-s its
  cached version blocks of the shard's CPEs, so it reads the previous owner's ceiling again.
* **Fenced** (several replicas, :class:`~xapp.core.ownership.ShardFence`): weights of a CPE
  leave only while this replica holds the CPE's shard with a locally valid lease, checked when
  a batch is handed over (no version is used for a fenced CPE) and again for every message
  as it goes onto the wire, so weights that waited in the queue (a slow broker, a reconnect)
  past the lease are dropped rather than sent late.
* **Reconnect with exponential backoff** (bounds in
  :class:`~xapp.adapters.mqtt.connection.MqttSettings`), from ``reconnect_min_s`` doubling to
  ``reconnect_max_s``, reset after a successful CONNACK.

Performance (issue 5: a tick of 10,000 CPEs delivered in at most 1 s): one network thread owns
the TLS socket and does all of the MQTT work; callers only build and validate payloads and
queue them under a short lock, then wake the thread once per batch. The thread writes the
queued PUBLISH packets in 64 KiB TLS writes and parses PUBACKs in bulk with the minimal codec
of :mod:`xapp.adapters.mqtt.connection` (paho-mqtt took 45 to 90 µs of CPU per message, most
of it in per-packet objects and thread hand-overs; see ``bench/bench_fanout.py``). Use
:meth:`MqttWeightPublisher.publish_many` for a whole tick.

Thread-safety: :meth:`publish` and :meth:`publish_many` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from xapp.adapters.mqtt.connection import (
    DISCONNECT,
    DISCONNECT_PACKET,
    PINGREQ_PACKET,
    PINGRESP,
    PUBACK,
    RECEIVE_MAXIMUM,
    MqttSettings,
    PacketReader,
    ProtocolError,
    TlsStream,
    open_session,
    parse_puback,
    publish_parts,
)
from xapp.adapters.mqtt.drops import DropCounter
from xapp.adapters.mqtt.outbox import Outbox, Outgoing
from xapp.adapters.mqtt.topics import weights_topic
from xapp.adapters.mqtt.versions import VersionAllocator
from xapp.adapters.mqtt.weights_encoder import EncodedWeights, encode_weights_batch, single_batch
from xapp.core.ownership import Fenced, ShardFence
from xapp.core.ports import Choice, PublishResult, VersionStore, WeightBatch
from xapp.core.weights import WeightDecision

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 10.0
#: CPEs of a ``publish_many`` call queued per lock hold and wake-up.
_BATCH_CHUNK = 1000


@dataclass
class PublisherStats:
    """Counters since start (read under no lock: a snapshot may be a message off)."""

    #: ``publish()`` calls accepted (each CPE of ``publish_many`` counts once).
    requested: int = 0
    #: Messages handed to the broker connection (re-sends after a reconnect not counted).
    sent: int = 0
    #: Acknowledged by the broker with a success reason code.
    acked: int = 0
    #: Acknowledged with an error reason code (e.g. 0x87 not authorised); not retried.
    rejected: int = 0
    #: Queued weights replaced by newer weights for the same CPE before they were sent.
    coalesced: int = 0
    #: ``publish()`` calls refused because the payload would not validate.
    invalid: int = 0
    connects: int = 0
    disconnects: int = 0
    #: Messages in flight at a disconnect that were sent again after the reconnect.
    resent: int = 0
    #: Weights not sent because this replica does not hold the CPE's shard (any more).
    fenced: int = 0


class MqttWeightPublisher:
    """Implements :class:`xapp.core.ports.WeightPublisher` over MQTT 5 and mutual TLS.

    Parameters
    ----------
    settings : MqttSettings
        Broker address and the xApp's certificate.
    versions : VersionStore
        Durable per-CPE version ceilings (SDL in the RIC; a file or memory store in tests).
    version_block : int, default=100
        Versions reserved per store write; a restart skips at most this many per CPE.
    window : int, default=1000
        Messages in flight over the whole connection; clamped to the broker's MQTT 5 Receive
        Maximum (``max_inflight_messages`` in ``broker/mosquitto.conf``).
    drops : DropCounter or None
        Where refused payloads are counted; a new counter when None.
    clock : callable, default=time.time
        Unix time in seconds, for ``issued_at_ms`` when ``issue_ms`` is None.
    issue_ms : callable or None
        The issue time in Unix ms (:class:`xapp.core.issue_clock.IssueClock`: never below
        what a previous owner issued); None: ``clock``.
    fence : ShardFence or None
        Which CPEs' weights may leave (several replicas); None: every CPE's.

    Examples
    --------
    >>> pub = MqttWeightPublisher(settings, FileVersionStore("/var/lib/mcw/versions.json"))
    ... # doctest: +SKIP
    >>> pub.start().wait_connected(10)                                # doctest: +SKIP
    >>> pub.publish("cpe-0001", decision, mode="load_balancing", lease_s=30)  # doctest: +SKIP
    >>> pub.publish_many(WeightBatch.same([("cpe-0002", decision, "load_balancing")], 30))
    ... # doctest: +SKIP
    """

    def __init__(self, settings: MqttSettings, versions: VersionStore, *,
                 version_block: int = 100, window: int = 1000,
                 drops: DropCounter | None = None,
                 clock: Callable[[], float] = time.time,
                 fence: ShardFence | None = None,
                 issue_ms: Callable[[], int] | None = None) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        if window > 65535:
            raise ValueError("window must be <= 65535 (MQTT packet identifiers)")
        self.settings = settings
        self.drops = drops if drops is not None else DropCounter()
        self.stats = PublisherStats()
        self._clock = clock
        self._issue_ms = issue_ms if issue_ms is not None else lambda: int(clock() * 1000)
        self.fence = None if fence is None or fence.everything else fence
        self._versions = VersionAllocator(versions, block=version_block)
        self._window = window
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        #: Guarded by the lock, as are the two flags below.
        self._outbox = Outbox(window=window)
        self._online = False
        #: A wake-up byte is on its way to the network thread (one per batch, not per message).
        self._wake_pending = False
        self._tls = settings.tls_context()
        self._client_id = f"{settings.client_id}-pub"
        # The network thread sleeps in select() on the socket and on this pair, made by
        # start() and closed by stop().
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        #: Network threads started again after the previous one died.
        self.restarts = 0
        self._last_loop = time.monotonic()
        #: Since when a PINGREQ or PUBLISH has waited for the broker's answer (None: nothing
        #: waits), and when the broker last sent anything; written by the network thread.
        self._awaiting_since: float | None = None
        self._last_heard = time.monotonic()
        self._overdue_logged = False
        #: ``time.monotonic()`` when weights last went onto the wire (None: never); with
        #: sharding, when this replica last acted for any shard.
        self.last_sent_monotonic: float | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> MqttWeightPublisher:
        """Connect in the background (retrying with backoff until the broker answers)."""
        if not self._started:
            self._stopping.clear()
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
            self._last_loop = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="mcw-pub-net", daemon=True)
            self._thread.start()
            self._started = True
        return self

    # --- supervision -----------------------------------------------------------------------
    #
    # The network thread is not an xapp.core.workers.Worker: its loop keeps a connection's
    # state (stream, packet reader, keep-alive clock) between select rounds and wakes on a
    # socket pair, not on the worker's event. It catches everything a round raises (what is
    # not a network error is logged as a bug and handled as a lost connection), and these
    # give the supervisor what it needs: a probe, a restart and a heartbeat.

    @property
    def thread_alive(self) -> bool:
        """True while the network thread runs (connected, or reconnecting with backoff)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def last_loop_monotonic(self) -> float:
        """``time.monotonic()`` when the network thread last went round its loop: at most
        1 s apart while connected; while disconnected, at each connection attempt (a failed
        attempt takes up to 10 s per step, and attempts are up to ``reconnect_max_s`` apart).
        """
        return self._last_loop

    def healthy(self, now: float | None = None) -> bool:
        """Probe for ``Supervisor.watch`` (with :meth:`restart`): False while started and the
        network thread is dead (the supervisor restarts it within its budget) or stuck: no
        turn of its loop for longer than the slowest reconnect (backoff plus the connect
        steps' timeouts), which no restart can cure, so /alive fails and the pod restarts."""
        if not self._started:
            return True
        stall_s = self.settings.reconnect_max_s + 4 * _CONNECT_TIMEOUT_S
        now = time.monotonic() if now is None else now
        return self.thread_alive and now - self._last_loop < stall_s

    def restart(self) -> bool:
        """Start a new network thread if the running one died; True if one was started.

        Queued and in-flight weights survive: the new thread connects and sends them, as
        after any reconnect.
        """
        if not self._started or self.thread_alive:
            return False
        log.error("the publisher's network thread died; starting a new one")
        self.restarts += 1
        self._thread = threading.Thread(target=self._run, name="mcw-pub-net", daemon=True)
        self._thread.start()
        return True

    def wait_connected(self, timeout_s: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._online, timeout=timeout_s)

    @property
    def connected(self) -> bool:
        with self._lock:
            return self._online

    def answering(self, now: float | None = None) -> bool:
        """Connected, and the broker answered what it was sent within ``answer_timeout_s``
        (readiness): False for a broker that is stopped but whose connection is still open."""
        now = time.monotonic() if now is None else now
        since = self._awaiting_since
        return self.connected and (since is None
                                   or now - since <= self.settings.answer_timeout_s)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued message was acknowledged; False on timeout."""
        with self._idle:
            return self._idle.wait_for(
                lambda: self._outbox.pending() == 0,
                timeout=timeout_s)

    def stop(self, flush_timeout_s: float = 5.0) -> None:
        """Flush (bounded), disconnect cleanly and stop the network thread."""
        if not self._started:
            return
        self.flush(flush_timeout_s)
        self._stopping.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=_CONNECT_TIMEOUT_S + 5)
        self._thread = None
        self._started = False
        with self._lock:
            pair, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), None, None
        for end in pair:
            if end is not None:
                end.close()

    # --- publishing ------------------------------------------------------------------------

    def prepare(self, cpe_ids: Collection[str]) -> None:
        """Reserve versions for many CPEs with one store write (call before a large tick)."""
        with self._lock:
            self._versions.reserve(cpe_ids)

    def publish(self, cpe_id: str, decision: WeightDecision, *, mode: str,
                lease_s: float, ul: Choice | None = None) -> int:
        """Queue the CPE's latest weights (``dl``: ``decision`` under ``mode``; ``ul`` the
        same unless given as ``(decision, mode)``); returns the version they were given.

        Raises
        ------
        PayloadError
            The weights would not validate (all zero, out of range, unknown WAT or mode, bad
            cpe_id, lease out of 1..3600 s); nothing is queued and no version is used.
        """
        result = self.publish_many(single_batch(cpe_id, (decision, mode), ul, lease_s))
        if cpe_id in result.errors:
            raise result.errors[cpe_id]
        return result.versions[cpe_id]

    def publish_many(self, batch: WeightBatch) -> PublishResult:
        """Queue the latest weights of many CPEs at once (one tick); one wake-up per chunk.

        Same rules as :meth:`publish` per CPE, but a refused CPE does not raise: it is counted,
        logged and reported in :attr:`PublishResult.errors`, and the others are queued. A CPE
        named twice keeps the later weights (the earlier ones are coalesced).
        """
        if len(batch) == 0:
            return PublishResult()
        fenced: dict[str, Exception] = {}
        if self.fence is not None:
            allowed = self.fence.mask(batch.cpe_ids)
            if not allowed.all():
                for i in np.flatnonzero(~allowed).tolist():
                    fenced[batch.cpe_ids[i]] = Fenced(batch.cpe_ids[i])
                self._count_fenced(len(fenced))
                batch = batch.subset(np.flatnonzero(allowed))
                if len(batch) == 0:
                    return PublishResult(errors=fenced)
        if self.fence is not None:
            # Several replicas: the store is a shared Redis that a partition can take away.
            # Only the CPEs that need it (a new block, or a shard just acquired) wait for it;
            # the others keep their weights flowing until their fence lapses.
            batch, waiting = self._without_store(batch)
            fenced.update(waiting)
            if len(batch) == 0:
                return PublishResult(errors=fenced)
        out = encode_weights_batch(batch, self._issue_ms(), self._take_versions)
        ids = batch.cpe_ids
        for i, exc in out.refused.items():
            self.stats.invalid += 1
            self.drops.drop("weights", exc.reason, exc.detail, str(ids[i]))
        # In chunks, each handed to the network thread at once: the broker starts on the
        # first messages while the rest of a large tick is still being queued, and the
        # network thread never waits long for the lock.
        for start in range(0, len(out.rows), _BATCH_CHUNK):
            self._queue(ids, out, start, start + _BATCH_CHUNK)
        result = out.result(batch)
        result.errors.update(fenced)
        return result

    def _without_store(self, batch: WeightBatch) -> tuple[WeightBatch, dict[str, Exception]]:
        """``batch`` after reserving the versions it needs; when the store fails, without the
        CPEs that needed it (reported with the store's error)."""
        try:
            with self._lock:
                self._versions.reserve(batch.cpe_ids)
            return batch, {}
        except Exception as exc:
            with self._lock:
                short = set(self._versions.exhausted(batch.cpe_ids))
            keep = np.array([i for i, c in enumerate(batch.cpe_ids) if c not in short],
                            dtype=np.intp)
            return batch.subset(keep), {c: exc for c in short}

    def _count_fenced(self, n: int) -> None:
        self.stats.fenced += n
        if self.fence is not None:
            self.fence.count_fenced(n)

    def forget(self, shards: Collection[int]) -> None:
        """Drop what this process cached about the CPEs of ``shards``: their version blocks
        (the next weights read the stored ceiling again, above whatever another owner sent
        meanwhile) and their weights still queued (made before the shard changed hands)."""
        fence = self.fence
        if fence is None or not shards:
            return
        wanted = set(shards)
        with self._lock:
            self._versions.forget(lambda c: fence.shard(c) in wanted)
            self._outbox.forget(wanted.__contains__)

    def _take_versions(self, cpe_ids: list[str]) -> list[int]:
        with self._lock:
            return self._versions.take_many(cpe_ids)

    def _queue(self, ids: Sequence[str], out: EncodedWeights, start: int, stop: int) -> None:
        with self._lock:
            outbox = self._outbox
            for i, version, payload in zip(out.rows[start:stop], out.versions[start:stop],
                                           out.payloads[start:stop], strict=True):
                cpe_id = ids[i]
                head, tail = publish_parts(weights_topic(cpe_id), payload)
                if outbox.put(Outgoing(cpe_id, version, head, tail,
                                       -1 if self.fence is None else self.fence.shard(cpe_id))):
                    self.stats.coalesced += 1
            self.stats.requested += min(stop, len(out.rows)) - start
            wake = self._online and bool(outbox.ready) and not self._wake_pending
            if wake:
                self._wake_pending = True
        if wake:
            self._wake()

    def last_version(self, cpe_id: str) -> int:
        """The last version given to ``cpe_id`` by this process (0 if none)."""
        with self._lock:
            return self._versions.last(cpe_id)

    def acked_version(self, cpe_id: str) -> int:
        """The newest version of ``cpe_id`` the broker acknowledged (0 if none)."""
        with self._lock:
            return self._outbox.acked_version.get(cpe_id, 0)

    def pending(self) -> int:
        """Messages queued or in flight."""
        with self._lock:
            return self._outbox.pending()

    # --- the network thread ------------------------------------------------------------------

    def _wake(self) -> None:
        wake_w = self._wake_w
        if wake_w is None:
            return  # not started (or stopped): the next start() serves the queue
        # Full (BlockingIOError): wake-ups are pending anyway. Closed by a concurrent stop():
        # nothing to wake.
        with contextlib.suppress(OSError):
            wake_w.send(b"\x00")

    def _run(self) -> None:
        delay = self.settings.reconnect_min_s
        while not self._stopping.is_set():
            self._last_loop = time.monotonic()
            try:
                stream, receive_max = self._connect()
            except Exception as exc:
                if isinstance(exc, OSError | ProtocolError):
                    log.warning("publisher cannot reach the broker %s:%d (%s); retry in %.1f s",
                                self.settings.host, self.settings.port, exc, delay)
                else:
                    log.exception("publisher: connecting failed; retry in %.1f s", delay)
                if self._stopping.wait(delay):
                    return
                delay = min(delay * 2, self.settings.reconnect_max_s)
                continue
            delay = self.settings.reconnect_min_s
            reason: str | None = None
            try:
                self._connected(receive_max)
                self._serve(stream)
            except (OSError, ProtocolError) as exc:
                reason = str(exc) or type(exc).__name__
            except Exception as exc:
                # A bug, not the network: the connection goes (what was in flight is sent
                # again after the reconnect) and the thread carries on.
                log.exception("publisher: the network loop failed")
                reason = f"{type(exc).__name__}: {exc}"
            finally:
                self._disconnected(stream, reason)

    def _connect(self) -> tuple[TlsStream, int]:
        """TCP + TLS + CONNECT/CONNACK, blocking with a timeout; the Receive Maximum."""
        stream, props = open_session(self.settings, self._tls, self._client_id,
                                     _CONNECT_TIMEOUT_S)
        return stream, props.get(RECEIVE_MAXIMUM, 65535)

    def _connected(self, receive_max: int) -> None:
        with self._lock:
            self._online = True
            self.stats.connects += 1
            resent, coalesced = self._outbox.reconnected(max(1, min(self._window, receive_max)))
            self.stats.resent += resent
            self.stats.coalesced += coalesced
            self._wake_pending = False
            self._idle.notify_all()
        log.info("publisher connected to %s:%d", self.settings.host, self.settings.port)

    def _disconnected(self, stream: TlsStream, reason: str | None) -> None:
        try:
            if reason is None:
                stream.sock.setblocking(True)
                stream.sock.settimeout(1.0)
                stream.write(DISCONNECT_PACKET)
                stream.sock.sendall(stream.pending_bytes())
        except OSError:
            pass
        finally:
            stream.close()
        with self._lock:
            self._online = False
            self.stats.disconnects += 1
            self._idle.notify_all()
        if reason is None:
            log.info("publisher disconnected")
        else:
            log.warning("publisher lost the broker (%s); reconnecting with backoff", reason)

    def _fill(self, out: bytearray) -> None:
        """Move ready messages into flight while the window allows; append their packets."""
        with self._lock:
            self._wake_pending = False
            fence = self.fence
            now = time.monotonic()
            sent, fenced = self._outbox.fill(
                out, None if fence is None else lambda shard: fence.allows_shard(shard, now))
            if fenced:
                self._count_fenced(fenced)
            self.stats.sent += sent
            if sent:
                self.last_sent_monotonic = now

    def _acknowledge(self, acks: list[tuple[int, int]]) -> None:
        with self._lock:
            acked, rejected = self._outbox.acknowledge(acks)
            self.stats.acked += acked
            self.stats.rejected += len(rejected)
            for msg, code in rejected:
                log.error("broker rejected weights v%d for %s: reason 0x%02x",
                          msg.version, msg.cpe_id, code)
            self._idle.notify_all()

    def _heard(self, ping_pending: bool) -> None:
        """The broker answered: what still waits, waits from now."""
        now = self._last_heard = time.monotonic()
        with self._lock:
            waiting = ping_pending or bool(self._outbox.inflight)
        self._awaiting_since = now if waiting else None
        if not self.answering(now):
            return
        if self._overdue_logged:
            self._overdue_logged = False
            log.info("the broker %s:%d answers again", self.settings.host, self.settings.port)

    def _serve(self, stream: TlsStream) -> None:
        """Pump messages and acknowledgements until stopped or the connection fails."""
        keepalive = float(self.settings.keepalive_s)
        reader = PacketReader()
        out = bytearray()
        sock = stream.sock
        last_out = time.monotonic()
        ping_sent: float | None = None
        self._awaiting_since = None
        self._last_heard = last_out
        probe = self.settings.answer_timeout_s
        wake_r = self._wake_r
        assert wake_r is not None  # made by start() before the thread
        while not self._stopping.is_set():
            self._fill(out)
            if out:
                stream.write(out)
                out.clear()
                last_out = time.monotonic()
                if self._awaiting_since is None:
                    self._awaiting_since = last_out
            all_sent = stream.flush()
            now = self._last_loop = time.monotonic()
            if ping_sent is not None and now - ping_sent > keepalive:
                raise ConnectionError(f"no PINGRESP within {keepalive:.0f} s")
            # Keep-alive, and a probe of a connection silent for answer_timeout_s: a stopped
            # broker answers nothing, and readiness must know in seconds, not a keep-alive.
            if ping_sent is None and (now - last_out >= keepalive / 2
                                      or now - self._last_heard >= probe):
                stream.write(PINGREQ_PACKET)
                all_sent = stream.flush()
                ping_sent = last_out = now
                if self._awaiting_since is None:
                    self._awaiting_since = now
            if not self._overdue_logged and not self.answering(now):
                self._overdue_logged = True
                log.warning("the broker %s:%d has not answered for %.0f s (stopped or hung?); "
                            "not ready until it does", self.settings.host, self.settings.port,
                            now - (self._awaiting_since or now))
            timeout = max(0.0, min(1.0, last_out + keepalive / 2 - now))
            rlist, _w, _x = select.select([sock, wake_r],
                                          [] if all_sent else [sock], [], timeout)
            if wake_r in rlist:
                with contextlib.suppress(BlockingIOError):
                    wake_r.recv(4096)
            if sock in rlist:
                acks: list[tuple[int, int]] = []
                packets = reader.feed(stream.read())
                for first, body in packets:
                    if first == PUBACK:
                        acks.append(parse_puback(body))
                    elif first == PINGRESP:
                        ping_sent = None
                    elif first == DISCONNECT:
                        code = body[0] if body else 0
                        raise ConnectionError(f"broker sent DISCONNECT reason 0x{code:02x}")
                if acks:
                    self._acknowledge(acks)
                if packets:
                    self._heard(ping_sent is not None)
