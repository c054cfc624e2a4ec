"""Issue 33, item 9: one function derives every timing from the control period."""

from __future__ import annotations

from dataclasses import asdict, fields

from xapp.core.timings import LIVE, Timings, derive_timings, restart_only


def test_one_function_derives_every_timing() -> None:
    assert asdict(derive_timings(10.0)) == {
        "control_period_s": 10.0, "shard_lease_s": 15.0, "shard_redis_timeout_s": 3.0,
        "version_redis_timeout_s": 1.0, "influx_timeout_ms": 10_000, "influx_flush_s": 1.0,
        "intake_poll_s": 1.0, "intake_overlap_s": 2.0, "tick_deadline_s": 20.0}
    assert asdict(derive_timings(0.2)) == {
        "control_period_s": 0.2, "shard_lease_s": 1.0, "shard_redis_timeout_s": 0.2,
        "version_redis_timeout_s": 0.25, "influx_timeout_ms": 1_000, "influx_flush_s": 0.2,
        "intake_poll_s": 0.2, "intake_overlap_s": 0.4, "tick_deadline_s": 2.0}
    assert derive_timings(1.0, shard_lease_s=4.0).shard_lease_s == 4.0


def test_restart_only_names_the_held_timings_that_would_change() -> None:
    every = frozenset(f.name for f in fields(Timings))
    changed = restart_only(derive_timings(10.0), derive_timings(1.0), every)
    assert "control_period_s" not in changed  # live: the loop reads it at every tick
    assert changed["shard_lease_s"] == (15.0, 1.5)
    assert restart_only(derive_timings(10.0), derive_timings(1.0), LIVE) == {}
