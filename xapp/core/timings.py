"""Every timing ``mcw run`` derives from the control period, in one function.

The period sets more than the loop's tick: the shard lease (when ``controls.sharding.lease_s``
is 0), the Redis timeouts of the lease worker and of the weights version store, the InfluxDB
request timeout, how often the InfluxDB writer flushes, how often the intake polls and how
long a tick may run.  They
were computed in six places, so a reload of the period changed the tick alone and left the
rest at their start-up values without a word (issue 33).  Now each is a field of
:class:`Timings`, made by :func:`derive_timings` only; what may change in a running process is
:data:`LIVE`, and :func:`restart_only` names the rest that a new period would change.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Timings:
    """The timings of one control period (seconds unless the name says otherwise)."""

    #: Between two ticks of the control loop.
    control_period_s: float
    #: TTL of a shard lease and of the membership (sharding on).
    shard_lease_s: float
    #: Socket timeout of the lease worker's Redis client: a round slower than a fifth of the
    #: lease is worthless.
    shard_redis_timeout_s: float
    #: Socket timeout of the weights version store's Redis client: the tick waits for it when
    #: a CPE needs a new block, so a fraction of a shard lease at most.
    version_redis_timeout_s: float
    #: InfluxDB request timeout: two periods, 1 s to 10 s (a hung InfluxDB must not hold the
    #: reader and writer threads for the client's default).
    influx_timeout_ms: int
    #: How often the InfluxDB writer flushes: once per period, at most once a second.
    influx_flush_s: float
    #: How often the InfluxDB intake polls, and how far back it re-reads (two polls: writers
    #: that flush once per period, as this xApp's replicas do).
    intake_poll_s: float
    intake_overlap_s: float
    #: A tick running longer than this makes the loop's worker stuck (``/alive`` fails): two
    #: periods, at least :data:`TICK_DEADLINE_FLOOR_S`.
    tick_deadline_s: float


#: The shortest deadline of one tick.  The slowest tick measured (10,000 CPEs, real InfluxDB
#: and MQTT, ``bench/bench_tick.py``) has a p99 of 0.46 s; a tick of 2 s is not slow, it hangs.
TICK_DEADLINE_FLOOR_S = 2.0

#: Fields a running process applies on a configuration reload (the loop reads its period, and
#: its worker the tick deadline, at every tick); the others are fixed when their component
#: starts.
LIVE: frozenset[str] = frozenset({"control_period_s", "tick_deadline_s"})


def derive_timings(control_period_s: float, shard_lease_s: float = 0.0) -> Timings:
    """The timings of ``control_period_s``; ``shard_lease_s`` > 0 fixes the shard lease
    (``controls.sharding.lease_s``), 0 derives it.

    The derived shard lease is 1.5 periods: a dead replica's leases end at most one lease after
    its last renewal and the others look every fifth of a lease, so its shards are held again
    within 1.5 x 1.2 = 1.8 periods of its death (periods of 2/3 s and more; below, the floor of
    1 s keeps a lease longer than a Redis round under load).

    >>> derive_timings(1.0).shard_lease_s, derive_timings(10.0).influx_timeout_ms
    (1.5, 10000)
    """
    lease = shard_lease_s if shard_lease_s > 0 else max(1.0, 1.5 * control_period_s)
    flush = min(1.0, control_period_s)
    return Timings(
        control_period_s=control_period_s,
        shard_lease_s=lease,
        shard_redis_timeout_s=max(0.1, lease / 5),
        version_redis_timeout_s=min(1.0, max(0.1, lease / 4)),
        influx_timeout_ms=int(min(10.0, max(1.0, 2 * control_period_s)) * 1000),
        influx_flush_s=flush,
        intake_poll_s=flush,
        intake_overlap_s=2 * flush,
        tick_deadline_s=max(TICK_DEADLINE_FLOOR_S, 2 * control_period_s),
    )


def restart_only(running: Timings, wanted: Timings, in_use: frozenset[str]) -> dict[str, tuple[
        float, float]]:
    """The timings in ``in_use`` (those a running component holds) outside :data:`LIVE` that
    differ between ``running`` and ``wanted``: name -> (running, wanted)."""
    out: dict[str, tuple[float, float]] = {}
    for f in fields(Timings):
        a, b = getattr(running, f.name), getattr(wanted, f.name)
        if f.name in in_use and f.name not in LIVE and a != b:
            out[f.name] = (a, b)
    return out
