"""Workers and their supervisor: a failing step is counted, a dead worker restarted within a
budget, a stuck one fails alive until it moves again, probes watched, a component degraded
instead of the pod once its worker is out of budget."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.support.polling import wait_until
from xapp.core.workers import Supervisor, Worker, WorkerState


class Die(BaseException):
    """What no ``except Exception`` catches: ends a worker's thread, as a bug in it would."""


KILLS_THREADS = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning")


class Mortal:
    """A worker's step that dies (raises :class:`Die`) once for each ``may_die.release()``
    and says so on ``died``."""

    def __init__(self) -> None:
        self.may_die, self.died = threading.Semaphore(0), threading.Semaphore(0)

    def __call__(self) -> None:
        if self.may_die.acquire(timeout=0.05):
            self.died.release()
            raise Die


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


@KILLS_THREADS
def test_a_dead_worker_is_restarted_until_the_budget_is_spent() -> None:
    step = Mortal()
    may_die, died = step.may_die, step.died

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
    step = Mortal()
    may_die, died = step.may_die, step.died

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
    step = Mortal()
    may_die, died = step.may_die, step.died

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
