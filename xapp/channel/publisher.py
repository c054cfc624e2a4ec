"""The xApp's weight publisher: latest weights per CPE, retained, QoS 1, over mutual TLS.

Delivery rules, and why:

* **One message in flight per CPE.** A CPE's next weights are handed to paho only after the
  broker acknowledged the previous ones, so messages of one CPE can never overtake each other,
  not even across a reconnect (paho re-sends its unacknowledged messages right after CONNACK).
  The broker's retained message therefore always ends at the newest version.
* **Coalescing.** While a CPE has a message in flight, or the broker is unreachable, newer
  weights for it replace the queued ones: after an outage each CPE gets its latest weights
  once, not the backlog of every tick.
* **Versions only grow**, across restarts: see :mod:`xapp.channel.versions`.
* **Reconnect with exponential backoff** (paho's network thread, bounds in
  :class:`~xapp.channel.connection.MqttSettings`).

Thread-safety: :meth:`MqttWeightPublisher.publish` may be called from any thread. Our lock is
never held while calling into paho, because paho calls ``on_publish`` with its own message lock
held; holding ours across ``client.publish`` would deadlock against it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from xapp.channel.connection import MqttSettings, new_client
from xapp.channel.payloads import DropCounter, PayloadError, build_weights, encode, topic
from xapp.channel.versions import VersionAllocator, VersionStore
from xapp.weights import WeightDecision

log = logging.getLogger(__name__)


@dataclass
class PublisherStats:
    """Counters since start (read under no lock: a snapshot may be a message off)."""

    #: ``publish()`` calls accepted.
    requested: int = 0
    #: Messages handed to the broker connection.
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


@dataclass
class _Outgoing:
    cpe_id: str
    version: int
    topic: str
    payload: bytes


@dataclass
class _State:
    """Everything guarded by the publisher's lock."""

    #: CPEs with nothing in flight whose latest message waits for a send slot (FIFO).
    ready: OrderedDict[str, _Outgoing] = field(default_factory=OrderedDict)
    #: CPEs with a message in flight: their newest message waits for the acknowledgement.
    waiting: dict[str, _Outgoing] = field(default_factory=dict)
    #: cpe_id -> message in flight (mid is None while paho.publish is being called).
    inflight: dict[str, _Outgoing] = field(default_factory=dict)
    mids: dict[int, str] = field(default_factory=dict)
    #: Acks that raced ahead of our recording of the mid.
    early_acks: dict[int, int] = field(default_factory=dict)
    #: cpe_id -> last version the broker acknowledged.
    acked_version: dict[str, int] = field(default_factory=dict)
    connected: bool = False
    window: int = 1000


class MqttWeightPublisher:
    """Implements :class:`xapp.interfaces.WeightPublisher` over MQTT 5 and mutual TLS.

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
        Unix time in seconds, for ``issued_at_ms``.

    Examples
    --------
    >>> pub = MqttWeightPublisher(settings, FileVersionStore("/var/lib/mcw/versions.json"))
    ... # doctest: +SKIP
    >>> pub.start().wait_connected(10)                                # doctest: +SKIP
    >>> pub.publish("cpe-0001", decision, mode="load_balancing", lease_s=30)  # doctest: +SKIP
    """

    def __init__(self, settings: MqttSettings, versions: VersionStore, *,
                 version_block: int = 100, window: int = 1000,
                 drops: DropCounter | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.settings = settings
        self.drops = drops if drops is not None else DropCounter()
        self.stats = PublisherStats()
        self._clock = clock
        self._versions = VersionAllocator(versions, block=version_block)
        self._window = window
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._st = _State(window=window)
        self._client = new_client(settings, "pub")
        # paho's own in-flight limit rescans its whole outgoing queue on every PUBACK, which is
        # quadratic at fleet scale (10,000 weights took 1.6 s instead of 0.7 s); our window
        # below does the limiting, so paho's is switched off (0 = unlimited).
        self._client.max_inflight_messages_set(0)
        self._client.max_queued_messages_set(0)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_publish = self._on_publish
        self._started = False

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> MqttWeightPublisher:
        """Connect in the background (retrying with backoff until the broker answers)."""
        if not self._started:
            self._client.connect_async(self.settings.host, self.settings.port,
                                       keepalive=self.settings.keepalive_s)
            self._client.loop_start()
            self._started = True
        return self

    def wait_connected(self, timeout_s: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._st.connected, timeout=timeout_s)

    @property
    def connected(self) -> bool:
        with self._lock:
            return self._st.connected

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued message was acknowledged; False on timeout."""
        with self._idle:
            return self._idle.wait_for(
                lambda: not (self._st.ready or self._st.waiting or self._st.inflight),
                timeout=timeout_s)

    def stop(self, flush_timeout_s: float = 5.0) -> None:
        """Flush (bounded), disconnect cleanly and stop the network thread."""
        if not self._started:
            return
        self.flush(flush_timeout_s)
        self._client.disconnect()
        self._client.loop_stop()
        self._started = False

    # --- publishing ------------------------------------------------------------------------

    def prepare(self, cpe_ids: Collection[str]) -> None:
        """Reserve versions for many CPEs with one store write (call before a large tick)."""
        with self._lock:
            self._versions.reserve(cpe_ids)

    def publish(self, cpe_id: str, decision: WeightDecision, *, mode: str,
                lease_s: float) -> int:
        """Queue the CPE's latest weights; returns the version they were given.

        Raises
        ------
        PayloadError
            The weights would not validate (all zero, out of range, unknown WAT or mode, bad
            cpe_id, lease out of 1..3600 s); nothing is queued and no version is used.
        """
        try:
            name = topic(cpe_id, "weights")
        except PayloadError as exc:
            self.stats.invalid += 1
            self.drops.drop("weights", exc.reason, exc.detail, cpe_id)
            raise
        issued = int(self._clock() * 1000)
        with self._lock:
            version = self._versions.peek(cpe_id)
            try:
                doc = build_weights(cpe_id, version, decision, mode=mode, lease_s=lease_s,
                                    issued_at_ms=issued)
            except PayloadError as exc:
                self.stats.invalid += 1
                self.drops.drop("weights", exc.reason, exc.detail, name)
                raise
            self._versions.take(cpe_id)
            msg = _Outgoing(cpe_id, version, name, encode(doc))
            self.stats.requested += 1
            st = self._st
            if cpe_id in st.inflight:
                if cpe_id in st.waiting:
                    self.stats.coalesced += 1
                st.waiting[cpe_id] = msg
            else:
                if cpe_id in st.ready:
                    self.stats.coalesced += 1
                st.ready[cpe_id] = msg
        self._pump()
        return version

    def last_version(self, cpe_id: str) -> int:
        """The last version given to ``cpe_id`` by this process (0 if none)."""
        with self._lock:
            return self._versions.last(cpe_id)

    def acked_version(self, cpe_id: str) -> int:
        """The newest version of ``cpe_id`` the broker acknowledged (0 if none)."""
        with self._lock:
            return self._st.acked_version.get(cpe_id, 0)

    def pending(self) -> int:
        """Messages queued or in flight."""
        with self._lock:
            return len(self._st.ready) + len(self._st.waiting) + len(self._st.inflight)

    # --- internals -------------------------------------------------------------------------

    def _pump(self) -> None:
        """Hand ready messages to paho while connected and the window allows."""
        while True:
            with self._lock:
                st = self._st
                if not st.connected or not st.ready or len(st.inflight) >= st.window:
                    return
                cpe_id, msg = st.ready.popitem(last=False)
                st.inflight[cpe_id] = msg
            info = self._client.publish(msg.topic, msg.payload, qos=1, retain=True)
            # rc NO_CONN still queues the message inside paho; it goes out after reconnect.
            with self._lock:
                self.stats.sent += 1
                early = self._st.early_acks.pop(info.mid, None)
                if early is None:
                    self._st.mids[info.mid] = cpe_id
            if early is not None:
                self._acknowledged(info.mid, cpe_id, early)

    def _on_connect(self, _client: mqtt.Client, _userdata: object, _flags: object,
                    reason: ReasonCode, props: Properties | None) -> None:
        if reason.is_failure:
            log.warning("broker refused the publisher: %s", reason)
            return
        receive_max = getattr(props, "ReceiveMaximum", None) if props is not None else None
        with self._lock:
            self._st.connected = True
            self._st.window = min(self._window, int(receive_max or 65535))
            self.stats.connects += 1
            self._idle.notify_all()
        log.info("publisher connected to %s:%d", self.settings.host, self.settings.port)
        # paho re-sends its unacknowledged messages after this callback returns; those keep
        # their CPE's in-flight slot, so nothing sent here can overtake them.
        threading.Thread(target=self._pump, name="mcw-pub-pump", daemon=True).start()

    def _on_disconnect(self, _client: mqtt.Client, _userdata: object, _flags: object,
                       reason: ReasonCode, _props: Properties | None) -> None:
        with self._lock:
            was = self._st.connected
            self._st.connected = False
            if was:
                self.stats.disconnects += 1
        if was and reason.value == 0:
            log.info("publisher disconnected")
        elif was:
            log.warning("publisher lost the broker (%s); reconnecting with backoff", reason)

    def _on_publish(self, _client: mqtt.Client, _userdata: object, mid: int,
                    reason: ReasonCode, _props: Properties | None) -> None:
        code = int(reason.value)
        with self._lock:
            cpe_id = self._st.mids.pop(mid, None)
            if cpe_id is None:
                self._st.early_acks[mid] = code
                return
        self._acknowledged(mid, cpe_id, code)

    def _acknowledged(self, mid: int, cpe_id: str, code: int) -> None:
        with self._lock:
            st = self._st
            msg = st.inflight.pop(cpe_id)
            if code >= 0x80:
                self.stats.rejected += 1
                log.error("broker rejected weights v%d for %s: reason 0x%02x",
                          msg.version, cpe_id, code)
            else:
                self.stats.acked += 1
                st.acked_version[cpe_id] = max(st.acked_version.get(cpe_id, 0), msg.version)
            newer = st.waiting.pop(cpe_id, None)
            if newer is not None:
                st.ready[cpe_id] = newer
            more = bool(st.ready)
            self._idle.notify_all()
        if more:
            # A window slot is free: the next CPE may go, not only this one.
            self._pump()
