"""Issue 33, item 9: every timing follows the control period, or a reload says it cannot."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from tests.xapp.app.test_process import CONTROLS, lab_process, write_config
from xapp.app import runtime as main
from xapp.app.config import load_config, parse_controls
from xapp.core.loop import LoopSettings
from xapp.core.timings import LIVE, Timings, derive_timings

EVERY_TIMING = frozenset(f.name for f in fields(Timings))


def test_one_function_derives_every_timing() -> None:
    assert asdict(derive_timings(10.0)) == {
        "control_period_s": 10.0, "shard_lease_s": 15.0, "shard_redis_timeout_s": 3.0,
        "version_redis_timeout_s": 1.0, "influx_timeout_ms": 10_000, "influx_flush_s": 1.0,
        "intake_poll_s": 1.0, "intake_overlap_s": 2.0}
    assert asdict(derive_timings(0.2)) == {
        "control_period_s": 0.2, "shard_lease_s": 1.0, "shard_redis_timeout_s": 0.2,
        "version_redis_timeout_s": 0.25, "influx_timeout_ms": 1_000, "influx_flush_s": 0.2,
        "intake_poll_s": 0.2, "intake_overlap_s": 0.4}
    assert derive_timings(1.0, shard_lease_s=4.0).shard_lease_s == 4.0
    # The start-up paths ask the same function.
    c = parse_controls({"loop": {"control_period_s": 2.0}})
    assert main.timings_of(c) == derive_timings(2.0)
    assert c.sharding.effective_lease_s(2.0) == derive_timings(2.0).shard_lease_s


def test_a_reload_from_10_to_1_s_that_components_hold_is_refused_with_a_warning() -> None:
    running = derive_timings(10.0)
    loop, timings, warnings = main.loop_on_reload(
        LoopSettings(control_period_s=1.0, lease_s=30.0), running, EVERY_TIMING, 0.0,
        sharded=True, lease_in_force_s=30.0)
    assert loop.control_period_s == 10.0 and timings == running
    (warning,) = warnings
    for named in ("control_period_s 10 s -> 1 s needs a restart", "shard_lease_s 15 -> 1.5",
                  "influx_timeout_ms 10000 -> 2000", "version_redis_timeout_s",
                  "the period stays 10 s"):
        assert named in warning


def test_a_reload_follows_when_nothing_running_holds_a_derived_timing() -> None:
    loop, timings, warnings = main.loop_on_reload(
        LoopSettings(control_period_s=1.0), derive_timings(10.0), LIVE, 0.0, sharded=False,
        lease_in_force_s=30.0)
    assert loop.control_period_s == 1.0 and timings == derive_timings(1.0) and warnings == []
    # A shard lease given explicitly does not move with the period.
    running = derive_timings(10.0, shard_lease_s=5.0)
    held = frozenset({"control_period_s", "shard_lease_s", "shard_redis_timeout_s"})
    loop, timings, warnings = main.loop_on_reload(
        LoopSettings(control_period_s=12.0), running, held, 5.0, sharded=True,
        lease_in_force_s=30.0)
    assert loop.control_period_s == 12.0 and timings.shard_lease_s == 5.0 and warnings == []


@pytest.mark.parametrize("period", [10.0, 1.0])
def test_never_a_shard_lease_at_or_above_the_weights_lease(period: float) -> None:
    """10 s -> 1 s with the weights lease cut to 10 s: the shard lease stays 15 s, so the
    weights lease stays too."""
    running = derive_timings(10.0)
    loop, timings, warnings = main.loop_on_reload(
        LoopSettings(control_period_s=period, lease_s=10.0), running, EVERY_TIMING, 0.0,
        sharded=True, lease_in_force_s=30.0)
    assert timings.shard_lease_s == 15.0 < loop.lease_s == 30.0
    assert any("controls.loop.lease_s 10 s refused" in w for w in warnings)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[main.XappProcess, Path]]:
    proc = lab_process(tmp_path, 10.0)
    config = tmp_path / "config-file.json"
    try:
        yield proc, config
    finally:
        proc.stop(5)


def _reload(proc: main.XappProcess, config: Path, period: float) -> None:
    old = proc.config
    write_config(config, {**CONTROLS, "loop": {**CONTROLS["loop"], "control_period_s": period}})
    proc._on_config(old, load_config(config))


def test_a_lab_process_follows_a_new_period_whole(lab: tuple[main.XappProcess, Path]) -> None:
    proc, config = lab
    assert proc.timings_in_use() == LIVE  # no InfluxDB, Redis or shards: nothing else held
    _reload(proc, config, 1.0)
    assert proc.loop is not None and proc.loop.settings.control_period_s == 1.0
    assert proc.timings == derive_timings(1.0)
    assert proc.config_view()["timings"] == asdict(derive_timings(1.0))


def test_a_process_holding_derived_timings_keeps_its_period_and_says_why(
        lab: tuple[main.XappProcess, Path], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before issue 33 the loop took 1 s while the InfluxDB timeout, flush and intake kept
    10 s's values, and nothing was logged."""
    proc, config = lab
    monkeypatch.setattr(proc, "timings_in_use", lambda: EVERY_TIMING - {"shard_lease_s"})
    with caplog.at_level(logging.WARNING, logger="xapp.app.runtime"):
        _reload(proc, config, 1.0)
    assert proc.loop is not None and proc.loop.settings.control_period_s == 10.0
    assert proc.timings == derive_timings(10.0)
    assert any("needs a restart" in r.getMessage()
               and "influx_timeout_ms 10000 -> 2000" in r.getMessage() for r in caplog.records)
    # Other loop settings of the same reload still apply.
    old = proc.config
    write_config(config, {**CONTROLS, "loop": {**CONTROLS["loop"], "control_period_s": 10.0,
                                               "kpi_max_age_s": 7.0}})
    proc._on_config(old, load_config(config))
    assert proc.loop.settings.kpi_max_age_s == 7.0

