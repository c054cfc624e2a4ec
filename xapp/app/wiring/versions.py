"""The weights' versions for ``mcw run``: the store of per-CPE version ceilings (SDL Redis, or
memory), the reader of Redis' clock that the weights' issue times follow, and the least
version a new block may start from."""

from __future__ import annotations

import logging
from collections.abc import Callable

from xapp.adapters.dbaas import RedisLike, RedisVersionStore, redis_from_env, sample_redis_clock
from xapp.adapters.mqtt.versions import MemoryVersionStore
from xapp.core.issue_clock import IssueClock
from xapp.core.ports import VersionStore
from xapp.core.timings import Timings
from xapp.core.workers import Worker

log = logging.getLogger(__name__)

#: How often SDL Redis' clock is read (the reference of the weights' issue times): a host
#: clock drifts by milliseconds a day, so this is about noticing a step soon.
CLOCK_READ_S = 2.0
#: The clock floor of a version block is the issue clock in ms times this (microseconds).
VERSIONS_PER_MS = 1000
#: A host clock further than this from Redis' is logged (the metric always says it).
CLOCK_SKEW_WARN_S = 1.0


def build_versions(namespace: str | None, timings: Timings, floor: Callable[[str], int],
                   issue_clock: IssueClock, on_skew: Callable[[float], object]
                   ) -> tuple[VersionStore, RedisClock | None]:
    """The version store in SDL Redis' ``namespace`` and the reader of that Redis' clock (not
    started); with ``namespace`` None, a store in memory and no clock to read."""
    if namespace is None:
        return MemoryVersionStore(), None
    # The tick waits for the store when a CPE needs a new block: a fraction of a shard lease
    # at most (the lease as it would be with sharding on), so a partition holds back only the
    # CPEs that need a block and, sharded, costs the replica little of its lease's end.
    store = RedisVersionStore(redis_from_env(namespace,
                                             timeout_s=timings.version_redis_timeout_s),
                              namespace, floor=floor)
    return store, RedisClock(store.client, issue_clock, on_skew)


class RedisClock:
    """Reads SDL Redis' clock into the issue clock every :data:`CLOCK_READ_S` (:attr:`worker`),
    reports the host's skew (``on_skew``) and logs when it goes past
    :data:`CLOCK_SKEW_WARN_S` and when it comes back."""

    def __init__(self, client: RedisLike, issue_clock: IssueClock,
                 on_skew: Callable[[float], object]) -> None:
        self.client = client
        self.issue_clock = issue_clock
        self.on_skew = on_skew
        self._warned = False
        self.worker = Worker("mcw-clock", self.read, CLOCK_READ_S, deadline_s=30.0)

    def read(self) -> None:
        sample_redis_clock(self.client, self.issue_clock)
        skew = self.issue_clock.skew_s()
        if skew is None:
            return
        self.on_skew(skew)
        far = abs(skew) > CLOCK_SKEW_WARN_S
        if far and not self._warned:
            log.warning("this host's clock is %+.3f s off SDL Redis' clock: weights are issued "
                        "on Redis' clock (mcw_clock_skew_seconds); fix the host's time "
                        "synchronisation", skew)
        elif not far and self._warned:
            log.info("this host's clock is back within %.1f s of SDL Redis' clock (%+.3f s)",
                     CLOCK_SKEW_WARN_S, skew)
        self._warned = far


def version_floor(published: int, issue_ms: int, applied: int | None) -> int:
    """The least version a block read from the store may start from: the last version the
    state store remembers (``published``), the version the CPE's agent reports applied, and
    the issue clock in microseconds.  The last holds when SDL lost everything and no agent has
    reported yet: a CPE's versions grow by one per publish, a few a second, so versions that
    started from the clock stay below it (docs/guarantees.md); in microseconds they stay below
    JSON's 2^53 until the year 2255."""
    floor = max(published, issue_ms * VERSIONS_PER_MS)
    return floor if applied is None else max(floor, applied)
