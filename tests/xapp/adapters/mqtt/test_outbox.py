"""The publisher's outbox on its own: one message in flight per CPE, coalescing, the window,
packet identifiers, a reconnect and acknowledgements (the publisher over a broker:
test_publisher*.py)."""

from __future__ import annotations

from xapp.adapters.mqtt.outbox import Outbox, Outgoing


def msg(cpe_id: str, version: int, shard: int = -1) -> Outgoing:
    return Outgoing(cpe_id, version, f"<{cpe_id}:{version}:".encode(), b">", shard)


def sent(out: bytearray) -> list[tuple[str, int]]:
    """(cpe_id:version, packet identifier) of each packet written by ``fill``."""
    parts = bytes(out).split(b"<")[1:]
    return [(p[:p.rindex(b":")].decode(), int.from_bytes(p[p.rindex(b":") + 1:-1], "big"))
            for p in parts]


def test_a_cpe_has_one_message_in_flight_and_the_newest_waits() -> None:
    box = Outbox(window=10)
    assert not box.put(msg("a", 1)) and not box.put(msg("b", 1))
    out = bytearray()
    assert box.fill(out, None) == (2, 0)
    assert sent(out) == [("a:1", 1), ("b:1", 2)]
    assert not box.put(msg("a", 2))
    assert box.put(msg("a", 3))  # replaces v2, still behind v1
    out.clear()
    assert box.fill(out, None) == (0, 0) and not out
    assert box.pending() == 3
    assert box.acknowledge([(1, 0)]) == (1, [])
    assert box.acked_version == {"a": 1}
    assert box.fill(out, None) == (1, 0)
    assert sent(out) == [("a:3", 3)]


def test_the_window_and_wrapping_packet_identifiers() -> None:
    box = Outbox(window=2, next_pid=65535)
    for cpe in "abc":
        box.put(msg(cpe, 1))
    out = bytearray()
    assert box.fill(out, None) == (2, 0)
    assert sent(out) == [("a:1", 65535), ("b:1", 1)]
    box.acknowledge([(1, 0)])
    out.clear()
    box.put(msg("b", 2))
    assert box.fill(out, None) == (1, 0)
    assert sent(out) == [("c:1", 2)]  # b:2 is behind c, and the window is full again


def test_a_reconnect_resends_what_was_in_flight_unless_newer_waits() -> None:
    box = Outbox(window=10)
    for cpe in "abc":
        box.put(msg(cpe, 1))
    box.fill(bytearray(), None)
    box.put(msg("b", 2))
    box.put(msg("d", 1))
    assert box.reconnected(5) == (2, 1)
    assert box.window == 5 and not box.inflight and not box.pids
    assert [(m.cpe_id, m.version) for m in box.ready.values()] == [
        ("a", 1), ("b", 2), ("c", 1), ("d", 1)]
    # Acknowledgements of the lost connection are not ours any more.
    assert box.acknowledge([(1, 0), (2, 0)]) == (0, [])


def test_rejected_and_fenced_messages() -> None:
    box = Outbox(window=10)
    box.put(msg("a", 1, shard=0))
    box.put(msg("b", 1, shard=1))
    out = bytearray()
    assert box.fill(out, lambda shard: shard == 0) == (1, 1)
    assert sent(out) == [("a:1", 1)]
    acked, rejected = box.acknowledge([(1, 0x87)])
    assert acked == 0 and [(m.cpe_id, code) for m, code in rejected] == [("a", 0x87)]
    assert box.acked_version == {} and box.pending() == 0


def test_forget_drops_the_queued_messages_of_shards() -> None:
    box = Outbox(window=1)
    box.put(msg("a", 1, shard=0))
    box.fill(bytearray(), None)
    box.put(msg("a", 2, shard=0))
    box.put(msg("b", 1, shard=0))
    box.put(msg("c", 1, shard=1))
    box.forget({0}.__contains__)
    assert list(box.inflight) == ["a"] and not box.waiting and list(box.ready) == ["c"]
