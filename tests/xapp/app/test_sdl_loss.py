"""When SDL's Redis loses everything (FLUSHALL, a Redis restarted empty), issue 33 item 4:
versions never repeat or go back, and no two replicas act for one shard (real redis-server;
the replicas' monotonic clocks are injected, Redis' own clock runs)."""

from __future__ import annotations

import redis as redis_py

from tests.support.redis_server import RedisServer
from xapp.adapters.mqtt.versions import VersionAllocator
from xapp.adapters.shard_leases import ShardLeases
from xapp.app.config import load_config
from xapp.app.process import XappProcess
from xapp.app.run_options import RunOptions
from xapp.app.sharding import ShardManager
from xapp.core.ownership import ShardFence

LEASE_S = 30.0  # long on Redis' clock: nothing expires by itself while the test runs
SHARDS = 16


def client(server: RedisServer) -> redis_py.Redis:
    return redis_py.Redis(host=server.host, port=server.port, socket_timeout=2.0)


def test_flushall_between_two_publishes_reuses_no_version(redis: RedisServer) -> None:
    a = XappProcess(RunOptions(sdl="redis", rmr="off"), load_config(None))
    alloc = VersionAllocator(a.versions, block=100)
    sent = [alloc.take("cpe-1") for _ in range(3)]
    client(redis).flushall()
    # The same replica after a takeover cycle (it forgot its block) and a new replica (a
    # restart, or the shard's next owner) both read an empty store.
    alloc.forget(lambda c: True)
    again = alloc.take("cpe-1")
    b = XappProcess(RunOptions(sdl="redis", rmr="off"), load_config(None))
    other = VersionAllocator(b.versions, block=100).take("cpe-1")
    redis.stop()
    redis.start()  # Redis restarted empty
    restarted = XappProcess(RunOptions(sdl="redis", rmr="off"), load_config(None))
    third = VersionAllocator(restarted.versions, block=100).take("cpe-1")
    assert sent == sorted(set(sent))
    assert again > sent[-1] and other > sent[-1] and third > max(again, other), (
        sent, again, other, third)
    for p in (a, b, restarted):
        p.state.stop()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def manager(server: RedisServer, name: str, clock: Clock) -> tuple[ShardManager, ShardFence]:
    fence = ShardFence(SHARDS, clock=clock)
    return ShardManager(ShardLeases(client(server), "mcw-t"), fence, name, lease_s=LEASE_S,
                        clock=clock), fence


def overlap(fences: list[ShardFence], at: float) -> set[int]:
    return {s for s in range(SHARDS) if sum(f.allows_shard(s, at) for f in fences) > 1}


def test_fencing_holds_when_the_lease_store_forgets(redis: RedisServer) -> None:
    clock = Clock()
    for s in range(SHARDS):  # a fleet that has run for long: its lease tables are old
        client(redis).set(f"mcw-t:shard:{{{s}}}:since", 0)
    a, fa = manager(redis, "a", clock)
    b, fb = manager(redis, "b", clock)
    for m in (a, b, a, b):
        m.step()
    assert fa.held() | fb.held() == set(range(SHARDS)) and not fa.held() & fb.held()
    b_had = fb.held()
    client(redis).flushall()
    clock.t += 1.0
    # a rounds first: the membership is gone, it sees itself alone and targets every shard,
    # all of them free in Redis.  b still acts on its local deadline until its own round.
    a.step()
    b_until = max(fb.valid_until(s) for s in b_had)
    for at in (clock.t, clock.t + 0.5 * (b_until - clock.t), b_until - 1e-3):
        assert not overlap([fa, fb], at), f"two replicas act for one shard at {at}"
    clock.t += 1.0
    b.step()  # its renewals find no key: it drops its shards
    assert not fb.held() & b_had
    # A lease later every shard is acted on again, by one replica each.
    for _ in range(3):
        clock.t += LEASE_S / 5 + 0.01
        for m in (a, b):
            m.step()
            assert not overlap([fa, fb], clock.t)
    clock.t += LEASE_S
    for m in (a, b, a, b):
        m.step()
    assert fa.held() | fb.held() == set(range(SHARDS)) and not overlap([fa, fb], clock.t)


def test_a_replica_30_s_slow_taking_over_issues_after_the_previous_owner(
        redis: RedisServer) -> None:
    """Issue 33 item 5, the xApp's side of the agents' rule (an update issued before the last
    applied one is stale): the previous owner's issue clock comes back with the lease."""
    from xapp.core.issue_clock import IssueClock

    true_ms = 1_700_000_000_000
    clock = Clock()
    for n in range(SHARDS):
        client(redis).set(f"mcw-t:shard:{{{n}}}:since", 0)
    right = IssueClock(lambda: true_ms / 1000, clock)
    slow = IssueClock(lambda: true_ms / 1000 - 30.0, clock)
    fence_a, fence_s = ShardFence(SHARDS, clock=clock), ShardFence(SHARDS, clock=clock)
    a = ShardManager(ShardLeases(client(redis), "mcw-t"), fence_a, "a", lease_s=LEASE_S,
                     clock=clock, issue_clock=right)
    taker = ShardManager(ShardLeases(client(redis), "mcw-t"), fence_s, "s", lease_s=LEASE_S,
                         clock=clock, issue_clock=slow)
    a.step()
    last_of_a = right.now_ms()  # weights a sent
    a.step()
    # a dies: its leases expire in Redis and it leaves the membership.
    c = client(redis)
    c.delete(*[a.leases.shard_key(n) for n in range(SHARDS)])
    c.zrem(a.leases.members_key(), "a")
    taker.step()
    assert fence_s.held() == frozenset(range(SHARDS))
    assert slow.now_ms() >= last_of_a

    # A graceful hand-back (a rolling update) passes the exact last issue time.
    right.raise_floor(slow.now_ms() + 5_000)
    mark = right.now_ms()
    a.leases.leave("s", dict(taker.held), mark)
    later = IssueClock(lambda: true_ms / 1000 - 60.0, clock)
    b = ShardManager(ShardLeases(client(redis), "mcw-t"), ShardFence(SHARDS, clock=clock), "b",
                     lease_s=LEASE_S, clock=clock, issue_clock=later)
    b.step()
    assert later.now_ms() >= mark
