"""The xApp's side of agent state and telemetry.

Subscribes to the CPE agents' ``mcw/v1/s/{shard}/cpe/+/state`` (retained, last will) and
``.../telemetry``, the proxy agents' ``mcw/v1/s/{shard}/proxy/+/cpe/+/state|telemetry`` (per CPE
they serve, the downlink) and ``mcw/v1/proxy/+/state`` (each proxy's own state), for every shard
or for the shards this replica holds (:meth:`ChannelSubscriber.set_shards`), drops what does
not validate (counted), feeds the states to its
:class:`~xapp.adapters.mqtt.agent_directory.AgentDirectory`
(:attr:`ChannelSubscriber.directory`: which agent applies which direction, queried there), and
turns telemetry into :class:`xapp.core.forecast.KpiFrame` rows with a direction
(:func:`~xapp.adapters.mqtt.telemetry.telemetry_frame`).  It does not write to InfluxDB
itself: the xApp passes a callback, which gets a frame per batch of messages, or drains a batch
with :meth:`ChannelSubscriber.drain_telemetry` and hands it to its ``TelemetrySink``.  An empty
retained message on a proxy's per-CPE state topic means the proxy stopped serving the CPE.

Shards: a CPE's shard is :func:`xapp.core.shards.shard_of` of its id over the fleet's shard
count. A message whose topic names another shard than its CPE's is dropped (``shard-mismatch``:
the ACL lets a CPE write its own id under any shard). When the held shards change, the
subscriptions change on the live connection (new shards' retained states arrive) and what was
known of the CPEs of shards no longer held is forgotten: another replica holds them now.

Migration (deprecated, for agents of earlier releases): with ``legacy_topics`` the subscriber
also reads the unsharded ``mcw/v1/cpe/+/state|telemetry`` and
``mcw/v1/proxy/+/cpe/+/state|telemetry``, keeps only the CPEs of the shards it holds, and counts
those messages (``legacy_received``, metric ``mcw_mqtt_legacy_messages_total``): when it stays
at zero the fleet has moved and ``legacy_topics`` (and the ACL's legacy lines) can go. Once a
CPE (or a proxy for a CPE) was heard on its sharded topic, its legacy messages are ignored:
new agents clear their legacy retained state, but a clear can be lost.

State callbacks run on the network thread (:mod:`xapp.adapters.mqtt.reader`); keep them short
(append to a queue). Telemetry waits for its batch (a worker of its own) or the drain. Nothing
raised while handling a message (a hostile payload, a bug, an exception in a callback) reaches
the client: it is counted as a drop and logged, because an exception out of ``on_messages`` ends
the network thread and, with it, every CPE's state and telemetry. Should the thread end anyway,
:meth:`ChannelSubscriber.healthy` (the supervisor's probe) starts a new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from xapp.adapters.mqtt.agent_directory import AgentDirectory, CpeState, ProxyState
from xapp.adapters.mqtt.connection import MqttSettings
from xapp.adapters.mqtt.decoder import decode
from xapp.adapters.mqtt.drops import DropCounter
from xapp.adapters.mqtt.reader import MqttReader, ReceivedMessage
from xapp.adapters.mqtt.telemetry import telemetry_frame
from xapp.adapters.mqtt.topics import (
    PROXY_PREFIX,
    TOPIC_PREFIX,
    ChannelTopic,
    parse_channel_topic,
    shard_filter,
)
from xapp.core.forecast import KpiFrame
from xapp.core.shards import DEFAULT_SHARDS, MAX_SHARDS, shard_of
from xapp.core.workers import Worker

log = logging.getLogger(__name__)

#: Filters per SUBSCRIBE packet: 4096 shards of four filters each would exceed the broker's
#: max_packet_size (16 KiB) in one packet.
SUBSCRIBE_BATCH: Final = 100


class ChannelSubscriber:
    """Receives agent state and telemetry for the xApp.

    Parameters
    ----------
    settings : MqttSettings
        Broker address and the xApp's certificate.
    on_telemetry : callable or None
        Called with one :class:`KpiFrame` per batch of valid telemetry messages, on the
        subscriber's own ``mcw-telemetry-batch`` worker (:attr:`telemetry_worker`), every
        ``telemetry_batch_s`` or as soon as ``telemetry_batch_max`` messages wait. Without
        it, telemetry is kept for :meth:`drain_telemetry`.
    on_state : callable or None
        Called with the new :class:`CpeState` per valid state message, last wills included
        (a proxy's per-CPE states too: ``role`` proxy).
    on_proxy_state : callable or None
        Called with the new :class:`ProxyState` per valid proxy state message.
    share_group : str or None, default=None
        Load-share the CPE agents' telemetry between xApp replicas through the MQTT 5 shared
        subscription ``$share/{share_group}/mcw/v1/s/{shard}/cpe/+/telemetry``. State is
        always subscribed plainly: shared subscriptions get no retained messages, and the
        replica holding a shard needs every state of it.
    buffer_limit : int, default=100000
        Telemetry documents waiting (for the batch worker or :meth:`drain_telemetry`); older
        ones are dropped (counted) when nobody drains.
    telemetry_batch_s, telemetry_batch_max : float, int, default=0.05, 2000
        How long telemetry may wait for its batch, and how many messages start one at once.
    shard_count : int, default=DEFAULT_SHARDS
        The fleet's shard count (the agents' ``mqtt.shards``).
    legacy_topics : bool, default=True
        Also read the unsharded topics of agents of earlier releases (deprecated).

    Why batches: a fleet of 10,000 agents sends 10,000 telemetry messages a second. Built one
    frame per message and merged into the intake one by one, they cost about 140 µs each on
    the network thread (more than the whole core); one frame per batch costs a few µs per
    message, and the network thread only parses and validates.
    """

    def __init__(self, settings: MqttSettings, *,
                 on_telemetry: Callable[[KpiFrame], None] | None = None,
                 on_state: Callable[[CpeState], None] | None = None,
                 on_proxy_state: Callable[[ProxyState], None] | None = None,
                 share_group: str | None = None, buffer_limit: int = 100_000,
                 drops: DropCounter | None = None, telemetry_batch_s: float = 0.05,
                 telemetry_batch_max: int = 2000, shard_count: int = DEFAULT_SHARDS,
                 legacy_topics: bool = True) -> None:
        if not 1 <= shard_count <= MAX_SHARDS:
            raise ValueError(f"shard_count must be in [1, {MAX_SHARDS}], got {shard_count}")
        self.settings = settings
        self.shard_count = shard_count
        self.legacy_topics = legacy_topics
        #: Messages received on the legacy (unsharded) topics, accepted or not.
        self.legacy_received = 0
        #: Messages of CPEs of shards not held (a legacy topic, or a shard just given up).
        self.unheld = 0
        self.drops = drops if drops is not None else DropCounter()
        self.on_telemetry = on_telemetry
        self.on_state = on_state
        self.on_proxy_state = on_proxy_state
        self.share_group = share_group
        self.buffer_limit = buffer_limit
        #: Exceptions raised by ``on_telemetry`` / ``on_state`` (also counted as ``internal``).
        self.callback_errors = 0
        #: Messages handled (dropped ones included), counted once handling has finished.
        self.received = 0
        #: Network threads started again after the previous one died.
        self.restarts = 0
        # Re-entrant: wait_for() predicates call the queries under the same lock. The
        # directory's own lock may be taken while this one is held, never the other way round
        # (the directory calls nothing back). A state is stored holding both: a shard given up
        # between the check that it is held and the store cannot keep it.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        #: What the agents reported and who applies which direction (the runtime, the metrics,
        #: the endpoints and the loop's rate caps query it directly); fed by the network
        #: thread.
        self.directory = AgentDirectory()
        self._buffer: deque[dict[str, Any]] = deque()
        self.telemetry_batch_max = telemetry_batch_max
        #: Hands batches of telemetry to ``on_telemetry`` (supervise it with the others).
        self.telemetry_worker = Worker("mcw-telemetry-batch", self.flush_telemetry,
                                       telemetry_batch_s)
        self._connected = False
        self._subscribed = False
        # SUBSCRIBE packets sent on this connection and acknowledged; subscribed when equal.
        self._sub_sent = 0
        self._sub_acked = 0
        self._sub_failed = False
        #: The shards held (None: all), read on the network thread under the lock.
        self._shards: frozenset[int] | None = None
        # Serialises set_shards: its (un)subscribes go out in the order the sets changed.
        self._shards_lock = threading.Lock()
        #: CPEs, and (proxy, CPE) pairs, heard on their sharded topic: legacy ones then ignored.
        self._sharded_cpes: set[str] = set()
        self._sharded_proxy_cpes: set[tuple[str, str]] = set()
        self._client = MqttReader(settings, "sub")
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_unsubscribe = self._on_unsubscribe
        self._client.on_messages = self._on_messages
        self._started = False

    @property
    def topics(self) -> list[str]:
        """The subscriptions for the shards now held."""
        with self._lock:
            return self._topics(self._shards)

    def _topics(self, shards: frozenset[int] | None) -> list[str]:
        # The proxies' own states first: their retained states then arrive before the per-CPE
        # ones (a CPE topic named after a known proxy is refused, a downlink's proxy known).
        out = [f"{PROXY_PREFIX}/#" if self.legacy_topics else f"{PROXY_PREFIX}/+/state"]
        for shard in [None] if shards is None else sorted(shards):
            out.append(shard_filter(shard, "state"))
            out.append(self._shared(shard_filter(shard, "telemetry")))
            # Proxy telemetry is not shared between replicas: few proxies, and their per-CPE
            # state must reach the replica holding the shard.
            out.append(shard_filter(shard, "state", proxy=True))
            out.append(shard_filter(shard, "telemetry", proxy=True))
        if self.legacy_topics:
            # Every shard's: the legacy topics carry none, so the filter is in process (the
            # proxies' legacy per-CPE topics come with mcw/v1/proxy/#).
            out += [f"{TOPIC_PREFIX}/+/state", self._shared(f"{TOPIC_PREFIX}/+/telemetry")]
        return out

    def _shared(self, name: str) -> str:
        return f"$share/{self.share_group}/{name}" if self.share_group else name

    def shards(self) -> frozenset[int] | None:
        """The shards held (None: every shard)."""
        with self._lock:
            return self._shards

    def set_shards(self, shards: frozenset[int] | None) -> None:
        """Hold ``shards`` (None: all of them) from now on.

        On a live connection, subscribes to the newly held shards (their retained states
        arrive) and unsubscribes from the others, without reconnecting; what was known of the
        CPEs of shards no longer held (states, a proxy's per-CPE states, buffered telemetry)
        is forgotten. Safe to call from any thread.
        """
        new = None if shards is None else frozenset(shards)
        if new is not None and any(not 0 <= s < self.shard_count for s in new):
            raise ValueError(f"shards must be in [0, {self.shard_count}): {sorted(new)}")
        with self._shards_lock:
            with self._cond:
                old = self._shards
                if new == old:
                    return
                self._shards = new
                before, after = self._topics(old), self._topics(new)
                if new is not None:
                    self._forget(new)
                connected = self._connected
                self._cond.notify_all()
            log.info("subscriber: shards %s -> %s", _describe(old), _describe(new))
            if not connected:
                return  # on_connect subscribes to what is held then
            gone = [t for t in before if t not in after]
            added = [t for t in after if t not in before]
            if gone:
                self._client.unsubscribe(gone)
            self._subscribe(added)

    def _forget(self, held: frozenset[int]) -> None:
        """Drop what is known of the CPEs of shards not in ``held`` (under the lock)."""
        def mine(cpe: str) -> bool:
            return _shard(cpe, self.shard_count) in held
        self.directory.keep_only(mine)
        self._sharded_cpes = {c for c in self._sharded_cpes if mine(c)}
        self._sharded_proxy_cpes = {k for k in self._sharded_proxy_cpes if mine(k[1])}
        self._buffer = deque(d for d in self._buffer if mine(str(d["cpe_id"])))

    def _holds(self, cpe_id: str) -> bool:
        # Re-entrant: also called under the lock, where the message's state is stored.
        with self._lock:
            shards = self._shards
        return shards is None or _shard(cpe_id, self.shard_count) in shards

    def _subscribe(self, topics: list[str]) -> None:
        """Subscribe in packets of :data:`SUBSCRIBE_BATCH`; :meth:`wait_subscribed` holds until
        the broker acknowledged every one."""
        for i in range(0, len(topics), SUBSCRIBE_BATCH):
            batch = topics[i:i + SUBSCRIBE_BATCH]
            with self._lock:
                self._sub_sent += 1
                self._subscribed = False
            rc, _mid = self._client.subscribe([(t, 1) for t in batch])
            if rc != 0:
                # Not sent (the connection is down): on_connect subscribes to all again.
                with self._lock:
                    self._sub_sent -= 1
                log.warning("subscriber: subscribe %s... not sent (rc %s)", batch[0], rc)

    def start(self) -> ChannelSubscriber:
        if not self._started:
            self._client.connect_async(self.settings.host, self.settings.port,
                                       keepalive=self.settings.keepalive_s)
            self._client.loop_start()
            if self.on_telemetry is not None:
                self.telemetry_worker.start()
            self._started = True
        return self

    def stop(self) -> None:
        if self._started:
            self._client.disconnect()
            self._client.loop_stop()
            self.telemetry_worker.stop()
            self._started = False
            if self.on_telemetry is not None:
                self.flush_telemetry()  # what arrived before the disconnect is not lost

    # --- supervision -----------------------------------------------------------------------

    @property
    def thread_alive(self) -> bool:
        """True while the network thread runs (connected, or reconnecting with backoff)."""
        return self._client.thread_alive

    def healthy(self) -> bool:
        """Probe for ``Supervisor.watch`` (with :meth:`restart`): False only while started
        and the network thread is dead; the supervisor restarts it within its budget."""
        return not self._started or self.thread_alive

    def restart(self) -> bool:
        """Start a new network thread if the running one died; True if one was started.

        The new thread reconnects first: whatever the old one left half-read on the socket is
        discarded with it, and the broker sends again the QoS 1 messages not acknowledged.
        """
        if not self._started or self.thread_alive:
            return False
        log.error("the subscriber's network thread died; starting a new one")
        with self._lock:
            self._connected = self._subscribed = False
        self.restarts += 1
        self._client.connect_async(self.settings.host, self.settings.port,
                                   keepalive=self.settings.keepalive_s)
        self._client.loop_start()
        return True

    def wait_subscribed(self, timeout_s: float) -> bool:
        """True once connected and the broker acknowledged the subscriptions."""
        with self._cond:
            return self._cond.wait_for(lambda: self._subscribed, timeout=timeout_s)

    def wait_for(self, predicate: Callable[[ChannelSubscriber], bool], timeout_s: float) -> bool:
        """Wait until ``predicate(self)`` holds (re-checked after every message)."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout=timeout_s)

    # --- telemetry -----------------------------------------------------------------------------

    def drain_telemetry(self) -> KpiFrame:
        """All telemetry received since the last drain, as one frame (possibly empty)."""
        with self._lock:
            docs, self._buffer = list(self._buffer), deque()
        try:
            return telemetry_frame(docs)
        except Exception:  # one bad document must not take its batch with it
            good = []
            for doc in docs:
                try:
                    telemetry_frame([doc])
                except Exception as exc:
                    self.drops.drop("telemetry", "internal", f"{type(exc).__name__}: {exc}",
                                    str(doc.get("cpe_id", "")), exc_info=exc)
                else:
                    good.append(doc)
            return telemetry_frame(good)

    def flush_telemetry(self) -> int:
        """Hand the telemetry waiting to ``on_telemetry`` as one frame; the rows handed.

        The step of :attr:`telemetry_worker`; without ``on_telemetry`` it does nothing (the
        owner drains instead)."""
        if self.on_telemetry is None:
            return 0
        frame = self.drain_telemetry()
        if len(frame) == 0:
            return 0
        try:
            self.on_telemetry(frame)
        except Exception as exc:
            with self._lock:
                self.callback_errors += 1
            self.drops.drop("telemetry", "internal",
                            f"callback failed: {type(exc).__name__}: {exc}", "", exc_info=exc)
        with self._cond:
            self._cond.notify_all()  # wait_for() predicates may look at what the callback did
        return len(frame)

    # --- the client's callbacks ------------------------------------------------------------------

    # Every callback catches everything: what escapes a callback ends the network thread.

    def _on_connect(self, client: MqttReader, _userdata: object, _flags: object,
                    reason: ReasonCode, _props: Properties | None) -> None:
        try:
            if reason.is_failure:
                log.warning("broker refused the subscriber: %s", reason)
                return
            with self._lock:
                self._connected = True
                self._sub_sent = self._sub_acked = 0
                self._sub_failed = False
                topics = self._topics(self._shards)
            # Re-subscribe on every connect: the session does not outlive the connection.
            self._subscribe(topics)
        except Exception:
            log.exception("subscriber: on_connect failed")

    def _on_disconnect(self, _client: MqttReader, _userdata: object, _flags: object,
                       reason: ReasonCode, _props: Properties | None) -> None:
        try:
            with self._lock:
                self._connected = self._subscribed = False
            if reason.value == 0:
                log.info("subscriber disconnected")
            else:
                log.warning("subscriber lost the broker (%s); reconnecting with backoff", reason)
        except Exception:
            log.exception("subscriber: on_disconnect failed")

    def _on_subscribe(self, _client: MqttReader, _userdata: object, _mid: int,
                      reasons: list[ReasonCode], _props: Properties | None) -> None:
        try:
            failed = [str(r) for r in reasons if r.is_failure]
            if failed:
                log.error("broker refused subscriptions %s: %s", self.topics, failed)
            with self._cond:
                self._sub_acked += 1
                self._sub_failed = self._sub_failed or bool(failed)
                self._subscribed = self._sub_acked >= self._sub_sent and not self._sub_failed
                self._cond.notify_all()
        except Exception:
            log.exception("subscriber: on_subscribe failed")

    def _on_unsubscribe(self, _client: MqttReader, _userdata: object, _mid: int,
                        reasons: list[ReasonCode], _props: Properties | None) -> None:
        try:
            failed = [str(r) for r in reasons if r.is_failure]
            if failed:
                log.warning("broker refused unsubscriptions: %s", failed)
        except Exception:
            log.exception("subscriber: on_unsubscribe failed")

    def _on_messages(self, _client: MqttReader, _userdata: object,
                     messages: list[ReceivedMessage]) -> None:
        """What one read brought, in order; waiters are woken once for all of it."""
        try:
            for msg in messages:
                name = ""
                try:
                    name = msg.topic
                    self._handle(name, msg.payload)
                except Exception as exc:
                    self.drops.drop("unknown", "internal", f"{type(exc).__name__}: {exc}", name,
                                    exc_info=exc)
        finally:
            with self._cond:
                self.received += len(messages)
                self._cond.notify_all()

    def _admit(self, topic: ChannelTopic, name: str) -> bool:
        """Whether a CPE's message is for this replica: its shard's (and, on a sharded topic,
        named so), and not a legacy one of a CPE heard on its sharded topic since."""
        cpe = str(topic.cpe_id)
        if topic.legacy:
            with self._lock:
                self.legacy_received += 1
                shadowed = (cpe in self._sharded_cpes if topic.proxy_id is None
                            else (topic.proxy_id, cpe) in self._sharded_proxy_cpes)
            if shadowed:
                return False
        elif topic.shard is not None and topic.shard != _shard(cpe, self.shard_count):
            self.drops.drop(topic.kind, "shard-mismatch",
                            f"{cpe!r} is in shard {_shard(cpe, self.shard_count)}", name)
            return False
        if not self._holds(cpe):
            with self._lock:
                self.unheld += 1
            return False
        return True

    def _handle(self, name: str, payload: bytes) -> None:
        topic = parse_channel_topic(name)
        if topic is not None and topic.cpe_id is not None and not self._admit(topic, name):
            return
        if not payload:
            if topic is not None and topic.kind == "state" and topic.proxy_id is not None \
                    and topic.cpe_id is not None:
                # An empty retained message: the proxy stopped serving the CPE.
                with self._cond:
                    self.directory.stop_serving(topic.proxy_id, topic.cpe_id)
                    self._cond.notify_all()
                return
            if topic is not None and topic.legacy and topic.kind == "state":
                return  # a new agent clearing the state an earlier release left retained
        decoded = decode(name, payload, self.drops, topic)
        if decoded is None:
            return
        kind, doc = decoded
        if topic is not None and topic.shard is not None and topic.cpe_id is not None:
            # Valid, so the agent's: it reports on its sharded topic now.
            with self._lock:
                if topic.proxy_id is None:
                    self._sharded_cpes.add(topic.cpe_id)
                else:
                    self._sharded_proxy_cpes.add((topic.proxy_id, topic.cpe_id))
        if kind in ("state", "telemetry") and "proxy_id" not in doc \
                and self.directory.is_proxy(str(doc["cpe_id"])):
            # A CPE topic named after a proxy: only a proxy's certificate (CN = proxy id) could
            # have written it, through an ACL from before the proxies' deny line.
            self.drops.drop(kind, "role-mismatch", "a CPE topic named after a known proxy", name)
            return
        state: CpeState | None = None
        proxy: ProxyState | None = None
        if kind == "state":
            with self._cond:
                if not self._holds(str(doc["cpe_id"])):
                    return  # the shard was given up while this message was decoded
                state = self.directory.report_state(doc, time.monotonic())
                self._cond.notify_all()
        elif kind == "proxy-state":
            with self._cond:
                proxy = self.directory.report_proxy(doc, time.monotonic())
                self._cond.notify_all()
        elif kind == "telemetry":
            with self._cond:
                if not self._holds(str(doc["cpe_id"])):
                    return
                if len(self._buffer) >= self.buffer_limit:
                    self._buffer.popleft()
                    self.drops.drop("telemetry", "buffer-full", "nobody drains telemetry", name)
                self._buffer.append(doc)
                waiting = len(self._buffer)
                # (waiters are woken once for the whole read, by _on_messages)
            if waiting >= self.telemetry_batch_max:
                self.telemetry_worker.wake()
            return
        else:
            # The ACL never lets weights reach us; if it does, the broker is misconfigured.
            self.drops.drop(kind, "unexpected-kind", "the xApp does not consume weights", name)
            return
        try:
            if state is not None and self.on_state is not None:
                self.on_state(state)
            elif proxy is not None and self.on_proxy_state is not None:
                self.on_proxy_state(proxy)
        except Exception as exc:
            with self._lock:
                self.callback_errors += 1
            self.drops.drop(kind, "internal", f"callback failed: {type(exc).__name__}: {exc}",
                            name, exc_info=exc)


def _describe(shards: frozenset[int] | None) -> str:
    return "all" if shards is None else f"{len(shards)} {sorted(shards)}"


@lru_cache(maxsize=1 << 17)
def _shard(cpe_id: str, shards: int) -> int:
    """:func:`shard_of`, cached: it runs on every message, and a fleet's ids repeat."""
    return shard_of(cpe_id, shards)
