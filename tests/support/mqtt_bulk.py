"""Many QoS 0 PUBLISH packets over one mutual-TLS MQTT connection, on the xApp's own codec.

Benchmarks play a whole fleet of agents from one client: ``bench/bench_tick.py``'s feeder and
``tests/sharding/simulate.py``. A paho client spends tens of µs per message (one TLS record
and one system call per packet, Python objects per PUBLISH): at thousands of messages a second
the harness, not the xApp, would be what is measured. Here a batch of packets is built into
one buffer and goes out as a few large TLS records (:class:`xapp.adapters.mqtt.connection.
TlsStream`), a few µs per message. Topics can be encoded once (:func:`topic_header`) and
reused every period.

Only what a pure publisher needs: CONNECT (by :func:`~xapp.adapters.mqtt.connection.
open_session`), PUBLISH at QoS 0 and DISCONNECT. The broker sends nothing back to it, so
reading is only to notice that it closed the connection.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Iterable
from typing import Final

from xapp.adapters.mqtt.connection import (
    DISCONNECT_PACKET,
    MqttSettings,
    encode_varint,
    open_session,
)

#: Fixed header byte of a PUBLISH at QoS 0, not retained (MQTT 5, 3.3.1).
PUBLISH_QOS0: Final = b"\x30"


def topic_header(topic: str) -> bytes:
    """A PUBLISH's variable header for ``topic`` at QoS 0: the topic name (no packet
    identifier at QoS 0) and an empty property list; the payload follows it."""
    name = topic.encode("utf-8")
    return len(name).to_bytes(2, "big") + name + b"\x00"


def publish_packets(out: bytearray, messages: Iterable[tuple[bytes, bytes]]) -> int:
    """Append one QoS 0 PUBLISH per (:func:`topic_header`, payload) to ``out``; how many."""
    n = 0
    for head, payload in messages:
        out += PUBLISH_QOS0 + encode_varint(len(head) + len(payload)) + head + payload
        n += 1
    return n


class BulkPublisher:
    """One MQTT 5 session over mutual TLS that publishes batches of QoS 0 messages.

    Parameters
    ----------
    port, ca, cert, key : int, str, str, str
        The broker's TLS listener on loopback, its CA, and the client certificate and key
        (whose CN the broker's ACL must let write the topics).
    client_id : str
        The session's client id (unique on the broker, or it drops the older session).
    """

    def __init__(self, port: int, ca: str, cert: str, key: str, client_id: str,
                 host: str = "127.0.0.1") -> None:
        settings = MqttSettings(host=host, port=port, ca_file=ca, cert_file=cert,
                                key_file=key, client_id=client_id)
        self.stream, _props = open_session(settings, settings.tls_context(), client_id, 10.0)
        self.sent = 0

    def send(self, messages: Iterable[tuple[bytes, bytes]]) -> int:
        """Publish every (:func:`topic_header`, payload) and return once all is written to the
        socket; how many were sent. Raises ConnectionError if the broker closed the session."""
        out = bytearray()
        n = publish_packets(out, messages)
        self.stream.write(out)
        while not self.stream.flush():
            select.select([], [self.stream.sock], [], 1.0)
        self.stream.read()  # nothing is expected; raises if the broker closed the session
        self.sent += n
        return n

    def send_topics(self, messages: Iterable[tuple[str, bytes]]) -> int:
        """:meth:`send` for topics not encoded yet."""
        return self.send((topic_header(t), p) for t, p in messages)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.write(DISCONNECT_PACKET)
            self.stream.flush()
        self.stream.close()


__all__ = ["BulkPublisher", "publish_packets", "topic_header"]
