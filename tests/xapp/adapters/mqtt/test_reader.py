"""The subscriber's MQTT client: its codec against the standard's encodings, and its sessions
against a real Mosquitto."""

from __future__ import annotations

import contextlib
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt.reasoncodes import ReasonCode

from tests.support.mosquitto import MosquittoBroker, connect_client
from tests.support.polling import wait_until
from xapp.adapters.mqtt import MqttSettings
from xapp.adapters.mqtt.connection import ProtocolError
from xapp.adapters.mqtt.reader import (
    ERR_NO_CONN,
    MqttReader,
    ReceivedMessage,
    parse_ack_codes,
    parse_publish,
    subscribe_packet,
    unsubscribe_packet,
)


def test_subscribe_and_unsubscribe_packets_as_the_standard_writes_them() -> None:
    # MQTT 5 3.8: fixed header 0x82, pid, empty properties, filter, options (QoS 1).
    assert subscribe_packet(7, [("a/+", 1)]) == b"\x82\x09\x00\x07\x00\x00\x03a/+\x01"
    # QoS is capped at 1: this client cannot acknowledge QoS 2.
    assert subscribe_packet(1, [("t", 2)])[-1] == 1
    assert unsubscribe_packet(9, ["a/+", "b"]) == b"\xa2\x0b\x00\x09\x00\x00\x03a/+\x00\x01b"


@pytest.mark.parametrize(("first", "body", "want", "pid"), [
    (0x30, b"\x00\x03a/b\x00hello", ReceivedMessage("a/b", b"hello", 0, False), None),
    (0x33, b"\x00\x01t\x01\x02\x00{}", ReceivedMessage("t", b"{}", 1, True), 0x0102),
    # properties (message expiry, 5 bytes) are skipped
    (0x32, b"\x00\x01t\x00\x05\x05\x02\x00\x00\x00\x3cxy", ReceivedMessage("t", b"xy", 1, False),
     5),
    (0x31, b"\x00\x01t\x00", ReceivedMessage("t", b"", 0, True), None),  # a retained delete
])
def test_publish_bodies_parse(first: int, body: bytes, want: ReceivedMessage,
                              pid: int | None) -> None:
    assert parse_publish(first, body) == (want, pid)


@pytest.mark.parametrize(("first", "body"), [
    (0x34, b"\x00\x01t\x00\x01\x00x"),  # QoS 2
    (0x30, b"\x00"),                      # no topic length
    (0x32, b"\x00\x01t\x00"),             # QoS 1 without a packet identifier
    (0x30, b"\x00\x02\xff\xfe\x00"),      # a topic that is not UTF-8
    (0x30, b"\x00\x01t\x09"),             # properties past the end
])
def test_malformed_publish_is_a_protocol_error(first: int, body: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_publish(first, body)


@given(st.integers(0x30, 0x3F), st.binary(max_size=64))
def test_any_publish_body_parses_or_raises_the_one_error(first: int, body: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        parse_publish(first, body)


def test_ack_codes() -> None:
    assert parse_ack_codes(b"\x00\x07\x00\x01\x87") == (7, [1, 0x87])
    with pytest.raises(ProtocolError):
        parse_ack_codes(b"\x00")


def test_a_session_with_a_real_broker(broker: MosquittoBroker, settings: MqttSettings) -> None:
    got: list[ReceivedMessage] = []
    events: list[tuple[str, object]] = []
    ready = threading.Event()
    reader = MqttReader(settings, "reader-test")
    assert reader.subscribe([("mcw/v1/cpe/+/state", 1)]) == (ERR_NO_CONN, None)

    def on_connect(client: MqttReader, _u: object, _f: object, rc: ReasonCode,
                   _p: object) -> None:
        events.append(("connect", rc.value))
        client.subscribe([("mcw/v1/cpe/+/state", 1), ("mcw/v1/cpe/+/telemetry", 0)])

    def on_subscribe(_c: MqttReader, _u: object, _mid: int, codes: list[ReasonCode],
                     _p: object) -> None:
        events.append(("suback", [c.value for c in codes]))
        ready.set()

    def on_unsubscribe(_c: MqttReader, _u: object, _mid: int, codes: list[ReasonCode],
                       _p: object) -> None:
        events.append(("unsuback", [c.value for c in codes]))

    reader.on_connect, reader.on_subscribe = on_connect, on_subscribe
    reader.on_unsubscribe = on_unsubscribe
    reader.on_message = lambda _c, _u, msg: got.append(msg)
    reader.on_disconnect = lambda _c, _u, _f, rc, _p: events.append(("disconnect", rc.value))
    cpe = connect_client(broker, "cpe-0001")
    try:
        assert cpe.publish("mcw/v1/cpe/cpe-0001/state", b'{"v":1}', retain=True) < 0x80
        reader.connect_async(settings.host, settings.port, 30)
        reader.loop_start()
        assert ready.wait(10) and reader.is_connected()
        assert events[:2] == [("connect", 0), ("suback", [1, 0])]
        assert wait_until(lambda: bool(got), 5)
        assert got == [ReceivedMessage("mcw/v1/cpe/cpe-0001/state", b'{"v":1}', 1, True)]
        for i in range(200):  # many at once: one read brings several packets
            cpe.publish("mcw/v1/cpe/cpe-0001/telemetry", b"%d" % i, qos=0)
        assert wait_until(lambda: len(got) >= 201, 5)
        assert [m.payload for m in got[1:]] == [b"%d" % i for i in range(200)]
        assert reader.unsubscribe("mcw/v1/cpe/+/telemetry")[0] == 0
        assert wait_until(lambda: ("unsuback", [0]) in events, 5)
        assert ("unsuback", [0]) in events
        cpe.publish("mcw/v1/cpe/cpe-0001/telemetry", b"late", qos=1)
        cpe.publish("mcw/v1/cpe/cpe-0001/state", b'{"v":2}', qos=1)
        assert wait_until(lambda: got[-1].payload == b'{"v":2}', 5)
        assert b"late" not in [m.payload for m in got]
        # A broker restart: the reader reconnects and subscribes again (on_connect).
        broker.restart()
        ready.clear()
        assert ready.wait(15)
        assert ("disconnect", 0x80) in events and events.count(("connect", 0)) == 2
    finally:
        cpe.close()
        reader.disconnect()
        reader.loop_stop()
    assert not reader.thread_alive and events[-1] == ("disconnect", 0)
