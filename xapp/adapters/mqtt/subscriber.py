"""The xApp's side of agent state and telemetry.

Subscribes to ``mcw/v1/cpe/+/state`` (retained, last will) and ``mcw/v1/cpe/+/telemetry``,
drops what does not validate (counted), keeps the latest :class:`CpeState` per CPE, and turns
telemetry into :class:`xapp.core.forecast.KpiFrame` rows. It does not write to InfluxDB itself: the
xApp passes a callback, or drains a batch per tick with :meth:`ChannelSubscriber.drain_telemetry`
and hands it to its ``TelemetrySink``.

Callbacks run on paho's network thread; keep them short (append to a queue) or use the drain.
An exception in a callback is logged and counted, never kills the network thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from xapp.adapters.mqtt.connection import MqttSettings, new_client
from xapp.adapters.mqtt.payloads import TOPIC_PREFIX, DropCounter, decode
from xapp.core.forecast import KpiFrame
from xapp.core.kpis import AGENT_FIELDS

log = logging.getLogger(__name__)

#: KpiFrame columns made from a telemetry message (``up`` as 1.0 / 0.0). ``saturated`` is the
#: fraction (0..1) of the interval the WAT's subflows were limited by the path (cwnd-limited,
#: tcp_info chrono times), so ``delivered_mbps`` measures capacity only when it is near 1;
#: ``delivery_rate_mbps`` is the kernel's own rate sample. Both are NaN (unknown) when the
#: agent did not report them (first sample, old kernel, older agent).
TELEMETRY_FIELDS: Final = AGENT_FIELDS


@dataclass(frozen=True)
class CpeState:
    """The latest ``mcw.state.v1`` of one CPE as the xApp knows it."""

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

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], previous: CpeState | None,
                 received_s: float) -> CpeState:
        """Build from a validated document; a last will (online false only) keeps what was known."""
        caps = doc.get("capabilities", {})
        base = previous if previous is not None else cls(cpe_id=doc["cpe_id"], online=False)
        return cls(
            cpe_id=doc["cpe_id"],
            online=bool(doc["online"]),
            time_ms=doc.get("time_ms", base.time_ms),
            applied_version=doc.get("applied_version", base.applied_version),
            applied_weights=dict(doc.get("applied_weights", base.applied_weights)),
            backend=doc.get("backend", base.backend),
            max_weight=caps.get("max_weight", base.max_weight),
            on_off_only=caps.get("on_off_only", base.on_off_only),
            links=dict(doc.get("links", base.links)),
            # The event belongs to this message only (a last will carries none).
            event=doc.get("event"),
            last_error=doc.get("last_error", base.last_error),
            received_s=received_s,
        )


def telemetry_frame(docs: Sequence[Mapping[str, Any]]) -> KpiFrame:
    """Rows (cpe, wat) of validated telemetry documents; ``time_s`` is the newest ``time_ms``.

    Fields a WAT did not report are NaN, as :class:`~xapp.core.forecast.KpiFrame` expects.
    """
    cpes: list[str] = []
    wats: list[str] = []
    cols: dict[str, list[float]] = {f: [] for f in TELEMETRY_FIELDS}
    newest = 0
    for doc in docs:
        newest = max(newest, int(doc["time_ms"]))
        for wat, stats in doc["wats"].items():
            cpes.append(doc["cpe_id"])
            wats.append(wat)
            for f in TELEMETRY_FIELDS:
                v = stats.get(f)
                cols[f].append(float("nan") if v is None else float(v))
    return KpiFrame(
        time_s=newest / 1000.0,
        cpe=np.asarray(cpes, dtype=np.str_),
        wat=np.asarray(wats, dtype=np.str_),
        values={f: np.asarray(v, dtype=np.float64) for f, v in cols.items()},
    )


class ChannelSubscriber:
    """Receives agent state and telemetry for the xApp.

    Parameters
    ----------
    settings : MqttSettings
        Broker address and the xApp's certificate.
    on_telemetry : callable or None
        Called with a :class:`KpiFrame` per valid telemetry message (on paho's thread).
    on_state : callable or None
        Called with the new :class:`CpeState` per valid state message, last wills included.
    share_group : str or None, default=None
        Load-share telemetry between xApp replicas through the MQTT 5 shared subscription
        ``$share/{share_group}/mcw/v1/cpe/+/telemetry``. State is always subscribed plainly:
        shared subscriptions get no retained messages, and every replica needs every state.
    buffer_limit : int, default=100000
        Telemetry documents kept for :meth:`drain_telemetry`; older ones are dropped (counted)
        when nobody drains.
    """

    def __init__(self, settings: MqttSettings, *,
                 on_telemetry: Callable[[KpiFrame], None] | None = None,
                 on_state: Callable[[CpeState], None] | None = None,
                 share_group: str | None = None, buffer_limit: int = 100_000,
                 drops: DropCounter | None = None) -> None:
        self.settings = settings
        self.drops = drops if drops is not None else DropCounter()
        self.on_telemetry = on_telemetry
        self.on_state = on_state
        self.share_group = share_group
        self.buffer_limit = buffer_limit
        self.callback_errors = 0
        self.received = 0
        # Re-entrant: wait_for() predicates call state()/online() under the same lock.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._states: dict[str, CpeState] = {}
        self._buffer: deque[dict[str, Any]] = deque()
        self._connected = False
        self._subscribed = False
        self._client = new_client(settings, "sub")
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
        return [f"{TOPIC_PREFIX}/+/state", telemetry]

    def start(self) -> ChannelSubscriber:
        if not self._started:
            self._client.connect_async(self.settings.host, self.settings.port,
                                       keepalive=self.settings.keepalive_s)
            self._client.loop_start()
            self._started = True
        return self

    def stop(self) -> None:
        if self._started:
            self._client.disconnect()
            self._client.loop_stop()
            self._started = False

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

    def drain_telemetry(self) -> KpiFrame:
        """All telemetry received since the last drain, as one frame (possibly empty)."""
        with self._lock:
            docs, self._buffer = list(self._buffer), deque()
        return telemetry_frame(docs)

    # --- paho callbacks --------------------------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, _userdata: object, _flags: object,
                    reason: ReasonCode, _props: Properties | None) -> None:
        if reason.is_failure:
            log.warning("broker refused the subscriber: %s", reason)
            return
        with self._lock:
            self._connected = True
        # Re-subscribe on every connect: the session does not outlive the connection.
        client.subscribe([(t, 1) for t in self.topics])

    def _on_disconnect(self, _client: mqtt.Client, _userdata: object, _flags: object,
                       reason: ReasonCode, _props: Properties | None) -> None:
        with self._lock:
            self._connected = self._subscribed = False
        if reason.value == 0:
            log.info("subscriber disconnected")
        else:
            log.warning("subscriber lost the broker (%s); reconnecting with backoff", reason)

    def _on_subscribe(self, _client: mqtt.Client, _userdata: object, _mid: int,
                      reasons: list[ReasonCode], _props: Properties | None) -> None:
        failed = [str(r) for r in reasons if r.is_failure]
        if failed:
            log.error("broker refused subscriptions %s: %s", self.topics, failed)
        with self._cond:
            self._subscribed = not failed
            self._cond.notify_all()

    def _on_message(self, _client: mqtt.Client, _userdata: object,
                    msg: mqtt.MQTTMessage) -> None:
        decoded = decode(msg.topic, bytes(msg.payload), self.drops)
        with self._cond:
            self.received += 1
            if decoded is None:
                self._cond.notify_all()
                return
            kind, doc = decoded
            state: CpeState | None = None
            if kind == "state":
                state = CpeState.from_doc(doc, self._states.get(doc["cpe_id"]),
                                          time.monotonic())
                self._states[state.cpe_id] = state
            elif kind == "telemetry":
                if len(self._buffer) >= self.buffer_limit:
                    self._buffer.popleft()
                    self.drops.drop("telemetry", "buffer-full", "nobody drains telemetry",
                                    msg.topic)
                self._buffer.append(doc)
            else:
                # The ACL never lets weights reach us; if it does, the broker is misconfigured.
                self.drops.drop(kind, "unexpected-kind", "the xApp does not consume weights",
                                msg.topic)
                self._cond.notify_all()
                return
            self._cond.notify_all()
        try:
            if state is not None and self.on_state is not None:
                self.on_state(state)
            elif kind == "telemetry" and self.on_telemetry is not None:
                self.on_telemetry(telemetry_frame([doc]))
        except Exception:
            self.callback_errors += 1
            log.exception("channel subscriber callback failed on %s", msg.topic)
