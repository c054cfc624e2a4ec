"""What every agent applied, and when: the agents' retained ``state`` messages, as the xApp
sees them.

The observer connects with the xApp's certificate (the shipped ACL lets that identity read every
CPE's ``state``) under its own client id, re-subscribes after every reconnect (the broker is
restarted and hung during the story), and keeps each message with its arrival time.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from tests.support.mosquitto import Pki
from xapp.adapters.mqtt import parse_channel_topic, shard_filter

STATE_TOPIC = shard_filter(None, "state")
#: The proxies' per-CPE states (downlink): kept apart, as they share the CPE's versions.
PROXY_STATE_TOPIC = shard_filter(None, "state", proxy=True)


@dataclass(frozen=True)
class Applied:
    """One state message: the arrival time (monotonic s since the run began) and its content."""

    t: float
    cpe: str
    online: bool
    version: int
    weights: dict[str, int]
    event: str
    #: The rate caps the agent applied (mptcp-shares), Mbit/s per WAT; empty for dry-run.
    caps: dict[str, float] = field(default_factory=dict)


class Observer:
    """Collects :class:`Applied` records from every agent; safe to read from any thread."""

    def __init__(self, pki: Pki, port: int, t0: float, host: str = "127.0.0.1",
                 client_id: str = "e2e-observer") -> None:
        self.t0 = t0
        self.lock = threading.Lock()
        self.records: list[Applied] = []
        self.proxy_records: list[Applied] = []
        self.bad: list[str] = []
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=MQTTProtocolVersion.MQTTv5)
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(pki.ca))
        cert, key = pki.cert("mcw-xapp")
        ctx.load_cert_chain(str(cert), str(key))
        self.client.tls_set_context(ctx)
        self.client.reconnect_delay_set(1, 2)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.host = host
        self.port = port

    def _on_connect(self, c: mqtt.Client, *_: object) -> None:
        c.subscribe(STATE_TOPIC, qos=1)
        c.subscribe(PROXY_STATE_TOPIC, qos=1)

    def _on_message(self, _c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        if not msg.payload:
            return
        try:
            doc: dict[str, Any] = json.loads(msg.payload)
            rec = Applied(t=time.monotonic() - self.t0, cpe=str(doc["cpe_id"]),
                          online=bool(doc["online"]),
                          version=int(doc.get("applied_version", 0)),
                          weights={str(k): int(v)
                                   for k, v in (doc.get("applied_weights") or {}).items()},
                          event=str(doc.get("event", "")),
                          caps={str(k): float(v)
                                for k, v in (doc.get("applied_caps_mbps") or {}).items()})
        except (ValueError, KeyError, TypeError) as exc:
            with self.lock:
                self.bad.append(f"{msg.topic}: {exc}")
            return
        with self.lock:
            topic = parse_channel_topic(msg.topic)
            (self.proxy_records if topic is not None and topic.proxy_id is not None
             else self.records).append(rec)

    def start(self) -> Observer:
        self.client.connect(self.host, self.port, keepalive=5)
        self.client.loop_start()
        return self

    def stop(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()

    def snapshot(self) -> list[Applied]:
        with self.lock:
            return list(self.records)

    def proxy_snapshot(self) -> list[Applied]:
        """The proxies' per-CPE (downlink) states."""
        with self.lock:
            return list(self.proxy_records)

    def latest_versions(self) -> dict[str, int]:
        """Each CPE's highest applied version seen so far."""
        out: dict[str, int] = {}
        for r in self.snapshot():
            out[r.cpe] = max(out.get(r.cpe, 0), r.version)
        return out
