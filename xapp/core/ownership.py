"""Which shards this replica may act for, and the decisions of its lease rounds: pure logic.

The leases themselves live in SDL (:mod:`xapp.adapters.shard_leases`); what is here decides
what to ask for and how long an answer may be trusted:

* :func:`plan_leases`: given the live replicas and the shards held, which to acquire (targeted,
  not held), renew (targeted and held) and release (held, no longer targeted, so that a joining
  replica gets them without waiting for an expiry);
* :class:`ShardFence`: the *local* validity of every held lease.  A lease granted or renewed by
  a command sent at monotonic time ``t`` is trusted until ``t + lease_s - margin``: Redis starts
  the TTL after it receives the command, so ``t`` is earlier than Redis' own start, and the
  margin covers clock-rate drift between the two hosts and a publish in flight.  A replica cut
  off from Redis therefore stops acting for a shard before the key can expire in Redis, and so
  before any other replica can acquire it;
* :class:`ShardedKpis`: the loop's KPI source seen through the fence, so that the loop only
  decides CPEs of shards held now.

Everything takes its clock as an argument or a callable: nothing here sleeps or does I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core.forecast import KpiFrame
from xapp.core.ports import KpiSource
from xapp.core.shards import DEFAULT_SHARDS, shard_of, target_shards

#: Share of a lease kept as a safety margin before its local expiry (clock drift, a publish in
#: flight, a slow Redis answer that was counted from the moment the command was sent).
DEFAULT_MARGIN_FRACTION = 0.2


@dataclass(frozen=True)
class LeasePlan:
    """One lease round's intent."""

    target: frozenset[int]
    acquire: frozenset[int]
    renew: frozenset[int]
    release: frozenset[int]


def plan_leases(me: str, live: Iterable[str], held: Iterable[int],
                shards: int = DEFAULT_SHARDS) -> LeasePlan:
    """What ``me`` should do with its leases when ``live`` replicas are seen and it holds
    ``held``.

    A shard held but no longer targeted is released at once rather than kept until it expires:
    the replica that is now its target acquires it on its next round, so a join moves shards
    within a round, not within a lease.
    """
    target = target_shards(me, live, shards)
    have = frozenset(held)
    return LeasePlan(target=target, acquire=target - have, renew=have & target,
                     release=have - target)


def local_deadline(sent_monotonic: float, lease_s: float,
                   margin_fraction: float = DEFAULT_MARGIN_FRACTION) -> float:
    """Until when a lease granted by a command sent at ``sent_monotonic`` may be acted on."""
    if not 0 <= margin_fraction < 1:
        raise ValueError(f"margin_fraction must be in [0, 1), got {margin_fraction}")
    return sent_monotonic + lease_s * (1.0 - margin_fraction)


class ShardFence:
    """The shards this replica may publish for *now*, by local lease validity; thread-safe.

    ``everything=True`` is the single-replica mode (sharding disabled): every shard is held
    forever, with no lease traffic.  Otherwise shards are :meth:`grant`-ed by the lease worker
    with a local deadline and lapse by themselves when no renewal arrives in time.
    """

    def __init__(self, shards: int = DEFAULT_SHARDS, *, everything: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.shards = shards
        self.everything = everything
        self._clock = clock
        self._until = np.full(shards, np.inf if everything else -np.inf)
        # Not before: a shard acquired from a lease table that may have forgotten its holder
        # is held in Redis but may not be acted on until that holder's deadline has passed.
        self._from = np.full(shards, -np.inf)
        self._cache: dict[str, int] = {}
        self._lock = threading.Lock()
        #: Publishes refused because the CPE's shard was not held with a valid lease.
        self.fenced = 0

    def shard(self, cpe_id: str) -> int:
        s = self._cache.get(cpe_id)
        if s is None:
            if len(self._cache) > 1_000_000:  # ids come from the network: bound the cache
                self._cache.clear()
            s = self._cache[cpe_id] = shard_of(cpe_id, self.shards)
        return s

    def shards_of(self, cpe_ids: Iterable[str]) -> NDArray[np.intp]:
        return np.fromiter((self.shard(c) for c in cpe_ids), dtype=np.intp)

    def grant(self, shard: int, until_monotonic: float,
              from_monotonic: float = -np.inf) -> None:
        """Act for ``shard`` from ``from_monotonic`` (at once by default) until
        ``until_monotonic``."""
        with self._lock:
            self._until[shard] = until_monotonic
            self._from[shard] = from_monotonic

    def revoke(self, shard: int) -> None:
        with self._lock:
            if not self.everything:
                self._until[shard] = -np.inf

    def revoke_all(self) -> None:
        with self._lock:
            if not self.everything:
                self._until[:] = -np.inf

    def valid_until(self, shard: int) -> float:
        return float(self._until[shard])

    def held(self, now: float | None = None) -> frozenset[int]:
        """The shards whose lease is locally valid at ``now`` (monotonic)."""
        now = self._clock() if now is None else now
        return frozenset(np.flatnonzero((self._until > now) & (self._from <= now)).tolist())

    def allows_shard(self, shard: int, now: float | None = None) -> bool:
        now = self._clock() if now is None else now
        return bool(self._until[shard] > now and self._from[shard] <= now)

    def allows(self, cpe_id: str, now: float | None = None) -> bool:
        return self.everything or self.allows_shard(self.shard(cpe_id), now)

    def mask(self, cpe_ids: Iterable[str], now: float | None = None) -> NDArray[np.bool_]:
        """Per CPE: may its weights leave now."""
        ids = list(cpe_ids)
        if self.everything:
            return np.ones(len(ids), dtype=bool)
        now = self._clock() if now is None else now
        shards = self.shards_of(ids)
        return (self._until[shards] > now) & (self._from[shards] <= now)

    def count_fenced(self, n: int) -> None:
        with self._lock:
            self.fenced += n


class ShardedKpis:
    """A :class:`~xapp.core.ports.KpiSource` that shows only rows of CPEs whose shard the
    fence holds now.

    The loop caches its row maps by the identity of the frame's key arrays; the filtered key
    arrays are cached by (source arrays, held shards) for the same reason, so a tick with
    unchanged holdings costs one mask and a fancy-index of the values.
    """

    def __init__(self, source: KpiSource, fence: ShardFence) -> None:
        self.source = source
        self.fence = fence
        self._shards: tuple[object, NDArray[np.intp]] | None = None
        self._keys: tuple[object, frozenset[int], NDArray[np.intp], KpiFrame] | None = None

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        frame = self.source.latest(now_s, max_age_s)
        if self.fence.everything:
            return frame
        held = self.fence.held()
        cached = self._keys
        if cached is not None and cached[0] is frame.cpe and cached[1] == held:
            take, keys = cached[2], cached[3]
        else:
            shards = self._shards
            if shards is None or shards[0] is not frame.cpe:
                shards = (frame.cpe, self.fence.shards_of(frame.cpe.tolist()))
                self._shards = shards
            take = np.flatnonzero(np.isin(shards[1], np.fromiter(held, dtype=np.intp)))
            keys = KpiFrame(time_s=frame.time_s, cpe=frame.cpe[take], wat=frame.wat[take],
                            direction=None if frame.direction is None
                            else frame.direction[take], series=frame.series[take])
            self._keys = (frame.cpe, held, take, keys)
        return KpiFrame(time_s=frame.time_s, cpe=keys.cpe, wat=keys.wat,
                        values={k: np.asarray(v)[take] for k, v in frame.values.items()},
                        direction=keys.direction, series=keys.series)


class Fenced(Exception):
    """Weights not published: this replica does not hold the CPE's shard with a valid lease."""

    def __init__(self, cpe_id: str) -> None:
        super().__init__(f"{cpe_id}: shard not held by this replica")
        self.cpe_id = cpe_id
