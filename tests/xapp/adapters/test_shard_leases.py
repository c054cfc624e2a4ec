"""The lease adapter against a real redis-server: acquire, renew, expire, takeover,
compare-and-delete, epochs that only grow, membership with a TTL."""

from __future__ import annotations

import time

import redis as redis_py

from tests.support.redis_server import RedisServer
from xapp.adapters.shard_leases import ShardLeases


def leases(server: RedisServer) -> ShardLeases:
    client = redis_py.Redis(host=server.host, port=server.port, socket_timeout=2.0)
    return ShardLeases(client, "mcw-t")


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
    time.sleep(0.3)
    assert b.round("b", 1000, acquire=[5], renew={}, release={}).acquired == {5: 2}
    late = a.round("a", 1000, acquire=[], renew={5: 1}, release={5: 1})
    assert late.lost == {5}
    assert a.holders(8) == {5: ("b", 2)}


def test_membership_expires_and_leave_gives_shards_back(redis: RedisServer) -> None:
    a, b = leases(redis), leases(redis)
    assert a.heartbeat("a", 300) == ["a"]
    assert b.heartbeat("b", 5000) == ["a", "b"]
    time.sleep(0.4)
    assert b.heartbeat("b", 5000) == ["b"]
    a.heartbeat("a", 5000)
    held = a.round("a", 5000, acquire=[1, 2], renew={}, release={}).acquired
    a.leave("a", held)
    assert a.members() == ["b"]
    assert a.holders(4) == {}
    # The shard's two keys share a hash tag (one Redis Cluster slot for the scripts).
    assert a.shard_key(3) == "mcw-t:shard:{3}" and a.epoch_key(3) == "mcw-t:shard:{3}:epoch"
