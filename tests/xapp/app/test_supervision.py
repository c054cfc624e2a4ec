"""The process's threads are supervised: /ric/v1/health/alive names every worker, a hung tick
fails it at its deadline, a killed loop is noticed, restarted and counted (the workers and the
supervisor alone: tests/xapp/core/test_workers.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.support.polling import wait_until
from tests.xapp.app.test_process import get, lab_process
from xapp.app.process import XappProcess
from xapp.app.runner import LoopRunner
from xapp.core.loop import ControlLoop, TickReport
from xapp.core.timings import TICK_DEADLINE_FLOOR_S
from xapp.core.workers import WorkerState


class Die(BaseException):
    """What no ``except Exception`` catches: ends a worker's thread, as a bug in it would."""


KILLS_THREADS = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture
def process(tmp_path: Path) -> Iterator[XappProcess]:
    proc = lab_process(tmp_path, 0.5)
    try:
        yield proc
    finally:
        proc.stop(5)


def alive(proc: XappProcess) -> tuple[int, dict[str, Any]]:
    assert proc.http is not None
    code, body = get(proc.http.port, "/ric/v1/health/alive")
    return code, json.loads(body)


def test_alive_names_every_worker(process: XappProcess) -> None:
    code, body = alive(process)
    assert code == 200 and body["alive"] is True
    assert {"mcw-loop", "mcw-config"} <= set(body["workers"])


def test_a_hung_tick_fails_alive_at_its_deadline(process: XappProcess) -> None:
    assert process.loop is not None
    hang, hung = threading.Event(), threading.Event()
    real_tick = process.loop.tick

    def hung_tick(now: float) -> TickReport:
        hung.set()
        hang.wait(30)
        return real_tick(now)

    process.loop.tick = hung_tick  # type: ignore[method-assign,assignment]
    assert hung.wait(5)
    # When exactly is test_a_hung_tick_is_stuck_exactly_past_its_deadline's, on a fake clock.
    assert wait_until(lambda: alive(process)[0] == 503, timeout_s=10)
    assert alive(process)[1]["workers"]["mcw-loop"] == "stuck"
    process.loop.tick = real_tick  # type: ignore[method-assign]
    hang.set()
    assert wait_until(lambda: alive(process)[0] == 200, timeout_s=10)


@pytest.mark.parametrize(("period_s", "deadline_s"), [(0.5, TICK_DEADLINE_FLOOR_S), (1.5, 3.0)])
def test_a_hung_tick_is_stuck_exactly_past_its_deadline(period_s: float,
                                                       deadline_s: float) -> None:
    """Two control periods, at least TICK_DEADLINE_FLOOR_S, on the runner's own clock."""
    now = [1000.0]
    hang, hung = threading.Event(), threading.Event()

    class HangingLoop:
        settings = SimpleNamespace(control_period_s=period_s)

        def tick(self, _now: float) -> None:
            hung.set()
            hang.wait(30)

    runner = LoopRunner(cast(ControlLoop, HangingLoop()), monotonic=lambda: now[0]).start()
    try:
        assert hung.wait(5)
        now[0] += deadline_s - 0.01
        assert runner.status().state is WorkerState.OK
        now[0] += 0.02
        assert runner.status().state is WorkerState.STUCK
    finally:
        hang.set()
        assert runner.stop(timeout_s=5)


@KILLS_THREADS
def test_a_killed_loop_is_noticed_restarted_and_counted(process: XappProcess) -> None:
    assert process.loop is not None and process.runner is not None
    real_tick = process.loop.tick
    killed = threading.Event()

    def fatal_tick(now: float) -> TickReport:
        if not killed.is_set():
            killed.set()
            raise Die("killed by the test")
        return real_tick(now)

    process.loop.tick = fatal_tick  # type: ignore[method-assign,assignment]
    assert killed.wait(5)
    assert wait_until(lambda: process.runner is not None
                      and not process.runner.status().healthy, timeout_s=10)
    code, body = alive(process)  # the probe finds it dead and restarts it
    assert code == 200 and body["workers"]["mcw-loop"] == "ok"
    assert process.runner.restarts == 1 and "killed by the test" in process.runner.last_error
    before = process.loop.last_tick_monotonic
    # The restarted loop ticks again (the probe restarted it; no period is waited for).
    assert wait_until(lambda: process.loop is not None
                      and process.loop.last_tick_monotonic != before, timeout_s=10)
    assert process.http is not None
    _, metrics = get(process.http.port, "/metrics")
    assert b'mcw_worker_restarts_total{worker="mcw-loop"} 1.0' in metrics


