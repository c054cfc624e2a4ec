"""Shard leases and replica membership in SDL's Redis.

Keys (``ns`` is ``controls.sdl_namespace``, ``mcw`` by default):

``{ns}:replicas``              sorted set: replica id -> expiry (Redis' own clock, ms)
``{ns}:shard:{<n>}``           the lease of shard n: ``"<replica id>|<epoch>"`` with a TTL
``{ns}:shard:{<n>}:epoch``     the fencing token counter of shard n (INCR per acquisition)
``{ns}:shard:{<n>}:since``     Redis time (ms) the lease table of shard n was first used: a
                               table younger than a lease may have forgotten a live holder
``{ns}:shard:{<n>}:issued``    the holder's issue clock (Unix ms): at each renewal the most it
                               may issue before its lease ends, at a release what it issued

A shard's two keys share the hash tag ``{<n>}``, so in a Redis Cluster they sit in one slot
and the Lua scripts that touch both are legal; shards spread over the slots.  Membership is
one sorted set scored by expiry on Redis' clock rather than a key per replica: one round trip
heartbeats and lists the live replicas, and no replica's clock is compared with another's.

Every change of a lease is a script that checks the value it expects (compare-and-extend,
compare-and-delete), so a replica whose lease expired and was taken over cannot extend or
delete its successor's.  The epoch only grows: it tells who acquired a shard after whom.

This talks to Redis with redis-py directly (ricsdl, the SDL client of the rest of the state,
has no scripts and no TTLs), in the instance ricsdl uses for the namespace
(:func:`xapp.adapters.dbaas.redis_from_env`), so the leases live where the state they fence
does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from xapp.adapters.dbaas import RedisLike

_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[1] ~= '' then redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) end
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""

# Acquire: free -> ours with a new epoch; already ours (a retried round) -> extended, same
# epoch; someone else's -> epoch 0.  Also returns how long (ms) the acquirer must wait before
# acting, and the previous holder's issue clock.  The wait: a lease key that vanished with the
# whole store (FLUSHALL, a Redis restarted empty) says nothing about its holder, who may act
# on its local deadline for most of a lease more; ``since`` is set when the table is first
# used, so a table younger than a lease makes the acquirer wait until it is a lease old, when
# every such holder's local deadline (80 % of a lease after a renewal the store forgot) has
# passed.  A brand-new fleet pays this once.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = tonumber(redis.call('GET', KEYS[3]) or '')
if not since then
  since = now
  redis.call('SET', KEYS[3], now)
end
local wait = since + tonumber(ARGV[2]) - now
if wait < 0 then wait = 0 end
local issued = redis.call('GET', KEYS[4]) or '0'
local cur = redis.call('GET', KEYS[1])
if cur then
  local owner, epoch = string.match(cur, '^(.*)|(%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {tonumber(epoch), wait, issued}
  end
  return {0, 0, '0'}
end
local e = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. e, 'PX', ARGV[2])
return {e, wait, issued}
"""

# A key that vanished (expired, or forgotten by the store) is not ours: 0, the holder drops it.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[3] ~= '' then redis.call('SET', KEYS[2], ARGV[3]) end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2]) end
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass
class RoundResult:
    """What one :meth:`ShardLeases.round` got from Redis."""

    #: shard -> epoch of each shard acquired (or found already ours).
    acquired: dict[int, int] = field(default_factory=dict)
    #: shard -> seconds to wait before acting for an acquired shard (its lease table is
    #: younger than a lease: the store may have forgotten a holder that still acts).
    wait_s: dict[int, float] = field(default_factory=dict)
    #: shard -> the previous holder's issue clock (Unix ms; 0 when none was recorded).
    issued_ms: dict[int, int] = field(default_factory=dict)
    #: Shards whose lease was extended.
    renewed: set[int] = field(default_factory=set)
    #: Shards asked to be renewed that are no longer ours (expired, taken over).
    lost: set[int] = field(default_factory=set)
    #: Shards asked to be acquired that another replica holds.
    busy: set[int] = field(default_factory=set)


class ShardLeases:
    """The lease keys of one fleet; every method is one round trip (a pipeline)."""

    def __init__(self, client: RedisLike, namespace: str = "mcw") -> None:
        self.client = client
        self.ns = namespace
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def members_key(self) -> str:
        return f"{self.ns}:replicas"

    def shard_key(self, shard: int) -> str:
        return f"{self.ns}:shard:{{{shard}}}"

    def epoch_key(self, shard: int) -> str:
        return f"{self.ns}:shard:{{{shard}}}:epoch"

    def since_key(self, shard: int) -> str:
        return f"{self.ns}:shard:{{{shard}}}:since"

    def issued_key(self, shard: int) -> str:
        return f"{self.ns}:shard:{{{shard}}}:issued"

    @staticmethod
    def value(replica: str, epoch: int) -> str:
        return f"{replica}|{epoch}"

    def heartbeat(self, replica: str, ttl_ms: int) -> list[str]:
        """Mark ``replica`` live for ``ttl_ms`` and return every live replica (sorted)."""
        out = self._heartbeat(keys=[self.members_key()], args=[replica, int(ttl_ms)])
        return sorted(_text(m) for m in out)

    def members(self) -> list[str]:
        out = self._heartbeat(keys=[self.members_key()], args=["", 0])
        return sorted(_text(m) for m in out)

    def leave(self, replica: str, held: Mapping[int, int], issued_ms: int | None = None) -> None:
        """Drop out of the membership and give back ``held`` (shard -> epoch) at once, so the
        others take the shards on their next round instead of after the lease.  ``issued_ms``:
        the last issue time this replica used, left for the next holders."""
        pipe = self.client.pipeline(transaction=False)
        mark = "" if issued_ms is None else str(int(issued_ms))
        for shard, epoch in held.items():
            self._release(keys=[self.shard_key(shard), self.issued_key(shard)],
                          args=[self.value(replica, epoch), mark], client=pipe)
        pipe.zrem(self.members_key(), replica)
        pipe.execute()

    def round(self, replica: str, ttl_ms: int, acquire: Collection[int],
              renew: Mapping[int, int], release: Mapping[int, int],
              issued_ms: int | None = None) -> RoundResult:
        """Acquire, renew (shard -> epoch held) and release (shard -> epoch) in one pipeline.

        ``issued_ms``: this replica's issue clock now (Unix ms).  A renewal records it plus
        the lease (the most this replica may issue before the lease ends unrenewed), a release
        the value itself; an acquisition returns what the previous holder recorded."""
        pipe = self.client.pipeline(transaction=False)
        order: list[tuple[str, int]] = []
        now = "" if issued_ms is None else str(int(issued_ms))
        ahead = "" if issued_ms is None else str(int(issued_ms) + int(ttl_ms))
        for shard, epoch in release.items():
            self._release(keys=[self.shard_key(shard), self.issued_key(shard)],
                          args=[self.value(replica, epoch), now], client=pipe)
            order.append(("release", shard))
        for shard, epoch in renew.items():
            self._renew(keys=[self.shard_key(shard), self.issued_key(shard)],
                        args=[self.value(replica, epoch), int(ttl_ms), ahead], client=pipe)
            order.append(("renew", shard))
        for shard in acquire:
            self._acquire(keys=[self.shard_key(shard), self.epoch_key(shard),
                                self.since_key(shard), self.issued_key(shard)],
                          args=[replica, int(ttl_ms)], client=pipe)
            order.append(("acquire", shard))
        result = RoundResult()
        if not order:
            return result
        for (what, shard), answer in zip(order, pipe.execute(), strict=True):
            if what == "renew":
                (result.renewed if int(answer) == 1 else result.lost).add(shard)
            elif what == "acquire":
                epoch, wait_ms, issued = answer
                if int(epoch) > 0:
                    result.acquired[shard] = int(epoch)
                    result.wait_s[shard] = int(wait_ms) / 1000.0
                    result.issued_ms[shard] = int(_text(issued) or 0)
                else:
                    result.busy.add(shard)
        return result

    def holders(self, shards: int) -> dict[int, tuple[str, int]]:
        """shard -> (replica, epoch) of every held shard (for views and tests)."""
        pipe = self.client.pipeline(transaction=False)
        for s in range(shards):
            pipe.get(self.shard_key(s))
        out: dict[int, tuple[str, int]] = {}
        for s, raw in enumerate(pipe.execute()):
            if raw is None:
                continue
            owner, _, epoch = _text(raw).rpartition("|")
            out[s] = (owner, int(epoch))
        return out

    def close(self) -> None:
        self.client.close()


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
