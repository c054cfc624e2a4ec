"""Background workers and their supervisor: the one thread pattern of the xApp.

Every long-lived thread the xApp owns is a :class:`Worker`: a named loop that calls one
``step`` function every interval, catches and counts what the step raises (a failing
dependency must not end the loop), and records when each step starts and ends.  A
:class:`Supervisor` knows every worker, and also every thread the xApp does not own but
depends on (paho's network thread, RMR's receive thread) through a probe.

What a supervisor does about a worker, as OTP's one-for-one supervisors do:

* **dead** (its thread ended without being stopped: a ``BaseException`` out of a step, a bug
  in the loop): restarted, up to ``max_restarts`` within ``restart_window_s``; past that the
  worker stays dead and :meth:`Supervisor.alive` is False, so Kubernetes restarts the pod.
  A worker added with ``degrades=`` a component (the E2 decoder: ``"e2"``) is not worth the
  pod: past its budget it is ``degraded`` instead, healthy for :meth:`Supervisor.alive`,
  named by :meth:`Supervisor.degraded` (readiness, a metric), and tried again once the
  window has room.
* **stuck** (a step running longer than its deadline, or no step started for interval +
  deadline): a Python thread cannot be killed, so :meth:`Supervisor.alive` is False at once.
* a **probe** that answers False counts as dead, and is restarted like a worker when it was
  registered with a restart function.

:meth:`Supervisor.start` runs :meth:`Supervisor.check` on a thread of its own every
``interval_s``: a dead decoder process or MQTT loop is replaced within a second, not when
Kubernetes next asks ``/ric/v1/health/alive`` (15 s with the chart).  That thread is one of
the supervised workers: ``/ric/v1/health/alive`` and ``/metrics`` still run a check, which
restarts it if it died, and a supervising thread that stopped stepping is ``stuck`` there.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

log = logging.getLogger(__name__)


class WorkerState(StrEnum):
    OK = "ok"
    STUCK = "stuck"
    DEAD = "dead"
    STOPPED = "stopped"
    NOT_STARTED = "not-started"
    #: Out of its restart budget, but only its component is lost (``Supervisor.add(degrades=)``).
    DEGRADED = "degraded"


@dataclass(frozen=True)
class WorkerStatus:
    name: str
    state: WorkerState
    restarts: int
    failures: int
    #: Seconds since the last step ended (or since start when none has).
    idle_s: float
    last_error: str = ""
    #: For a :class:`QueueWorker`: items waiting, and items refused because the queue was full.
    queued: int = 0
    dropped: int = 0

    def describe(self) -> str:
        """The state as ``/ric/v1/health/alive`` shows it; a queue that dropped work says so."""
        return self.state.value + (f"; dropped {self.dropped}" if self.dropped else "")

    @property
    def healthy(self) -> bool:
        return self.state in (WorkerState.OK, WorkerState.STOPPED, WorkerState.NOT_STARTED,
                              WorkerState.DEGRADED)


class Worker:
    """Calls ``step()`` every ``interval_s`` seconds in a daemon thread until :meth:`stop`.

    Parameters
    ----------
    name : str
        Thread name, log and metric label.
    step : callable
        One unit of work; what it raises is logged and counted, and the loop carries on.
    interval_s : float or callable returning float
        Time between the starts of two steps (fixed rate: an overrunning step makes the next
        start at once rather than queueing missed ones).  A callable is read before each wait,
        so a configuration change applies at the next step.
    deadline_s : float or callable returning float, optional
        How long one step may take before the worker counts as stuck (default: ten intervals,
        at least 30 s).
    on_error : callable, optional
        Called with the exception after each failing step (metrics).
    """

    def __init__(self, name: str, step: Callable[[], object],
                 interval_s: float | Callable[[], float], *,
                 deadline_s: float | Callable[[], float] | None = None,
                 on_error: Callable[[BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._step = step
        self._interval = interval_s if callable(interval_s) else (lambda: float(interval_s))
        self._deadline = deadline_s if callable(deadline_s) or deadline_s is None \
            else (lambda: float(deadline_s))
        self._on_error = on_error
        self._clock = clock
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._busy_since: float | None = None
        self._last_end = 0.0
        self.failures = 0
        self._failing = 0
        self.restarts = 0
        self.last_error = ""

    def degrade(self, reason: str | None) -> None:
        """The supervisor gave up restarting this worker (``reason``), or tries again (None).
        A worker whose callers queue work for it drops that work here, counted."""

    @property
    def deadline_s(self) -> float:
        if self._deadline is not None:
            return self._deadline()
        return max(30.0, 10 * self._interval())

    def start(self) -> Worker:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._last_end = self._clock()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Run the next step now instead of at the end of the interval."""
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop after the current step; True if the thread ended within ``timeout_s``."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is None:
            return True
        if thread is not threading.current_thread():
            thread.join(timeout=timeout_s)
        return not thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def status(self) -> WorkerStatus:
        now = self._clock()
        thread = self._thread
        busy = self._busy_since
        idle = now - self._last_end
        if thread is None:
            state = WorkerState.NOT_STARTED
        elif self._stop.is_set():
            state = WorkerState.STOPPED
        elif not thread.is_alive():
            state = WorkerState.DEAD
        elif busy is not None and now - busy > self.deadline_s:
            state = WorkerState.STUCK
        elif busy is None and idle > self._interval() + self.deadline_s:
            state = WorkerState.STUCK  # not stepping, yet neither busy nor stopped
        else:
            state = WorkerState.OK
        return WorkerStatus(self.name, state, self.restarts, self.failures, max(0.0, idle),
                            self.last_error)

    def _run(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            self._busy_since = self._clock()
            try:
                self._step()
                if self._failing:
                    log.info("worker %s works again after %d failed steps", self.name,
                             self._failing)
                    self._failing = 0
            except BaseException as exc:
                if not isinstance(exc, Exception):  # ends the thread; the supervisor sees it
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    raise
                self.failures += 1
                self._failing += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                # A dependency outage fails every step: the traceback once, then one line each.
                if self._failing == 1:
                    log.exception("worker %s: step failed", self.name)
                else:
                    log.error("worker %s: step failed again (%d in a row): %s", self.name,
                              self._failing, self.last_error)
                if self._on_error is not None:
                    try:
                        self._on_error(exc)
                    except Exception:
                        log.exception("worker %s: error callback failed", self.name)
            finally:
                self._busy_since = None
                self._last_end = self._clock()
            next_at = max(next_at + self._interval(), self._clock())
            self._wake.wait(max(0.0, next_at - self._clock()))
            self._wake.clear()


T = TypeVar("T")


class QueueWorker(Worker, Generic[T]):
    """A worker that handles the items of a bounded queue, one per step.

    :meth:`offer` never blocks: a producer that must stay quick (RMR's dispatch thread) hands
    work over and returns; when the queue is full the item is dropped and counted, so a flood
    costs what it brings and nothing else waits behind it.

    Parameters
    ----------
    name : str
        Thread name, log and metric label.
    handle : callable
        Called with each item; what it raises is logged and counted like a failing step.
    maxsize : int
        Items the queue holds before :meth:`offer` drops.
    deadline_s : float, default=30.0
        How long handling one item may take before the worker counts as stuck.
    poll_s : float, default=0.5
        How long one step waits for an item (bounds how long :meth:`stop` waits).
    """

    def __init__(self, name: str, handle: Callable[[T], object], *, maxsize: int,
                 deadline_s: float = 30.0, poll_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if maxsize < 1:
            raise ValueError(f"a queue worker needs room for at least one item, got {maxsize}")
        self._handle = handle
        self._poll_s = poll_s
        self._items: queue.Queue[T] = queue.Queue(maxsize)
        self.maxsize = maxsize
        #: Items accepted by :meth:`offer`, and items it refused (queue full).
        self.accepted = 0
        self.dropped = 0
        super().__init__(name, self._next, 0.0, deadline_s=max(deadline_s, 2 * poll_s),
                         clock=clock)

    def offer(self, item: T) -> bool:
        """Queue ``item`` for the worker; False (and counted) when the queue is full."""
        try:
            self._items.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            return False
        self.accepted += 1
        return True

    def pending(self) -> int:
        return self._items.qsize()

    def workers(self) -> list[Worker]:
        """The threads to supervise: this one."""
        return [self]

    def drain(self) -> list[T]:
        """Take every item still waiting (after :meth:`stop`: what was never handled)."""
        items = []
        while True:
            try:
                items.append(self._items.get_nowait())
            except queue.Empty:
                return items

    def status(self) -> WorkerStatus:
        st = super().status()
        return WorkerStatus(st.name, st.state, st.restarts, st.failures, st.idle_s,
                            st.last_error, queued=self.pending(), dropped=self.dropped)

    def _next(self) -> None:
        try:
            item = self._items.get(timeout=self._poll_s)
        except queue.Empty:
            return
        self._handle(item)


#: How often the supervisor's own thread checks every worker and probe.
SUPERVISE_INTERVAL_S = 1.0


@dataclass
class _Probe:
    name: str
    healthy: Callable[[], bool]
    restart: Callable[[], object] | None
    restarts: int = 0


class Supervisor:
    """Knows every worker and probe; restarts dead workers within a budget; says if all live."""

    def __init__(self, max_restarts: int = 5, restart_window_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self._clock = clock
        self._workers: dict[str, Worker] = {}
        self._probes: dict[str, _Probe] = {}
        self._restarted_at: dict[str, list[float]] = {}
        #: worker name -> the component it degrades when out of budget, and why it is now
        self._degrades: dict[str, str] = {}
        self._degraded: dict[str, str] = {}
        self._lock = threading.Lock()
        self.worker: Worker | None = None

    def add(self, worker: Worker, *, degrades: str | None = None) -> Worker:
        """Supervise ``worker``; out of budget it fails :meth:`alive`, unless ``degrades``
        names the component that is lost instead (see the module's docstring)."""
        with self._lock:
            if worker.name in self._workers or worker.name in self._probes:
                raise ValueError(f"a worker named {worker.name!r} is already supervised")
            self._workers[worker.name] = worker
            if degrades is not None:
                self._degrades[worker.name] = degrades
        return worker

    def start(self, interval_s: float = SUPERVISE_INTERVAL_S,
              name: str = "mcw-supervisor") -> Worker:
        """Check every ``interval_s`` on a thread of its own (itself supervised)."""
        if self.worker is None:
            # A check restarts workers (a decoder process spawns in a few ms): the deadline
            # is for a check that hangs, which only a bug does.
            self.worker = self.add(Worker(name, self.check, interval_s, deadline_s=30.0,
                                          clock=self._clock))
        self.worker.start()
        return self.worker

    def stop(self, timeout_s: float = 5.0) -> bool:
        return True if self.worker is None else self.worker.stop(timeout_s)

    def degradable(self) -> dict[str, bool]:
        """Every component a worker was added to degrade -> whether it is degraded now."""
        now = self.degraded()
        with self._lock:
            return {c: c in now for c in sorted(set(self._degrades.values()))}

    def degraded(self) -> dict[str, str]:
        """Component -> why (a worker of it out of its restart budget); empty when none."""
        with self._lock:
            out: dict[str, str] = {}
            for name, reason in self._degraded.items():
                component = self._degrades[name]
                out[component] = f"{out[component]}; {reason}" if component in out else reason
            return out

    def watch(self, name: str, healthy: Callable[[], bool],
              restart: Callable[[], object] | None = None) -> None:
        """Supervise a thread that is not a :class:`Worker` (paho's network loop): ``healthy()``
        False (or raising) is dead; ``restart()``, when given, starts it again, within the
        same budget as a worker's restarts."""
        with self._lock:
            if name in self._workers or name in self._probes:
                raise ValueError(f"a worker named {name!r} is already supervised")
            self._probes[name] = _Probe(name, healthy, restart)

    def check(self) -> list[WorkerStatus]:
        """Every worker's status, after restarting the dead ones that are within budget."""
        with self._lock:
            out = [self._check_worker(w) for w in self._workers.values()]
            out.extend(self._check_probe(p) for p in self._probes.values())
        return out

    def alive(self) -> bool:
        return all(s.healthy for s in self.check())

    def _check_worker(self, worker: Worker) -> WorkerStatus:
        status = worker.status()
        if status.state is not WorkerState.DEAD:
            return status
        if not self._may_restart(worker.name):
            component = self._degrades.get(worker.name)
            if component is None:
                return status  # a dead worker stays dead: /alive fails, the pod restarts
            if worker.name not in self._degraded:
                reason = (f"{worker.name} died {self.max_restarts + 1} times within "
                          f"{self.restart_window_s:.0f} s ({status.last_error or 'no error'})")
                self._degraded[worker.name] = reason
                log.error("%s; %s degraded, the rest goes on (tried again when the "
                          "restart budget has room)", reason, component)
                worker.degrade(reason)
            return WorkerStatus(status.name, WorkerState.DEGRADED, status.restarts,
                                status.failures, status.idle_s, status.last_error,
                                status.queued, status.dropped)
        if self._degraded.pop(worker.name, None) is not None:
            log.warning("worker %s: restart budget has room again; trying it", worker.name)
            worker.degrade(None)
        worker.restarts += 1
        log.error("worker %s died (%s); restarting it", worker.name,
                  worker.last_error or "no error recorded")
        worker.start()
        return worker.status()

    def _check_probe(self, probe: _Probe) -> WorkerStatus:
        ok = self._probe_ok(probe)
        if not ok and probe.restart is not None and self._may_restart(probe.name):
            probe.restarts += 1
            log.error("thread %s died; restarting it", probe.name)
            try:
                probe.restart()
            except Exception:
                log.exception("restarting %s failed", probe.name)
            ok = self._probe_ok(probe)
        return WorkerStatus(probe.name, WorkerState.OK if ok else WorkerState.DEAD,
                            probe.restarts, 0, 0.0)

    def _may_restart(self, name: str) -> bool:
        """Spend one restart of ``name``'s budget; False when it is used up (a thread that
        dies again at once would otherwise be restarted forever, hiding the fault)."""
        now = self._clock()
        recent = [t for t in self._restarted_at.get(name, []) if now - t < self.restart_window_s]
        self._restarted_at[name] = recent
        if len(recent) >= self.max_restarts:
            return False
        recent.append(now)
        return True

    @staticmethod
    def _probe_ok(probe: _Probe) -> bool:
        try:
            return bool(probe.healthy())
        except Exception as exc:
            log.debug("probe %s raised: %s", probe.name, exc)
            return False
