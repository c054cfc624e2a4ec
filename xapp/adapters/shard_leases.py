"""Shard leases and replica membership in SDL's Redis.

Keys (``ns`` is ``controls.sdl_namespace``, ``mcw`` by default):

``{ns}:replicas``              sorted set: replica id -> expiry (Redis' own clock, ms)
``{ns}:shard:{<n>}``           the lease of shard n: ``"<replica id>|<epoch>"`` with a TTL
``{ns}:shard:{<n>}:epoch``     the fencing token counter of shard n (INCR per acquisition)

A shard's two keys share the hash tag ``{<n>}``, so in a Redis Cluster they sit in one slot
and the Lua scripts that touch both are legal; shards spread over the slots.  Membership is
one sorted set scored by expiry on Redis' clock rather than a key per replica: one round trip
heartbeats and lists the live replicas, and no replica's clock is compared with another's.

Every change of a lease is a script that checks the value it expects (compare-and-extend,
compare-and-delete), so a replica whose lease expired and was taken over cannot extend or
delete its successor's.  The epoch only grows: it tells who acquired a shard after whom.

This talks to Redis with redis-py directly (ricsdl, the SDL client of the rest of the state,
has no scripts and no TTLs); the address is the one ricsdl reads, ``DBAAS_SERVICE_HOST`` and
``DBAAS_SERVICE_PORT``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[1] ~= '' then redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) end
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""

# Acquire: free -> ours with a new epoch; already ours (a retried round) -> extended, same
# epoch; someone else's -> 0.
_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local owner, epoch = string.match(cur, '^(.*)|(%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(epoch)
  end
  return 0
end
local e = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. e, 'PX', ARGV[2])
return e
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLike(Protocol):
    """The part of ``redis.Redis`` used here."""

    def register_script(self, script: str) -> Any: ...

    def pipeline(self, transaction: bool = ...) -> Any: ...

    def get(self, name: str) -> Any: ...

    def mget(self, keys: list[str]) -> Any: ...

    def set(self, name: str, value: bytes) -> Any: ...

    def close(self) -> None: ...


def redis_from_env(timeout_s: float = 1.0,
                   environ: Mapping[str, str] | None = None) -> RedisLike:
    """A redis-py client for SDL's Redis, found as ricsdl finds it: ``DBAAS_SERVICE_HOST`` and
    ``DBAAS_SERVICE_PORT``, or, with ``DBAAS_SERVICE_SENTINEL_PORT`` and ``DBAAS_MASTER_NAME``,
    the master the Sentinel at that host names (so a failover moves the leases with the rest
    of SDL).  Short timeouts: a lease round that waits longer than a fraction of the lease is
    worthless.  Only the first address of a list is used (ricsdl's ``DBAAS_CLUSTER_ADDR_LIST``
    spreads namespaces over several Redis instances; not supported here)."""
    import redis
    from redis.sentinel import Sentinel

    env = os.environ if environ is None else environ
    host = env.get("DBAAS_SERVICE_HOST", "localhost")
    sentinel_port = env.get("DBAAS_SERVICE_SENTINEL_PORT", "").split(",")[0]
    if sentinel_port:
        master = env.get("DBAAS_MASTER_NAME", "").split(",")[0]
        if not master:
            raise ValueError("DBAAS_SERVICE_SENTINEL_PORT is set but DBAAS_MASTER_NAME is not")
        sentinel = Sentinel([(host, int(sentinel_port))], socket_timeout=timeout_s,
                            socket_connect_timeout=timeout_s)
        return sentinel.master_for(master, socket_timeout=timeout_s,  # type: ignore[no-any-return]
                                   socket_connect_timeout=timeout_s)
    port = int(env.get("DBAAS_SERVICE_PORT", "6379").split(",")[0])
    return redis.Redis(host=host, port=port, socket_timeout=timeout_s,  # type: ignore[no-any-return]
                       socket_connect_timeout=timeout_s)


@dataclass
class RoundResult:
    """What one :meth:`ShardLeases.round` got from Redis."""

    #: shard -> epoch of each shard acquired (or found already ours).
    acquired: dict[int, int] = field(default_factory=dict)
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

    def leave(self, replica: str, held: Mapping[int, int]) -> None:
        """Drop out of the membership and give back ``held`` (shard -> epoch) at once, so the
        others take the shards on their next round instead of after the lease."""
        pipe = self.client.pipeline(transaction=False)
        for shard, epoch in held.items():
            self._release(keys=[self.shard_key(shard)], args=[self.value(replica, epoch)],
                          client=pipe)
        pipe.zrem(self.members_key(), replica)
        pipe.execute()

    def round(self, replica: str, ttl_ms: int, acquire: Collection[int],
              renew: Mapping[int, int], release: Mapping[int, int]) -> RoundResult:
        """Acquire, renew (shard -> epoch held) and release (shard -> epoch) in one pipeline."""
        pipe = self.client.pipeline(transaction=False)
        order: list[tuple[str, int]] = []
        for shard, epoch in release.items():
            self._release(keys=[self.shard_key(shard)], args=[self.value(replica, epoch)],
                          client=pipe)
            order.append(("release", shard))
        for shard, epoch in renew.items():
            self._renew(keys=[self.shard_key(shard)],
                        args=[self.value(replica, epoch), int(ttl_ms)], client=pipe)
            order.append(("renew", shard))
        for shard in acquire:
            self._acquire(keys=[self.shard_key(shard), self.epoch_key(shard)],
                          args=[replica, int(ttl_ms)], client=pipe)
            order.append(("acquire", shard))
        result = RoundResult()
        if not order:
            return result
        for (what, shard), answer in zip(order, pipe.execute(), strict=True):
            n = int(answer)
            if what == "renew":
                (result.renewed if n == 1 else result.lost).add(shard)
            elif what == "acquire":
                if n > 0:
                    result.acquired[shard] = n
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


# Ceilings only grow, atomically: two replicas that both think they own a CPE (which fencing
# prevents, but a bug or a paused process might not) still cannot lower one.
_RAISE_CEILINGS = """
for i, key in ipairs(KEYS) do
  local new = tonumber(ARGV[i])
  local cur = tonumber(redis.call('GET', key) or '0') or 0
  if new > cur then redis.call('SET', key, ARGV[i]) end
end
return #KEYS
"""


class RedisVersionStore:
    """Per-CPE weight-version ceilings (:class:`xapp.adapters.mqtt.versions.VersionStore`) in
    the keys :class:`~xapp.adapters.sdl.SdlVersionStore` writes through ricsdl
    (``{<ns>},version/<cpe id>``), for replicas that share a fleet.

    Two differences, both for several replicas: a raise is one script that keeps the maximum
    (the ricsdl store reads, then writes), and every call has a socket timeout (ricsdl's client
    has none, so a Redis that stops answering without closing the connection -- a partition --
    held the publisher's lock, and every tick and readiness probe behind it, for the minutes
    TCP takes to give up).
    """

    def __init__(self, client: RedisLike, namespace: str,
                 floor: Callable[[str], int] | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self._floor = floor
        self._raise = client.register_script(_RAISE_CEILINGS)

    def key(self, cpe_id: str) -> str:
        return f"{{{self.namespace}}},version/{cpe_id}"

    def get_ceilings(self, cpe_ids: Collection[str]) -> dict[str, int]:
        ids = list(cpe_ids)
        if not ids:
            return {}
        raw = self.client.mget([self.key(c) for c in ids])
        out = {c: 0 if v is None else int(json.loads(v)) for c, v in zip(ids, raw, strict=True)}
        if self._floor is not None:
            out = {c: max(v, self._floor(c)) for c, v in out.items()}
        return out

    def set_ceilings(self, ceilings: Mapping[str, int]) -> None:
        if not ceilings:
            return
        ids = list(ceilings)
        self._raise(keys=[self.key(c) for c in ids], args=[int(ceilings[c]) for c in ids])


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
