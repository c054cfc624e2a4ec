"""Every thread is supervised: a worker that dies is restarted (within a budget), one that is
stuck fails /ric/v1/health/alive, and the process notices within two control periods."""

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
from xapp.app.runner import TICK_DEADLINE_FLOOR_S, LoopRunner
from xapp.core.loop import ControlLoop, TickReport
from xapp.core.workers import Supervisor, Worker, WorkerState


class Die(BaseException):
    """What no ``except Exception`` catches: ends a worker's thread, as a bug in it would."""


def test_a_failing_step_is_counted_and_the_worker_carries_on() -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) <= 3:
            raise RuntimeError("dependency away")

    w = Worker("w", step, 0.01).start()
    try:
        wait_until(lambda: len(calls) >= 5, timeout_s=5)
        st = w.status()
        assert st.state is WorkerState.OK and st.failures == 3
        assert "dependency away" in st.last_error
    finally:
        assert w.stop()


KILLS_THREADS = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning")


@KILLS_THREADS
def test_a_dead_worker_is_restarted_until_the_budget_is_spent() -> None:
    may_die, died = threading.Semaphore(0), threading.Semaphore(0)

    def step() -> None:
        if may_die.acquire(timeout=0.05):
            died.release()
            raise Die

    sup = Supervisor(max_restarts=2, restart_window_s=60)
    w = sup.add(Worker("fragile", step, 0.01)).start()
    try:
        for restarts in (1, 2):
            may_die.release()
            assert died.acquire(timeout=5)
            wait_until(lambda: w.status().state is WorkerState.DEAD, timeout_s=5)
            assert sup.alive() and w.restarts == restarts  # restarted
        may_die.release()
        assert died.acquire(timeout=5)
        wait_until(lambda: w.status().state is WorkerState.DEAD, timeout_s=5)
        assert not sup.alive()  # out of budget: the pod must be restarted
        assert [s.state for s in sup.check()] == [WorkerState.DEAD]
    finally:
        w.stop()


def test_a_stuck_worker_fails_alive_and_recovers_when_it_moves_again() -> None:
    release = threading.Event()
    sup = Supervisor()
    w = sup.add(Worker("slow", lambda: release.wait(10), 0.01, deadline_s=0.2)).start()
    try:
        wait_until(lambda: not sup.alive(), timeout_s=5)
        assert [s.state for s in sup.check()] == [WorkerState.STUCK]
        release.set()
        wait_until(sup.alive, timeout_s=5)
    finally:
        release.set()
        w.stop()


def test_a_probe_that_fails_or_raises_is_dead() -> None:
    sup = Supervisor()
    state = {"ok": True}
    sup.watch("paho", lambda: state["ok"])
    sup.watch("broken", lambda: 1 / 0 == 0)
    assert [s.state for s in sup.check()] == [WorkerState.OK, WorkerState.DEAD]
    with pytest.raises(ValueError, match="already supervised"):
        sup.watch("paho", lambda: True)


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


def test_a_dead_probe_is_restarted_within_the_same_budget() -> None:
    thread: dict[str, Any] = {"alive": False, "starts": 0}

    def restart() -> None:
        thread["starts"] += 1
        thread["alive"] = True

    sup = Supervisor(max_restarts=2, restart_window_s=60)
    sup.watch("paho", lambda: thread["alive"], restart)
    for starts in (1, 2):
        thread["alive"] = False
        [status] = sup.check()
        assert status.state is WorkerState.OK and status.restarts == starts
    thread["alive"] = False
    assert not sup.alive() and thread["starts"] == 2  # out of budget


@KILLS_THREADS
def test_the_supervisor_restarts_on_its_own_clock_without_a_probe() -> None:
    """Issue 33 item 3: nothing asks /alive or /metrics here; the supervisor's thread does."""
    may_die, died = threading.Semaphore(0), threading.Semaphore(0)

    def step() -> None:
        if may_die.acquire(timeout=0.05):
            died.release()
            raise Die

    sup = Supervisor(max_restarts=2, restart_window_s=60)
    w = sup.add(Worker("fragile", step, 0.01)).start()
    sup.start(interval_s=0.02)
    try:
        may_die.release()
        assert died.acquire(timeout=5)
        assert wait_until(lambda: w.restarts == 1 and w.status().state is WorkerState.OK,
                          timeout_s=10)
        assert sup.worker is not None and sup.worker.status().state is WorkerState.OK
    finally:
        assert sup.stop()
        w.stop()


@KILLS_THREADS
def test_a_worker_that_degrades_a_component_keeps_alive_ok_past_its_budget() -> None:
    """Out of budget: a worker added with ``degrades`` costs its component, not the pod; when
    the window has room (the injected clock) it is tried again."""
    now = [50.0]
    may_die, died = threading.Semaphore(0), threading.Semaphore(0)

    def step() -> None:
        if may_die.acquire(timeout=0.05):
            died.release()
            raise Die

    sup = Supervisor(max_restarts=1, restart_window_s=60, clock=lambda: now[0])
    w = sup.add(Worker("decoder", step, 0.01), degrades="e2").start()
    a1 = sup.add(Worker("a1", lambda: None, 0.01)).start()
    degraded: list[str | None] = []
    w.degrade = degraded.append  # type: ignore[method-assign,assignment]
    try:
        may_die.release()
        assert died.acquire(timeout=5)
        assert wait_until(lambda: w.status().state is WorkerState.DEAD, timeout_s=5)
        assert sup.alive() and w.restarts == 1 and sup.degraded() == {}
        assert sup.degradable() == {"e2": False}
        may_die.release()
        assert died.acquire(timeout=5)
        assert wait_until(lambda: w.status().state is WorkerState.DEAD, timeout_s=5)
        states = {s.name: s.state for s in sup.check()}
        assert states == {"decoder": WorkerState.DEGRADED, "a1": WorkerState.OK}
        assert sup.alive() and sup.degradable() == {"e2": True}
        assert "decoder died 2 times within 60 s" in sup.degraded()["e2"]
        assert len(degraded) == 1 and degraded[0] is not None  # told once, not every check
        sup.check()
        assert len(degraded) == 1
        now[0] += 61
        sup.check()
        assert w.restarts == 2 and degraded[-1] is None and sup.degraded() == {}
    finally:
        w.stop()
        a1.stop()
