"""Issue 33, item 9: a reload follows the control period whole, or keeps it and says why; and
which sections of ``controls`` wait for a restart."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from xapp.app.config import parse_controls
from xapp.app.reload import loop_on_reload, restart_only_changes, timings_of
from xapp.core.loop import LoopSettings
from xapp.core.timings import LIVE, Timings, derive_timings

EVERY_TIMING = frozenset(f.name for f in fields(Timings))


def test_the_start_up_paths_ask_the_one_derivation() -> None:
    c = parse_controls({"loop": {"control_period_s": 2.0}})
    assert timings_of(c) == derive_timings(2.0)
    assert c.sharding.effective_lease_s(2.0) == derive_timings(2.0).shard_lease_s
    c = parse_controls({"loop": {"control_period_s": 2.0}, "sharding": {"lease_s": 7.0}})
    assert timings_of(c) == derive_timings(2.0, 7.0)


def test_a_reload_from_10_to_1_s_that_components_hold_is_refused_with_a_warning() -> None:
    running = derive_timings(10.0)
    loop, timings, warnings = loop_on_reload(
        LoopSettings(control_period_s=1.0, lease_s=30.0), running, EVERY_TIMING, 0.0,
        sharded=True, lease_in_force_s=30.0)
    assert loop.control_period_s == 10.0 and timings == running
    (warning,) = warnings
    for named in ("control_period_s 10 s -> 1 s needs a restart", "shard_lease_s 15 -> 1.5",
                  "influx_timeout_ms 10000 -> 2000", "version_redis_timeout_s",
                  "the period stays 10 s"):
        assert named in warning


def test_a_reload_follows_when_nothing_running_holds_a_derived_timing() -> None:
    loop, timings, warnings = loop_on_reload(
        LoopSettings(control_period_s=1.0), derive_timings(10.0), LIVE, 0.0, sharded=False,
        lease_in_force_s=30.0)
    assert loop.control_period_s == 1.0 and timings == derive_timings(1.0) and warnings == []
    # A shard lease given explicitly does not move with the period.
    running = derive_timings(10.0, shard_lease_s=5.0)
    held = frozenset({"control_period_s", "shard_lease_s", "shard_redis_timeout_s"})
    loop, timings, warnings = loop_on_reload(
        LoopSettings(control_period_s=12.0), running, held, 5.0, sharded=True,
        lease_in_force_s=30.0)
    assert loop.control_period_s == 12.0 and timings.shard_lease_s == 5.0 and warnings == []


@pytest.mark.parametrize("period", [10.0, 1.0])
def test_never_a_shard_lease_at_or_above_the_weights_lease(period: float) -> None:
    """10 s -> 1 s with the weights lease cut to 10 s: the shard lease stays 15 s, so the
    weights lease stays too."""
    running = derive_timings(10.0)
    loop, timings, warnings = loop_on_reload(
        LoopSettings(control_period_s=period, lease_s=10.0), running, EVERY_TIMING, 0.0,
        sharded=True, lease_in_force_s=30.0)
    assert timings.shard_lease_s == 15.0 < loop.lease_s == 30.0
    assert any("controls.loop.lease_s 10 s refused" in w for w in warnings)


def test_the_sections_a_running_process_keeps_until_a_restart() -> None:
    old = parse_controls({})
    assert restart_only_changes(old, old) == []
    new = parse_controls({"mqtt": {"host": "elsewhere"}, "log_level": "DEBUG",
                          "loop": {"kpi_max_age_s": 7.0}, "e2": {"enabled": False}})
    assert restart_only_changes(old, new) == ["mqtt", "e2"]  # the log level and loop apply
    # The model's reload check is the loader's; its path is the connection's.
    later = replace(old, model=replace(old.model, reload_check_s=old.model.reload_check_s + 1))
    assert restart_only_changes(old, later) == []
    moved = replace(old, model=replace(old.model, path="/elsewhere/model"))
    assert restart_only_changes(old, moved) == ["model"]
