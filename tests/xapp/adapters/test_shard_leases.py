"""The lease adapter against a real redis-server: acquire, renew, expire, takeover,
compare-and-delete, epochs that only grow, membership with a TTL."""

from __future__ import annotations

import redis as redis_py

from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from xapp.adapters.shard_leases import ShardLeases


def raw(server: RedisServer) -> redis_py.Redis:
    return redis_py.Redis(host=server.host, port=server.port, socket_timeout=2.0)


def leases(server: RedisServer) -> ShardLeases:
    return ShardLeases(raw(server), "mcw-t")


def test_acquire_renew_release_and_takeover(redis: RedisServer) -> None:
    a, b = leases(redis), leases(redis)
    got = a.round("a", 300, acquire=[0, 1], renew={}, release={})
    assert set(got.acquired) == {0, 1} and all(e == 1 for e in got.acquired.values())
    # b cannot take what a holds; a retried acquire of its own keeps the epoch.
    assert b.round("b", 300, acquire=[0], renew={}, release={}).busy == {0}
    assert a.round("a", 300, acquire=[0], renew={}, release={}).acquired == {0: 1}
    # Compare-and-extend: only with the value it holds.
    r = a.round("a", 300, acquire=[], renew={0: 1, 1: 7}, release={})
    assert r.renewed == {0} and r.lost == {1}
    # Compare-and-delete: b cannot release a's shard, a can.
    b.round("b", 300, acquire=[], renew={}, release={0: 1})
    assert a.holders(2)[0] == ("a", 1)
    a.round("a", 300, acquire=[], renew={}, release={0: 1})
    assert 0 not in a.holders(2)
    # Taken again: the epoch grows, so the new holder's value differs from the old one's.
    assert b.round("b", 300, acquire=[0], renew={}, release={}).acquired == {0: 2}
    assert a.round("a", 300, acquire=[], renew={0: 1}, release={}).lost == {0}


def test_an_expired_lease_is_taken_over_and_cannot_be_renewed(redis: RedisServer) -> None:
    a, b = leases(redis), leases(redis)
    assert a.round("a", 200, acquire=[5], renew={}, release={}).acquired == {5: 1}
    assert b.round("b", 200, acquire=[5], renew={}, release={}).busy == {5}
    assert wait_until(lambda: a.holders(8) == {}, 5)  # 200 ms on Redis's clock
    assert b.round("b", 1000, acquire=[5], renew={}, release={}).acquired == {5: 2}
    late = a.round("a", 1000, acquire=[], renew={5: 1}, release={5: 1})
    assert late.lost == {5}
    assert a.holders(8) == {5: ("b", 2)}


def test_membership_expires_and_leave_gives_shards_back(redis: RedisServer) -> None:
    a, b = leases(redis), leases(redis)
    assert a.heartbeat("a", 300) == ["a"]
    assert b.heartbeat("b", 5000) == ["a", "b"]
    assert wait_until(lambda: b.members() == ["b"], 5)  # a's 300 ms on Redis's clock
    a.heartbeat("a", 5000)
    held = a.round("a", 5000, acquire=[1, 2], renew={}, release={}).acquired
    a.leave("a", held)
    assert a.members() == ["b"]
    assert a.holders(4) == {}
    # The shard's two keys share a hash tag (one Redis Cluster slot for the scripts).
    assert a.shard_key(3) == "mcw-t:shard:{3}" and a.epoch_key(3) == "mcw-t:shard:{3}:epoch"


def test_the_holders_issue_clock_passes_to_the_next_holder(redis: RedisServer) -> None:
    a, b = leases(redis), leases(redis)
    assert a.round("a", 5000, acquire=[0], renew={}, release={}, issued_ms=1_000).acquired
    # A renewal leaves the most a may issue before its lease ends unrenewed.
    assert a.round("a", 5000, acquire=[], renew={0: 1}, release={}, issued_ms=2_000).renewed
    raw(redis).delete(a.shard_key(0))  # a died; its lease expired
    got = b.round("b", 5000, acquire=[0], renew={}, release={}, issued_ms=500)
    assert got.acquired == {0: 2} and got.issued_ms == {0: 7_000}
    # A release leaves what the releasing holder issued last.
    b.round("b", 5000, acquire=[], renew={}, release={0: 2}, issued_ms=9_000)
    assert a.round("a", 5000, acquire=[0], renew={}, release={}).issued_ms == {0: 9_000}


def test_a_lease_table_that_forgot_makes_the_acquirer_wait(redis: RedisServer) -> None:
    a, b = leases(redis), leases(redis)
    raw(redis).set(a.since_key(1), 0)  # an old table: no wait
    first = a.round("a", 5000, acquire=[1], renew={}, release={})
    assert first.acquired == {1: 1} and first.wait_s == {1: 0.0}
    raw(redis).flushall()
    # The holder's compare-and-extend finds no key: it drops the shard.
    assert a.round("a", 5000, acquire=[], renew={1: 1}, release={}).lost == {1}
    # The next acquirer may not act until a forgotten holder's lease is surely over.
    got = b.round("b", 5000, acquire=[1], renew={}, release={})
    assert got.acquired == {1: 1} and 4.0 < got.wait_s[1] <= 5.0
