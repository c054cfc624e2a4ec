"""The subscriber's MQTT client: agent state and telemetry in, on the publisher's codec.

At fleet scale paho-mqtt was most of the subscriber's cost: about 80 µs of CPU per telemetry
message (one TLS record and several reads per packet, a Properties and ReasonCode object per
PUBLISH, a condition per message), at 10,000 agents a second more than a core. This client
reads everything that arrived in one ``recv()``, decrypts it from memory
(:class:`~xapp.adapters.mqtt.connection.TlsStream`), splits it into packets in bulk
(:class:`~xapp.adapters.mqtt.connection.PacketReader`) and hands each PUBLISH to
``on_message``: a few µs per message.

It keeps paho's client interface for what :class:`~xapp.adapters.mqtt.ChannelSubscriber` uses
(``connect_async``, ``loop_start``, ``loop_stop``, ``disconnect``, ``subscribe``,
``unsubscribe`` and the version-2 callbacks with paho's ``ReasonCode``), so the subscriber's
logic does not depend on which client carries it. It speaks only what a subscriber needs:
CONNECT (clean start, no session), SUBSCRIBE / UNSUBSCRIBE, PUBLISH in at QoS 0 and 1 (with
its PUBACK), PINGREQ and DISCONNECT. QoS 2 is never granted (subscriptions ask for 1 at most),
and a broker that sends it is a protocol error.

With ``on_messages`` set, the PUBLISH packets of one ``recv()`` go to it as one list (in order,
before any other packet of that read is handled) instead of one ``on_message`` call each: the
receiver takes its locks and wakes its waiters once per read, not once per message.

Threading: one network thread per started client owns the socket; ``subscribe`` and
``unsubscribe`` may be called from any thread (they queue the packet and wake the thread).
Callbacks run on the network thread. An ``Exception`` from the network or the broker drops the
connection and the thread reconnects with exponential backoff; anything else (a
``BaseException`` out of a callback) ends the thread, as it ends paho's, and
:attr:`thread_alive` says so.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Final

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from xapp.adapters.mqtt.connection import (
    DISCONNECT,
    DISCONNECT_PACKET,
    PINGREQ_PACKET,
    PINGRESP,
    MqttSettings,
    PacketReader,
    ProtocolError,
    TlsStream,
    encode_varint,
    open_session,
    read_varint,
)

log = logging.getLogger(__name__)

PUBLISH: Final = 0x30
SUBACK: Final = 0x90
UNSUBACK: Final = 0xB0
#: paho's return code of a subscribe() while not connected (``MQTT_ERR_NO_CONN``).
ERR_NO_CONN: Final = 4
_CONNECT_TIMEOUT_S: Final = 10.0
#: Largest packet accepted from the broker (its max_packet_size for clients is far below).
_MAX_PACKET: Final = 1 << 20
#: A normal disconnection's reason code, and "unspecified error" for a lost connection.
_NORMAL: Final = 0x00
_UNSPECIFIED: Final = 0x80


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One PUBLISH as the broker delivered it (the fields of paho's MQTTMessage we use)."""

    topic: str
    payload: bytes
    qos: int
    retain: bool


def parse_publish(first: int, body: bytes) -> tuple[ReceivedMessage, int | None]:
    """A PUBLISH body as a message and, at QoS 1, the packet identifier to acknowledge."""
    qos = (first >> 1) & 0x03
    if qos == 2 or qos == 3:
        raise ProtocolError(f"PUBLISH with QoS {qos}: this client subscribes at QoS 1 at most")
    if len(body) < 2:
        raise ProtocolError("PUBLISH without a topic")
    tlen = struct.unpack_from("!H", body)[0]
    pos = 2 + tlen
    try:
        topic = body[2:pos].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError("PUBLISH topic is not UTF-8") from exc
    pid: int | None = None
    if qos:
        if len(body) < pos + 2:
            raise ProtocolError("PUBLISH without a packet identifier")
        pid = (body[pos] << 8) | body[pos + 1]
        pos += 2
    plen, pos = read_varint(body, pos)  # properties: skipped (we set none that come back)
    pos += plen
    if pos > len(body):
        raise ProtocolError("PUBLISH properties longer than the packet")
    return ReceivedMessage(topic, body[pos:], qos, bool(first & 0x01)), pid


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("!H", len(raw)) + raw


def subscribe_packet(pid: int, topics: Iterable[tuple[str, int]]) -> bytes:
    """SUBSCRIBE (MQTT 5, 3.8): no properties; each filter with its maximum QoS."""
    body = struct.pack("!H", pid) + b"\x00" + b"".join(
        _string(t) + bytes((min(max(qos, 0), 1),)) for t, qos in topics)
    return b"\x82" + encode_varint(len(body)) + body


def unsubscribe_packet(pid: int, topics: Iterable[str]) -> bytes:
    """UNSUBSCRIBE (MQTT 5, 3.10): no properties."""
    body = struct.pack("!H", pid) + b"\x00" + b"".join(_string(t) for t in topics)
    return b"\xa2" + encode_varint(len(body)) + body


def parse_ack_codes(body: bytes) -> tuple[int, list[int]]:
    """(packet identifier, reason codes) of a SUBACK or UNSUBACK body."""
    if len(body) < 3:
        raise ProtocolError("short SUBACK/UNSUBACK")
    pid = (body[0] << 8) | body[1]
    plen, pos = read_varint(body, 2)
    return pid, list(body[pos + plen:])


class MqttReader:
    """A subscribing MQTT 5 client over mutual TLS with paho's interface (see the module)."""

    def __init__(self, settings: MqttSettings, suffix: str) -> None:
        self.settings = settings
        self.client_id = f"{settings.client_id}-{suffix}"
        self._tls = settings.tls_context()
        self.on_connect: Callable[..., None] | None = None
        self.on_disconnect: Callable[..., None] | None = None
        self.on_subscribe: Callable[..., None] | None = None
        self.on_unsubscribe: Callable[..., None] | None = None
        self.on_message: Callable[[Any, Any, ReceivedMessage], None] | None = None
        self.on_messages: Callable[[Any, Any, list[ReceivedMessage]], None] | None = None
        self._lock = threading.Lock()
        self._outbox = bytearray()
        self._connected = False
        self._pid = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None

    # --- paho's interface ----------------------------------------------------------------

    def connect_async(self, host: str, port: int, keepalive: int = 60) -> None:
        self.settings = replace(self.settings, host=host, port=port, keepalive_s=keepalive)

    def loop_start(self) -> None:
        if self.thread_alive:
            return
        self._stopping.clear()
        if self._wake_r is None:
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name=f"mqtt-{self.client_id}",
                                        daemon=True)
        self._thread.start()

    def disconnect(self) -> None:
        """Leave: the network thread sends DISCONNECT and ends (join it with loop_stop)."""
        self._stopping.set()
        self._wake()

    def loop_stop(self) -> None:
        self._stopping.set()
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=_CONNECT_TIMEOUT_S + 5)

    def subscribe(self, topics: list[tuple[str, int]]) -> tuple[int, int | None]:
        return self._send(lambda pid: subscribe_packet(pid, topics))

    def unsubscribe(self, topics: str | list[str]) -> tuple[int, int | None]:
        names = [topics] if isinstance(topics, str) else list(topics)
        return self._send(lambda pid: unsubscribe_packet(pid, names))

    @property
    def thread_alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def is_connected(self) -> bool:
        with self._lock:
            return self._connected

    # --- internals -----------------------------------------------------------------------

    def _send(self, build: Callable[[int], bytes]) -> tuple[int, int | None]:
        with self._lock:
            if not self._connected:
                return ERR_NO_CONN, None
            self._pid = self._pid % 0xFFFF + 1
            pid = self._pid
            self._outbox += build(pid)
        self._wake()
        return 0, pid

    def _wake(self) -> None:
        wake_w = self._wake_w
        if wake_w is not None:
            with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
                wake_w.send(b"\x00")

    def _run(self) -> None:
        delay = self.settings.reconnect_min_s
        while not self._stopping.is_set():
            try:
                stream, _props = open_session(self.settings, self._tls, self.client_id,
                                              _CONNECT_TIMEOUT_S)
            except Exception as exc:
                log.warning("%s cannot reach the broker %s:%d (%s); retry in %.1f s",
                            self.client_id, self.settings.host, self.settings.port, exc, delay)
                if self._stopping.wait(delay):
                    return
                delay = min(delay * 2, self.settings.reconnect_max_s)
                continue
            delay = self.settings.reconnect_min_s
            with self._lock:
                self._connected = True
                self._outbox.clear()  # a new session: nothing of the old one is owed
            code = _NORMAL
            try:
                self._callback(self.on_connect, None, None, _reason(PacketTypes.CONNACK, 0),
                               None)
                self._serve(stream)
                with contextlib.suppress(OSError):  # leaving: say so, as paho does
                    stream.write(DISCONNECT_PACKET)
                    stream.flush()
            except Exception as exc:
                code = _UNSPECIFIED
                log.debug("%s lost the broker: %s", self.client_id, exc)
            finally:
                with self._lock:
                    self._connected = False
                stream.close()
            self._callback(self.on_disconnect, None, None,
                           _reason(PacketTypes.DISCONNECT, code), None)

    def _callback(self, fn: Callable[..., None] | None, *args: object) -> None:
        if fn is not None:
            fn(self, *args)

    def _serve(self, stream: TlsStream) -> None:
        keepalive = float(self.settings.keepalive_s)
        reader = PacketReader(_MAX_PACKET)
        sock = stream.sock
        wake_r = self._wake_r
        assert wake_r is not None
        last_out = time.monotonic()
        ping_sent: float | None = None
        acks = bytearray()
        while not self._stopping.is_set():
            with self._lock:
                out, self._outbox = self._outbox, bytearray()
            out += acks
            acks.clear()
            if out:
                stream.write(out)
                last_out = time.monotonic()
            all_sent = stream.flush()
            now = time.monotonic()
            if ping_sent is not None and now - ping_sent > keepalive:
                raise ConnectionError(f"no PINGRESP within {keepalive:.0f} s")
            if ping_sent is None and now - last_out >= keepalive / 2:
                stream.write(PINGREQ_PACKET)
                all_sent = stream.flush()
                ping_sent = last_out = now
            timeout = max(0.0, min(1.0, last_out + keepalive / 2 - now))
            rlist, _w, _x = select.select([sock, wake_r], [] if all_sent else [sock], [],
                                          timeout)
            if wake_r in rlist:
                with contextlib.suppress(BlockingIOError):
                    wake_r.recv(4096)
            if sock not in rlist:
                continue
            batch: list[ReceivedMessage] = []
            for first, body in reader.feed(stream.read()):
                kind = first & 0xF0
                if kind == PUBLISH:
                    msg, pid = parse_publish(first, body)
                    if pid is not None:  # acknowledged once handed over, as paho does
                        acks += b"\x40\x02" + pid.to_bytes(2, "big")
                    if self.on_messages is None:
                        self._callback(self.on_message, None, msg)
                    else:
                        batch.append(msg)
                    continue
                if batch:
                    self._callback(self.on_messages, None, batch)
                    batch = []
                if kind == PINGRESP:
                    ping_sent = None
                elif kind in (SUBACK, UNSUBACK):
                    pid, codes = parse_ack_codes(body)
                    ptype = PacketTypes.SUBACK if kind == SUBACK else PacketTypes.UNSUBACK
                    fn = self.on_subscribe if kind == SUBACK else self.on_unsubscribe
                    self._callback(fn, None, pid, [_reason(ptype, c) for c in codes], None)
                elif kind == DISCONNECT:
                    code = body[0] if body else 0
                    raise ConnectionError(f"broker sent DISCONNECT reason 0x{code:02x}")
                else:
                    raise ProtocolError(f"unexpected packet 0x{first:02x}")
            if batch:
                self._callback(self.on_messages, None, batch)


def _reason(packet_type: int, code: int) -> ReasonCode:
    return ReasonCode(packet_type, identifier=code)
