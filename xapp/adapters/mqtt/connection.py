"""Broker connection settings and the xApp's MQTT wire.

* :class:`MqttSettings`: where the broker is and the xApp's certificate (both channel ends).
* A minimal MQTT 5 codec, :class:`TlsStream` and :func:`open_session`, on which both the
  weight publisher and the subscriber's client (:mod:`xapp.adapters.mqtt.reader`) run; neither
  goes through paho, for speed (see the comment above :data:`PUBLISH_QOS1_RETAIN`).
"""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class MqttSettings:
    """Where the broker is and how the xApp proves who it is (mutual TLS, MQTT 5).

    Parameters
    ----------
    host, port : str, int
        The broker's TLS listener (8883 in ``broker/mosquitto.conf``); the broker's certificate
        is verified against ``host`` (a DNS name or IP in its subjectAltName).
    ca_file : str
        CA bundle that signed the broker's certificate.
    cert_file, key_file : str
        The xApp's client certificate (CN ``mcw-xapp``) and key; the broker's ACL keys on the CN.
    client_id : str, default="mcw-xapp"
        Base client id; the publisher and subscriber append ``-pub`` / ``-sub``. Give every
        replica its own (e.g. the pod name), or the broker disconnects the older one.
    keepalive_s : int, default=30
    answer_timeout_s : float, default=5.0
        How long the broker may leave a PINGREQ or PUBLISH unanswered before the publisher
        reports it as not answering (``/ric/v1/health/ready`` fails on ``broker``), and how
        long a connection may stay silent before it is probed with a PINGREQ.  A broker that
        is stopped (SIGSTOP, a hung host) keeps its TCP connections open, so only an answer
        overdue shows it; the connection itself is dropped only after ``keepalive_s``.
    reconnect_min_s, reconnect_max_s : float, default=0.5, 30.0
        Exponential reconnect backoff bounds (paho doubles the delay per failed attempt and
        resets it after a successful CONNACK).
    """

    host: str
    ca_file: str
    cert_file: str
    key_file: str
    port: int = 8883
    client_id: str = "mcw-xapp"
    keepalive_s: int = 30
    answer_timeout_s: float = 5.0
    reconnect_min_s: float = 0.5
    reconnect_max_s: float = 30.0

    def tls_context(self) -> ssl.SSLContext:
        """A client TLS context: verify the broker, present our certificate, TLS >= 1.2."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


# --- the publisher's data path: a minimal MQTT 5 codec ---------------------------------------
#
# The weight publisher speaks MQTT 5 itself instead of through paho: at fleet scale paho costs
# 45 to 90 µs of CPU per QoS 1 message (a threading.Condition per message, one TLS record and
# one system call per packet, three TLS reads and a Properties plus two ReasonCode objects per
# PUBACK), which alone is most of the one-second budget for 10,000 CPEs. The publisher only
# ever sends CONNECT, PUBLISH (QoS 1), PINGREQ and DISCONNECT and receives CONNACK, PUBACK,
# PINGRESP and DISCONNECT, so the codec below is all it needs. The subscriber's client adds
# SUBSCRIBE, UNSUBSCRIBE and incoming PUBLISH on the same codec (xapp/adapters/mqtt/reader.py).

#: Fixed header of a PUBLISH with QoS 1 and the retain flag (MQTT 5, 3.3.1).
PUBLISH_QOS1_RETAIN: Final = 0x33
CONNACK: Final = 0x20
PUBACK: Final = 0x40
PINGRESP: Final = 0xD0
DISCONNECT: Final = 0xE0
PINGREQ_PACKET: Final = b"\xc0\x00"
DISCONNECT_PACKET: Final = b"\xe0\x00"

#: MQTT 5 property identifier -> value encoding (2.2.2.2), to skip the ones we do not use.
_PROPERTY_KIND: Final[dict[int, str]] = {
    **dict.fromkeys((0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A), "byte"),
    **dict.fromkeys((0x13, 0x21, 0x22, 0x23), "u16"),
    **dict.fromkeys((0x02, 0x11, 0x18, 0x27), "u32"),
    0x0B: "varint",
    **dict.fromkeys((0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1A, 0x1C, 0x1F), "bytes"),
    0x26: "pair",
}
#: CONNACK property: the broker's Receive Maximum (QoS 1 messages we may have in flight).
RECEIVE_MAXIMUM: Final = 0x21


class ProtocolError(ConnectionError):
    """The broker sent something that is not valid MQTT 5 for this client."""


def encode_varint(n: int) -> bytes:
    """MQTT Variable Byte Integer (1.5.5)."""
    if not 0 <= n <= 268_435_455:
        raise ValueError(f"{n} does not fit an MQTT variable byte integer")
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def connect_packet(client_id: str, keepalive_s: int) -> bytes:
    """CONNECT: MQTT 5, Clean Start, no will, no user name (the certificate is the identity)."""
    cid = client_id.encode()
    body = (b"\x00\x04MQTT\x05\x02" + struct.pack("!H", keepalive_s) + b"\x00"
            + struct.pack("!H", len(cid)) + cid)
    return b"\x10" + encode_varint(len(body)) + body


def publish_parts(topic_name: str, payload: bytes) -> tuple[bytes, bytes]:
    """A retained QoS 1 PUBLISH split around its packet identifier: ``head + pid + tail``.

    Built once per message by the caller, so the network thread only inserts the identifier.
    """
    t = topic_name.encode()
    tail = b"\x00" + payload  # empty property list, then the payload
    head = (bytes((PUBLISH_QOS1_RETAIN,)) + encode_varint(2 + len(t) + 2 + len(tail))
            + struct.pack("!H", len(t)) + t)
    return head, tail


def parse_properties(buf: bytes, pos: int) -> tuple[dict[int, int], int]:
    """Integer-valued properties at ``pos`` (others skipped) and the position after them."""
    length, pos = read_varint(buf, pos)
    end = pos + length
    if end > len(buf):
        raise ProtocolError("property list longer than the packet")
    out: dict[int, int] = {}
    while pos < end:
        ident = buf[pos]
        pos += 1
        kind = _PROPERTY_KIND.get(ident)
        if kind == "byte":
            out[ident], pos = buf[pos], pos + 1
        elif kind == "u16":
            out[ident], pos = struct.unpack_from("!H", buf, pos)[0], pos + 2
        elif kind == "u32":
            out[ident], pos = struct.unpack_from("!I", buf, pos)[0], pos + 4
        elif kind == "varint":
            out[ident], pos = read_varint(buf, pos)
        elif kind == "bytes":
            pos += 2 + struct.unpack_from("!H", buf, pos)[0]
        elif kind == "pair":
            for _ in range(2):
                pos += 2 + struct.unpack_from("!H", buf, pos)[0]
        else:
            raise ProtocolError(f"unknown property 0x{ident:02x}")
    if pos != end:
        raise ProtocolError("malformed property list")
    return out, end


def read_varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """An MQTT Variable Byte Integer at ``pos`` and the position after it."""
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ProtocolError("truncated variable byte integer")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 21:
            raise ProtocolError("variable byte integer longer than 4 bytes")


class PacketReader:
    """Splits a byte stream into MQTT packets ``(first byte, body)``; keeps partial ones."""

    def __init__(self, max_packet: int = 1 << 20) -> None:
        self._buf = bytearray()
        self._max = max_packet

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        out: list[tuple[int, bytes]] = []
        pos, n = 0, len(buf)
        while n - pos >= 2:
            # Fast path: every PUBACK of a success is exactly 0x40 0x02 <pid>.
            length = buf[pos + 1]
            start = pos + 2
            if length & 0x80:
                try:
                    length, start = read_varint(buf, pos + 1)
                except ProtocolError:
                    if n - pos - 1 >= 4:
                        raise
                    break  # the length itself is still incomplete
                if length > self._max:
                    raise ProtocolError(f"packet of {length} bytes")
            if start + length > n:
                break
            out.append((buf[pos], bytes(buf[start:start + length])))
            pos = start + length
        del buf[:pos]
        return out


def parse_puback(body: bytes) -> tuple[int, int]:
    """(packet identifier, reason code) of a PUBACK body (reason 0 when omitted)."""
    if len(body) < 2:
        raise ProtocolError("PUBACK without a packet identifier")
    return (body[0] << 8) | body[1], body[2] if len(body) > 2 else 0


def open_session(settings: MqttSettings, ctx: ssl.SSLContext, client_id: str,
                 timeout_s: float) -> tuple[TlsStream, dict[int, int]]:
    """TCP + TLS + CONNECT/CONNACK, blocking with ``timeout_s``; the stream (non-blocking from
    then on) and the CONNACK's integer properties. Both the publisher and the reader open
    their sessions here."""
    raw = socket.create_connection((settings.host, settings.port), timeout=timeout_s)
    stream = TlsStream(raw, ctx, settings.host)
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream.handshake()
        stream.write(connect_packet(client_id, settings.keepalive_s))
        raw.sendall(stream.pending_bytes())
        reader = PacketReader()
        packets: list[tuple[int, bytes]] = []
        while not packets:
            packets = reader.feed(stream.read_blocking())
        first, body = packets[0]
        if first != CONNACK:
            raise ProtocolError(f"expected CONNACK, got packet 0x{first:02x}")
        code, props = parse_connack(body)
        if code >= 0x80:
            raise ConnectionRefusedError(f"broker refused {client_id}: reason 0x{code:02x}")
        raw.setblocking(False)
        return stream, props
    except BaseException:
        stream.close()
        raise


def parse_connack(body: bytes) -> tuple[int, dict[int, int]]:
    """(reason code, integer properties) of a CONNACK body."""
    if len(body) < 2:
        raise ProtocolError("short CONNACK")
    props = parse_properties(body, 2)[0] if len(body) > 2 else {}
    return body[1], props


class TlsStream:
    """TLS over a TCP socket through memory BIOs, for the publisher's network thread.

    Mosquitto writes every PUBACK as its own TLS record, and an ``ssl.SSLSocket`` needs one
    or two system calls per record to read it. Here one ``recv()`` brings in everything that
    arrived (hundreds of records) and OpenSSL decrypts them from memory; writes go into the
    outgoing BIO (never blocking, never partial) and leave in large ``send()`` calls.

    Parameters
    ----------
    sock : socket.socket
        A connected TCP socket (blocking with a timeout until :meth:`handshake` returned,
        non-blocking afterwards).
    ctx : ssl.SSLContext
        Client context (verifies the broker, presents our certificate).
    server_hostname : str
        Name or IP the broker's certificate must match.
    """

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext, server_hostname: str) -> None:
        self.sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(self._in, self._out, server_hostname=server_hostname)
        self._unsent = bytearray()

    def handshake(self) -> None:
        """Blocking TLS handshake (the socket's timeout bounds every wait)."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._send_all_blocking()
                self._receive_blocking()
        self._send_all_blocking()

    def _send_all_blocking(self) -> None:
        data = self._out.read()
        if data:
            self.sock.sendall(data)

    def _receive_blocking(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("broker closed the connection during TLS")
        self._in.write(data)

    def read_blocking(self) -> bytes:
        """At least one byte of plaintext, waiting for it (before the socket is non-blocking)."""
        while True:
            plain = self._drain()
            if plain:
                return plain
            self._receive_blocking()

    def read(self) -> bytes:
        """All plaintext available now (maybe ``b""``); raises ConnectionError when closed."""
        while True:
            try:
                data = self.sock.recv(1 << 18)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                raise ConnectionError("broker closed the connection")
            self._in.write(data)
            if len(data) < 1 << 18:
                break
        return self._drain()

    def _drain(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = self._tls.read(1 << 16)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError as exc:
                raise ConnectionError("broker closed the TLS session") from exc
            if not chunk:
                raise ConnectionError("broker closed the TLS session")
            chunks.append(chunk)
        return b"".join(chunks)

    def write(self, data: bytes | bytearray) -> None:
        """Encrypt ``data`` for sending (call :meth:`flush` to send)."""
        self._tls.write(data)

    def pending_bytes(self) -> bytes:
        """Take the encrypted bytes not yet sent (for a blocking ``sendall``)."""
        data = bytes(self._unsent) + self._out.read()
        self._unsent.clear()
        return data

    def flush(self) -> bool:
        """Send what is encrypted, without blocking; True when nothing is left unsent."""
        if self._out.pending:
            self._unsent += self._out.read()
        while self._unsent:
            try:
                n = self.sock.send(self._unsent)
            except (BlockingIOError, InterruptedError):
                return False
            del self._unsent[:n]
        return True

    def close(self) -> None:
        self.sock.close()
