"""The fleet cut into a fixed number of shards, and which replica should hold which.

A CPE's shard is FNV-1a (32 bit) of its id's UTF-8 bytes, modulo the shard count. The agent
computes the same function (``kernel-agent/mqttclient``) to put the shard in its telemetry and
state topics, so a replica subscribes to its shards' topics only; both sides test the same
vectors. FNV-1a is chosen because it is a dozen lines in any language with no library, and the
ids are short: the spread over 64 shards is within a few percent for ``cpe-0001``-style names.

The shard count is fixed for the life of a fleet (changing it moves almost every CPE), so it is
set once at install, not per replica; 64 lets up to 64 replicas share a fleet.

Which replica *should* hold a shard is rendezvous (highest-random-weight) hashing over the live
replicas (each shard goes to the replica with the highest hash of (replica, shard)), with a bound
on each replica's load so that N replicas hold about 1/N each. When a replica joins it takes
about 1/N of the shards, from every other replica; when one leaves, mostly its shards move.
Who actually holds a shard is decided by leases in SDL; this is only the target.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

#: Shards of a fleet unless the operator sets another count at install.
DEFAULT_SHARDS: Final = 64
#: Upper bound of the shard count (a topic segment and a lease key per shard).
MAX_SHARDS: Final = 4096

_FNV_OFFSET: Final = 0x811C9DC5
_FNV_PRIME: Final = 0x01000193


def fnv1a32(data: bytes) -> int:
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def shard_of(cpe_id: str, shards: int = DEFAULT_SHARDS) -> int:
    """The shard of a CPE, in ``[0, shards)``."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be in [1, {MAX_SHARDS}], got {shards}")
    return fnv1a32(cpe_id.encode("utf-8")) % shards


def _score(replica: str, shard: int) -> int:
    digest = hashlib.blake2b(f"{replica}\x00{shard}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(replicas: Iterable[str], shards: int = DEFAULT_SHARDS) -> dict[int, str]:
    """Each shard's target replica among ``replicas``; {} without replicas.

    Rendezvous hashing with bounded loads: shards are taken in order and each goes to the
    highest-ranked replica that holds fewer than ``ceil(shards / replicas)``. Plain rendezvous
    leaves 3 replicas with 13, 30 and 21 of 64 shards; the bound evens that out (22/21/21) and
    still moves only a few shards beyond the joining or leaving replica's share.
    """
    live = sorted(set(replicas))
    if not live:
        return {}
    cap = -(-shards // len(live))
    load = dict.fromkeys(live, 0)
    owners: dict[int, str] = {}
    for s in range(shards):
        for r in sorted(live, key=lambda r: (_score(r, s), r), reverse=True):
            if load[r] < cap:
                owners[s] = r
                load[r] += 1
                break
    return owners


def target_shards(me: str, replicas: Iterable[str], shards: int = DEFAULT_SHARDS) -> frozenset[int]:
    """The shards ``me`` should hold when ``replicas`` (``me`` included or not) are live."""
    live = set(replicas) | {me}
    return frozenset(s for s, owner in assign(live, shards).items() if owner == me)
