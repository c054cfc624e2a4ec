"""SDL's Redis through redis-py, with socket timeouts: the instance ricsdl would use for a
namespace, and the per-CPE weight-version ceilings kept there.

ricsdl finds Redis in the environment every RIC component gets (``DBAAS_*``);
:func:`dbaas_address` reads the same variables and makes the same choice, so what is written
here (shard leases, version ceilings) sits in the Redis instance that also holds the
namespace's SDL state.  That matters with ``DBAAS_CLUSTER_ADDR_LIST`` (several DBAAS
instances): ricsdl puts a namespace on instance ``crc32(namespace) % len(list)``; leases and
ceilings must live in *one* instance for their scripts and fencing to mean anything, and the
one ricsdl picks keeps the version keys where an earlier release wrote them through ricsdl.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from xapp.core.issue_clock import IssueClock

DEFAULT_PORT = 6379


def sdl_key(namespace: str, key: str) -> str:
    """``key`` of ``namespace`` as ricsdl stores it in Redis (its hash tag is the namespace):
    what is written here beside ricsdl's own keys reads and writes the same key."""
    return f"{{{namespace}}},{key}"


class RedisLike(Protocol):
    """The part of ``redis.Redis`` used here and by the shard leases."""

    def register_script(self, script: str) -> Any: ...

    def pipeline(self, transaction: bool = ...) -> Any: ...

    def get(self, name: str) -> Any: ...

    def mget(self, keys: list[str]) -> Any: ...

    def set(self, name: str, value: bytes) -> Any: ...

    def time(self) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class DbaasAddress:
    """One DBAAS instance: a Redis at ``host:port``, or, with ``sentinel_port`` (and no
    ``port``), the master named ``master_name`` by the Sentinel at ``host:sentinel_port``."""

    host: str
    port: int | None
    sentinel_port: int | None = None
    master_name: str = ""


def _split(env: Mapping[str, str], name: str) -> list[str]:
    # ricsdl splits a set variable on commas as it is (an empty one is one empty entry).
    value = env.get(name)
    return value.split(",") if value is not None else []


def _extend(values: list[str], n: int) -> list[str]:
    """ricsdl's completion: a list shorter than the address list repeats its last entry."""
    return values + values[-1:] * (n - len(values)) if values else values


def dbaas_address(namespace: str, environ: Mapping[str, str] | None = None) -> DbaasAddress:
    """The DBAAS instance ricsdl uses for ``namespace`` (``ricsdl.configuration`` and
    ``ricsdl.backend.redis``, ricsdl 3.1):

    * the addresses are ``DBAAS_CLUSTER_ADDR_LIST`` (comma list) or, without it,
      ``DBAAS_SERVICE_HOST``;
    * ``DBAAS_SERVICE_PORT``, ``DBAAS_SERVICE_SENTINEL_PORT`` and ``DBAAS_MASTER_NAME`` are comma
      lists matched to the addresses by position, a shorter list repeating its last entry;
    * with several addresses the namespace's instance is ``crc32(namespace) % len(addresses)``;
      with one, that one.

    Where ricsdl would fail (no address, no port) this falls back to ``localhost`` and 6379,
    as the xApp always did; a Sentinel port without a master name is an error."""
    env = os.environ if environ is None else environ
    addrs = _split(env, "DBAAS_CLUSTER_ADDR_LIST")
    host = env.get("DBAAS_SERVICE_HOST", "")
    if not addrs and host:
        addrs = [host]
    if not addrs:
        addrs = ["localhost"]
    n = len(addrs)
    i = zlib.crc32(namespace.encode()) % n if n > 1 else 0
    sentinel_ports = _extend(_split(env, "DBAAS_SERVICE_SENTINEL_PORT"), n)
    if sentinel_ports:
        names = _extend(_split(env, "DBAAS_MASTER_NAME"), n)
        name = names[i] if i < len(names) else ""
        if not name:
            raise ValueError("DBAAS_SERVICE_SENTINEL_PORT is set but DBAAS_MASTER_NAME is not")
        return DbaasAddress(addrs[i], None, int(sentinel_ports[i]), name)
    ports = _extend(_split(env, "DBAAS_SERVICE_PORT"), n)
    port = ports[i] if i < len(ports) and ports[i] else str(DEFAULT_PORT)
    return DbaasAddress(addrs[i], int(port))


def redis_from_env(namespace: str, timeout_s: float = 1.0,
                   environ: Mapping[str, str] | None = None) -> RedisLike:
    """A redis-py client for the Redis instance that holds ``namespace`` in SDL
    (:func:`dbaas_address`); through a Sentinel, the master it names, so a failover moves
    what is written here with the rest of SDL.  Every connect, read and write gives up after
    ``timeout_s``: a Redis that stops answering without closing the connection (a partition)
    must fail a call, not hold its caller until TCP gives up minutes later."""
    import redis
    from redis.sentinel import Sentinel

    addr = dbaas_address(namespace, environ)
    if addr.sentinel_port is not None:
        sentinel = Sentinel([(addr.host, addr.sentinel_port)], socket_timeout=timeout_s,
                            socket_connect_timeout=timeout_s)
        return sentinel.master_for(  # type: ignore[no-any-return]
            addr.master_name, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    return redis.Redis(host=addr.host, port=addr.port or DEFAULT_PORT,  # type: ignore[no-any-return]
                       socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def sample_redis_clock(client: RedisLike, clock: IssueClock) -> bool:
    """One reading of Redis' clock (``TIME``) into ``clock``: the fleet's reference for issue
    times, as it is already the reference of the replicas' membership.  Returns whether the
    reading was taken (a slow round trip is not)."""

    def read_ms() -> float:
        seconds, micros = client.time()
        return int(seconds) * 1000 + int(micros) / 1000

    return clock.read_reference(read_ms)


# Ceilings only grow, atomically: two writers that both think they own a CPE (which fencing
# prevents, but a bug or a paused process might not) still cannot lower one.
_RAISE_CEILINGS = """
for i, key in ipairs(KEYS) do
  local new = tonumber(ARGV[i])
  local cur = tonumber(redis.call('GET', key) or '0') or 0
  if new > cur then redis.call('SET', key, ARGV[i]) end
end
return #KEYS
"""

VERSION_PREFIX = "version/"


class RedisVersionStore:
    """Per-CPE weight-version ceilings (:class:`xapp.core.ports.VersionStore`) in
    SDL's key layout, ``{<namespace>},version/<cpe id>`` holding the ceiling as JSON: the keys
    ricsdl wrote for the xApp before this store existed, so an upgrade keeps every ceiling.

    Written through, synchronously: the publisher reserves a block of versions and must know
    the ceiling is stored before it sends any of them, or a restart could reuse a version the
    agents already saw.  While Redis is away (or does not answer within the client's timeout)
    the calls raise, so a CPE that has used up its block waits for Redis; the others carry on.
    A raise is one script keeping the maximum, for replicas that share a fleet.

    ``floor(cpe_id)`` is a lower bound for a ceiling, read whenever a block starts from the
    store (a start, a shard acquired): the runtime's is the last published version the state
    store remembers, the version the CPE's agent reports applied, and the issue clock in ms
    (:meth:`xapp.app.process.XappProcess.version_floor`), so a store that lost its data does not
    start the versions again low.
    """

    def __init__(self, client: RedisLike, namespace: str,
                 floor: Callable[[str], int] | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self._floor = floor
        self._raise = client.register_script(_RAISE_CEILINGS)

    def key(self, cpe_id: str) -> str:
        return sdl_key(self.namespace, VERSION_PREFIX + cpe_id)

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

    def close(self) -> None:
        self.client.close()
