"""The publisher's minimal MQTT 5 codec (no broker needed; the broker tests use it for real)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xapp.adapters.mqtt.connection import (
    RECEIVE_MAXIMUM,
    PacketReader,
    ProtocolError,
    connect_packet,
    encode_varint,
    parse_connack,
    parse_properties,
    parse_puback,
    publish_parts,
)


@pytest.mark.parametrize(("n", "wire"), [
    (0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (16_383, b"\xff\x7f"),
    (16_384, b"\x80\x80\x01"), (268_435_455, b"\xff\xff\xff\x7f"),
])
def test_varint_matches_the_spec_examples(n: int, wire: bytes) -> None:
    assert encode_varint(n) == wire


def test_varint_refuses_what_does_not_fit() -> None:
    for n in (-1, 268_435_456):
        with pytest.raises(ValueError):
            encode_varint(n)


def test_publish_packet_layout() -> None:
    head, tail = publish_parts("mcw/v1/cpe/c1/weights", b'{"a":1}')
    packet = head + struct.pack("!H", 0x1234) + tail
    assert packet[0] == 0x33  # PUBLISH, QoS 1, retain
    [(first, body)] = PacketReader().feed(packet)
    assert first == 0x33
    assert body[:2] == struct.pack("!H", 21) and body[2:23] == b"mcw/v1/cpe/c1/weights"
    assert body[23:25] == b"\x12\x34" and body[25:26] == b"\x00" and body[26:] == b'{"a":1}'


def test_connect_packet_is_mqtt5_clean_start() -> None:
    [(first, body)] = PacketReader().feed(connect_packet("x-pub", 30))
    assert first == 0x10
    assert body[:7] == b"\x00\x04MQTT\x05" and body[7] == 0x02
    assert body[8:10] == struct.pack("!H", 30) and body[10] == 0  # no properties
    assert body[11:] == b"\x00\x05x-pub"


@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=20),
       cuts=st.lists(st.integers(1, 50), min_size=1, max_size=200))
@settings(max_examples=200, deadline=None)
def test_reader_reassembles_packets_across_any_chunking(sizes: list[int],
                                                        cuts: list[int]) -> None:
    packets = [(0x40 if i % 2 else 0x33, bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    stream = b"".join(bytes([f]) + encode_varint(len(b)) + b for f, b in packets)
    reader = PacketReader()
    got: list[tuple[int, bytes]] = []
    pos = 0
    for cut in cuts:
        got += reader.feed(stream[pos:pos + cut])
        pos += cut
    got += reader.feed(stream[pos:])
    assert got == packets


def test_reader_refuses_a_five_byte_length_and_oversized_packets() -> None:
    with pytest.raises(ProtocolError):
        PacketReader().feed(b"\x40\xff\xff\xff\xff\x01")
    with pytest.raises(ProtocolError):
        PacketReader(max_packet=1000).feed(b"\x30" + encode_varint(5000))


def test_puback_with_and_without_reason() -> None:
    assert parse_puback(b"\x00\x07") == (7, 0)
    assert parse_puback(b"\x01\x00\x87\x00") == (256, 0x87)
    with pytest.raises(ProtocolError):
        parse_puback(b"\x01")


def test_connack_properties_are_skipped_or_read() -> None:
    props = (b"\x22\x00\x0a"            # topic alias maximum (u16)
             + b"\x12\x00\x03abc"       # assigned client id (string)
             + b"\x26\x00\x01k\x00\x01v"  # user property (pair)
             + b"\x27\x00\x00\x40\x00"  # maximum packet size (u32)
             + b"\x21\x03\xe8"          # receive maximum 1000
             + b"\x25\x01")             # retain available
    code, got = parse_connack(b"\x00\x00" + encode_varint(len(props)) + props)
    assert code == 0
    assert got[RECEIVE_MAXIMUM] == 1000 and got[0x27] == 16384 and got[0x25] == 1
    assert parse_connack(b"\x00\x87")[0] == 0x87
    with pytest.raises(ProtocolError):
        parse_properties(b"\x05\x7f\x00\x00\x00\x00", 0)  # unknown property id
    with pytest.raises(ProtocolError):
        parse_properties(b"\x09\x21\x00\x01", 0)  # longer than the packet
