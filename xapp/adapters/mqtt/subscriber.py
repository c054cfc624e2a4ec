"""The xApp's side of agent state and telemetry.

Subscribes to ``mcw/v1/cpe/+/state`` (retained, last will), ``mcw/v1/cpe/+/telemetry`` and
``mcw/v1/proxy/#`` (each proxy's own state, and per CPE it serves its downlink state and
telemetry), drops what does not validate (counted), keeps the latest :class:`CpeState` per CPE,
per (proxy, CPE) and :class:`ProxyState` per proxy, and turns telemetry into
:class:`xapp.core.forecast.KpiFrame` rows with a direction.  It does not write to InfluxDB
itself: the xApp passes a callback, which gets a frame per batch of messages, or drains a batch
with :meth:`ChannelSubscriber.drain_telemetry` and hands it to its ``TelemetrySink``.

Who applies which direction: the CPE agent applies ``ul``; the downlink of a CPE is applied by
the proxy whose per-CPE state for it says online while the proxy itself is online
(:meth:`ChannelSubscriber.downlink`).  An empty retained message on a proxy's per-CPE state topic
means the proxy stopped serving the CPE.

State callbacks run on the network thread (:mod:`xapp.adapters.mqtt.reader`); keep them short
(append to a queue). Telemetry waits for its batch (a worker of its own) or the drain. Nothing
raised while handling a message (a hostile payload, a bug, an exception in a callback) reaches
the client: it is counted as a drop and logged, because an exception out of ``on_message`` ends
the network thread and, with it, every CPE's state and telemetry. Should the thread end anyway,
:meth:`ChannelSubscriber.healthy` (the supervisor's probe) starts a new one.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from xapp.adapters.mqtt.connection import MqttSettings
from xapp.adapters.mqtt.payloads import (
    PROXY_PREFIX,
    TOPIC_PREFIX,
    DropCounter,
    decode,
    parse_channel_topic,
)
from xapp.adapters.mqtt.reader import MqttReader, ReceivedMessage
from xapp.core.caps import RATE_CAPS
from xapp.core.forecast import DIRECTIONS, KpiFrame
from xapp.core.kpis import AGENT_FIELDS
from xapp.core.workers import Worker

log = logging.getLogger(__name__)

#: KpiFrame columns made from a telemetry message (``up`` as 1.0 / 0.0). ``saturated`` is the
#: fraction (0..1) of the interval the WAT's subflows were limited by the path (cwnd-limited,
#: tcp_info chrono times), so ``delivered_mbps`` measures capacity only when it is near 1;
#: ``delivery_rate_mbps`` is the kernel's own rate sample. Both are NaN (unknown) when the
#: agent did not report them (first sample, old kernel, receiving end).
TELEMETRY_FIELDS: Final = AGENT_FIELDS
#: Fields of a WAT as a whole (the reporting end's view of its subflows); the others come
#: from the WAT's ``dl`` and ``ul`` objects.
WAT_FIELDS: Final = ("up", "subflows", "rtt_ms")
DIRECTION_FIELDS: Final = tuple(f for f in AGENT_FIELDS if f not in WAT_FIELDS)


@dataclass(frozen=True)
class CpeState:
    """The latest ``mcw.state.v2`` of one CPE as the xApp knows it: from the CPE agent
    (``role`` cpe, ``proxy_id`` None, direction ``ul``) or from a proxy that serves the CPE
    (``role`` proxy, direction ``dl``)."""

    cpe_id: str
    online: bool
    time_ms: int | None = None
    applied_version: int = 0
    applied_weights: Mapping[str, int] = field(default_factory=dict)
    backend: str | None = None
    max_weight: int | None = None
    #: True when the agent's backend can only switch WATs on and off (mptcp-upstream).
    on_off_only: bool = False
    links: Mapping[str, str] = field(default_factory=dict)
    event: str | None = None
    last_error: str = ""
    #: Local monotonic time the message arrived.
    received_s: float = 0.0
    role: str = "cpe"
    proxy_id: str | None = None
    #: The direction ``applied_weights`` steer (``ul`` for a CPE agent, ``dl`` for a proxy).
    direction: str = "ul"
    #: The CPE's WAT interface addresses (reported by the CPE agent).
    addresses: Mapping[str, str] = field(default_factory=dict)
    #: A WAT off in one direction is off in both (mainline MPTCP); None: not reported.
    directions_coupled: bool | None = None
    #: How the backend turns weights into a split (``capabilities.semantics``: ``wrr``,
    #: ``rate-caps``, ``on-off``); None: not reported (an agent from before the field).
    semantics: str | None = None
    #: With ``rate-caps``: the caps the backend set for the applied weights (a WAT absent is
    #: uncapped).
    applied_caps_mbps: Mapping[str, float] = field(default_factory=dict)
    #: A standing condition the applier reports (a proxy: ``address-conflict``, another CPE it
    #: serves claims one of this CPE's WAT addresses, so neither is steered); None: none.
    alarm: str | None = None

    @property
    def rate_caps(self) -> bool:
        """The applier enforces shares as rate caps and takes ``caps_mbps``.  Only when the
        agent says so: an agent from before the field may refuse a message with caps."""
        return self.semantics == RATE_CAPS

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], previous: CpeState | None,
                 received_s: float) -> CpeState:
        """Build from a validated document; a last will (online false only) keeps what was known."""
        caps = doc.get("capabilities", {})
        role = str(doc.get("role", "proxy" if doc.get("proxy_id") else "cpe"))
        base = previous if previous is not None else cls(
            cpe_id=doc["cpe_id"], online=False, role=role, proxy_id=doc.get("proxy_id"),
            direction="dl" if role == "proxy" else "ul")
        # JSON Schema's "integer" admits 5.0: int() keeps the fields what their types say.
        time_ms = doc.get("time_ms")
        return cls(
            cpe_id=doc["cpe_id"],
            online=bool(doc["online"]),
            time_ms=base.time_ms if time_ms is None else int(time_ms),
            applied_version=int(doc.get("applied_version", base.applied_version)),
            applied_weights={k: int(v) for k, v in
                             doc.get("applied_weights", base.applied_weights).items()},
            backend=doc.get("backend", base.backend),
            max_weight=caps.get("max_weight", base.max_weight),
            on_off_only=caps.get("on_off_only", base.on_off_only),
            links=dict(doc.get("links", base.links)),
            # The event belongs to this message only (a last will carries none).
            event=doc.get("event"),
            last_error=doc.get("last_error", base.last_error),
            received_s=received_s,
            role=role,
            proxy_id=doc.get("proxy_id", base.proxy_id),
            direction=str(doc.get("direction", base.direction)),
            addresses=dict(doc.get("addresses", base.addresses)),
            directions_coupled=caps.get("directions_coupled", base.directions_coupled),
            semantics=caps.get("semantics", base.semantics),
            # The caps belong to the applied weights: a report of new weights without caps
            # means uncapped; a last will (no weights) keeps what was known.
            applied_caps_mbps={k: float(v) for k, v in doc.get(
                "applied_caps_mbps",
                {} if "applied_weights" in doc else base.applied_caps_mbps).items()},
            # Reported with every state while it stands; a last will keeps what was known.
            alarm=doc.get("alarm") if "applied_weights" in doc else base.alarm,
        )


@dataclass(frozen=True)
class ProxyState:
    """The latest ``mcw.proxy-state.v1`` of one proxy agent."""

    proxy_id: str
    online: bool
    time_ms: int | None = None
    backend: str | None = None
    max_weight: int | None = None
    on_off_only: bool = False
    directions_coupled: bool | None = None
    #: ``capabilities.semantics`` of the proxy's downlink backend; None: not reported.
    semantics: str | None = None
    cpes: int = 0
    cpes_applied: int = 0
    rules: Mapping[str, int] = field(default_factory=dict)
    last_error: str = ""
    received_s: float = 0.0

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], previous: ProxyState | None,
                 received_s: float) -> ProxyState:
        """Build from a validated document; a last will keeps what was known."""
        caps = doc.get("capabilities", {})
        base = previous if previous is not None else cls(proxy_id=doc["proxy_id"], online=False)
        time_ms = doc.get("time_ms")
        return cls(
            proxy_id=doc["proxy_id"], online=bool(doc["online"]),
            time_ms=base.time_ms if time_ms is None else int(time_ms),
            backend=doc.get("backend", base.backend),
            max_weight=caps.get("max_weight", base.max_weight),
            on_off_only=caps.get("on_off_only", base.on_off_only),
            directions_coupled=caps.get("directions_coupled", base.directions_coupled),
            semantics=caps.get("semantics", base.semantics),
            cpes=int(doc.get("cpes", base.cpes)),
            cpes_applied=int(doc.get("cpes_applied", base.cpes_applied)),
            rules={k: int(v) for k, v in doc.get("rules", base.rules).items()},
            last_error=doc.get("last_error", base.last_error), received_s=received_s)


@dataclass(frozen=True)
class Downlink:
    """Who applies a CPE's downlink: the proxy and its per-CPE state."""

    proxy_id: str
    state: CpeState


def telemetry_frame(docs: Sequence[Mapping[str, Any]]) -> KpiFrame:
    """Rows (cpe, wat, direction) of validated telemetry documents; ``time_s`` is the newest
    ``time_ms``, ``row_time_s`` each row's document's.

    A WAT with ``dl`` / ``ul`` objects gives a row per direction: the direction's fields and
    the WAT's own (``up``, ``subflows``, ``rtt_ms``); a WAT with neither gives one row without
    a direction (both).  Fields a row did not report are NaN, as
    :class:`~xapp.core.forecast.KpiFrame` expects.
    """
    cpes: list[str] = []
    wats: list[str] = []
    dirs: list[str] = []
    times: list[int] = []
    own: list[Mapping[str, Any]] = []  # per row: the WAT's object
    part: list[Mapping[str, Any]] = []  # per row: its direction's object ({} for none)
    newest = 0
    for doc in docs:
        t = int(doc["time_ms"])
        newest = max(newest, t)
        cpe = doc["cpe_id"]
        for wat, stats in doc["wats"].items():
            directed = [d for d in DIRECTIONS if isinstance(stats.get(d), Mapping)]
            for d in directed or [""]:
                times.append(t)
                cpes.append(cpe)
                wats.append(wat)
                dirs.append(d)
                own.append(stats)
                part.append(stats[d] if d else _NOTHING)
    values = {f: _column([o.get(f) for o in own]) for f in WAT_FIELDS}
    values.update({f: _column([p.get(f) for p in part]) for f in DIRECTION_FIELDS})
    return KpiFrame(
        time_s=newest / 1000.0,
        cpe=np.asarray(cpes, dtype=np.str_),
        wat=np.asarray(wats, dtype=np.str_),
        values=values,
        direction=np.asarray(dirs, dtype="<U2"),
        row_time_s=np.asarray(times, dtype=np.float64) / 1000.0,
    )


_NOTHING: Final[Mapping[str, Any]] = {}
_NUMBERS: Final = frozenset({float, int, bool})


def _column(raw: list[object]) -> NDArray[np.float64]:
    """One field over the rows, as floats (NaN where absent or not a finite number).

    Column by column in C when every value is a plain number or absent (validated telemetry
    always is): 48 values a message, 10,000 messages a second. Anything else goes value by
    value through :func:`_measurement`."""
    if all(v is None or type(v) in _NUMBERS for v in raw):
        try:
            col = np.array([math.nan if v is None else v for v in raw], dtype=np.float64)
        except OverflowError:  # an integer beyond float range
            pass
        else:
            bad = ~np.isfinite(col)
            if bad.any():
                col[bad] = math.nan
            return col
    return np.array([_measurement(v) for v in raw], dtype=np.float64)


def _measurement(v: object) -> float:
    """A KPI as a float; NaN (unknown) for what is not a finite number.

    The schemas bound no magnitudes and :func:`~xapp.adapters.mqtt.payloads.decode` bounds
    them (integers of 20 digits, floats below 1e100), but this is public: an integer beyond
    float range or ``inf`` from elsewhere must not raise or reach the model as a measurement.
    """
    if type(v) is float:  # the usual case first: 48 values a message, 10,000 messages a second
        return v if math.isfinite(v) else math.nan
    if not isinstance(v, int | float):  # bool is an int: "up" becomes 1.0 / 0.0
        return math.nan
    try:
        f = float(v)
    except OverflowError:
        return math.nan
    return f if math.isfinite(f) else math.nan


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
        Load-share telemetry between xApp replicas through the MQTT 5 shared subscription
        ``$share/{share_group}/mcw/v1/cpe/+/telemetry``. State is always subscribed plainly:
        shared subscriptions get no retained messages, and every replica needs every state.
    buffer_limit : int, default=100000
        Telemetry documents waiting (for the batch worker or :meth:`drain_telemetry`); older
        ones are dropped (counted) when nobody drains.
    telemetry_batch_s, telemetry_batch_max : float, int, default=0.05, 2000
        How long telemetry may wait for its batch, and how many messages start one at once.

    Why batches: a fleet of 10,000 agents sends 10,000 telemetry messages a second. Built one
    frame per message and merged into the intake one by one, they cost about 140 µs each on
    paho's thread (more than the whole core); one frame per batch costs a few µs per message,
    and the network thread only parses and validates.
    """

    def __init__(self, settings: MqttSettings, *,
                 on_telemetry: Callable[[KpiFrame], None] | None = None,
                 on_state: Callable[[CpeState], None] | None = None,
                 on_proxy_state: Callable[[ProxyState], None] | None = None,
                 share_group: str | None = None, buffer_limit: int = 100_000,
                 drops: DropCounter | None = None, telemetry_batch_s: float = 0.05,
                 telemetry_batch_max: int = 2000) -> None:
        self.settings = settings
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
        # Re-entrant: wait_for() predicates call state()/online() under the same lock.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._states: dict[str, CpeState] = {}
        self._proxies: dict[str, ProxyState] = {}
        #: (proxy_id, cpe_id) -> the proxy's downlink state for the CPE.
        self._proxy_cpes: dict[tuple[str, str], CpeState] = {}
        self._buffer: deque[dict[str, Any]] = deque()
        self.telemetry_batch_max = telemetry_batch_max
        #: Hands batches of telemetry to ``on_telemetry`` (supervise it with the others).
        self.telemetry_worker = Worker("mcw-telemetry-batch", self.flush_telemetry,
                                       telemetry_batch_s)
        #: Grows with every state change; :meth:`rate_caps` recomputes only when it moved.
        self._generation = 0
        self._rate_caps: dict[str, tuple[int, frozenset[str]]] = {}
        self._connected = False
        self._subscribed = False
        self._client = MqttReader(settings, "sub")
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_message = self._on_message
        self._started = False

    @property
    def topics(self) -> list[str]:
        telemetry = f"{TOPIC_PREFIX}/+/telemetry"
        if self.share_group:
            telemetry = f"$share/{self.share_group}/{telemetry}"
        # Proxy telemetry is not shared between replicas: few proxies, and their per-CPE
        # state on the same wildcard must reach every replica.
        return [f"{TOPIC_PREFIX}/+/state", telemetry, f"{PROXY_PREFIX}/#"]

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

    # --- state ---------------------------------------------------------------------------------

    def state(self, cpe_id: str) -> CpeState | None:
        with self._lock:
            return self._states.get(cpe_id)

    def states(self) -> dict[str, CpeState]:
        with self._lock:
            return dict(self._states)

    def online(self) -> list[str]:
        """CPEs whose latest state says online."""
        with self._lock:
            return sorted(c for c, s in self._states.items() if s.online)

    def proxy(self, proxy_id: str) -> ProxyState | None:
        with self._lock:
            return self._proxies.get(proxy_id)

    def proxies(self) -> dict[str, ProxyState]:
        with self._lock:
            return dict(self._proxies)

    def proxy_cpe_states(self) -> dict[tuple[str, str], CpeState]:
        """(proxy_id, cpe_id) -> the proxy's downlink state for the CPE."""
        with self._lock:
            return dict(self._proxy_cpes)

    def downlink(self, cpe_id: str) -> Downlink | None:
        """The proxy applying the CPE's downlink: its per-CPE state says online and the proxy
        is online (or has not reported its own state yet); the most recently heard wins when
        several do.  None: nobody applies it (the downlink runs on the proxy's defaults)."""
        return self.downlinks().get(cpe_id)

    def downlinks(self) -> dict[str, Downlink]:
        """:meth:`downlink` of every CPE some proxy applies (one pass: metrics and
        ``/ric/v1/cpes`` ask for the whole fleet)."""
        best: dict[str, Downlink] = {}
        with self._lock:
            for (proxy_id, cpe), st in self._proxy_cpes.items():
                if not st.online:
                    continue
                proxy = self._proxies.get(proxy_id)
                if proxy is not None and not proxy.online:
                    continue
                known = best.get(cpe)
                if known is None or st.received_s > known.state.received_s:
                    best[cpe] = Downlink(proxy_id, st)
        return best

    def rate_caps(self, direction: str) -> frozenset[str]:
        """:class:`xapp.core.ports.BackendSemantics`: the CPEs whose ``direction`` is applied
        by a ``rate-caps`` backend: ``ul`` the CPE agents online that report it, ``dl`` the
        CPEs whose :meth:`downlink` proxy reports it (in its per-CPE state, or else in its own
        state).  Recomputed only after a state changed (the loop asks every tick)."""
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}")
        with self._lock:
            gen = self._generation
            cached = self._rate_caps.get(direction)
            if cached is not None and cached[0] == gen:
                return cached[1]
            if direction == "ul":
                out = frozenset(c for c, st in self._states.items() if st.online and st.rate_caps)
            else:
                out = frozenset(c for c, down in self.downlinks().items()
                                if self._downlink_semantics(down) == RATE_CAPS)
            self._rate_caps[direction] = (gen, out)
            return out

    def downlink_semantics(self, down: Downlink) -> str | None:
        """The ``capabilities.semantics`` ``down``'s proxy applies the CPE's downlink with (as
        :meth:`rate_caps` decides it); None: not reported."""
        with self._lock:
            return self._downlink_semantics(down)

    def _downlink_semantics(self, down: Downlink) -> str | None:
        """The semantics a proxy applies a CPE's downlink with: its per-CPE state's, else its
        own state's (call under the lock)."""
        if down.state.semantics is not None:
            return down.state.semantics
        proxy = self._proxies.get(down.proxy_id)
        return None if proxy is None else proxy.semantics

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

    # --- paho callbacks --------------------------------------------------------------------------

    # Every callback catches everything: what escapes a paho callback ends the network thread.

    def _on_connect(self, client: MqttReader, _userdata: object, _flags: object,
                    reason: ReasonCode, _props: Properties | None) -> None:
        try:
            if reason.is_failure:
                log.warning("broker refused the subscriber: %s", reason)
                return
            with self._lock:
                self._connected = True
            # Re-subscribe on every connect: the session does not outlive the connection.
            client.subscribe([(t, 1) for t in self.topics])
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
                self._subscribed = not failed
                self._cond.notify_all()
        except Exception:
            log.exception("subscriber: on_subscribe failed")

    def _on_message(self, _client: MqttReader, _userdata: object,
                    msg: ReceivedMessage) -> None:
        name = ""
        try:
            name = msg.topic
            self._handle(name, msg.payload)
        except Exception as exc:
            self.drops.drop("unknown", "internal", f"{type(exc).__name__}: {exc}", name,
                            exc_info=exc)
        finally:
            with self._cond:
                self.received += 1
                self._cond.notify_all()

    def _is_proxy(self, identity: str) -> bool:
        with self._lock:
            return identity in self._proxies

    def _handle(self, name: str, payload: bytes) -> None:
        if not payload:
            topic = parse_channel_topic(name)
            if topic is not None and topic.kind == "state" and topic.proxy_id is not None \
                    and topic.cpe_id is not None:
                # An empty retained message: the proxy stopped serving the CPE.
                with self._cond:
                    self._proxy_cpes.pop((topic.proxy_id, topic.cpe_id), None)
                    self._generation += 1
                    self._cond.notify_all()
                return
        decoded = decode(name, payload, self.drops)
        if decoded is None:
            return
        kind, doc = decoded
        if kind in ("state", "telemetry") and "proxy_id" not in doc \
                and self._is_proxy(str(doc["cpe_id"])):
            # A CPE topic named after a proxy: only a proxy's certificate (CN = proxy id) could
            # have written it, through an ACL from before the proxies' deny line.
            self.drops.drop(kind, "role-mismatch", "a CPE topic named after a known proxy", name)
            return
        state: CpeState | None = None
        proxy: ProxyState | None = None
        if kind == "state":
            with self._cond:
                proxy_id = doc.get("proxy_id")
                if proxy_id is None:
                    state = CpeState.from_doc(doc, self._states.get(doc["cpe_id"]),
                                              time.monotonic())
                    self._states[state.cpe_id] = state
                else:
                    key = (str(proxy_id), str(doc["cpe_id"]))
                    state = CpeState.from_doc(doc, self._proxy_cpes.get(key), time.monotonic())
                    self._proxy_cpes[key] = state
                self._generation += 1
                self._cond.notify_all()
        elif kind == "proxy-state":
            with self._cond:
                proxy = ProxyState.from_doc(doc, self._proxies.get(doc["proxy_id"]),
                                            time.monotonic())
                self._proxies[proxy.proxy_id] = proxy
                # A "CPE" of that name seen before was the proxy's certificate speaking as one.
                self._states.pop(proxy.proxy_id, None)
                self._generation += 1
                self._cond.notify_all()
        elif kind == "telemetry":
            with self._cond:
                if len(self._buffer) >= self.buffer_limit:
                    self._buffer.popleft()
                    self.drops.drop("telemetry", "buffer-full", "nobody drains telemetry", name)
                self._buffer.append(doc)
                waiting = len(self._buffer)
                self._cond.notify_all()
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
