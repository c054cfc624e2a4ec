"""The thread that runs the control loop every control period."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

from xapp.core.loop import ControlLoop

log = logging.getLogger(__name__)

#: CPython's collector thresholds for the xApp process.  A tick over 10,000 CPEs allocates some
#: 10^5 short-lived objects; with the default (700, 10, 10) they set off a full collection of
#: the whole heap every few ticks, which took the tick's p99 from 64 to 92-127 ms in
#: ``bench/bench_tick.py``.  The loop's data makes few reference cycles, so collecting the old
#: generations rarely costs little memory.
GC_THRESHOLDS = (100_000, 50, 100)


def tune_gc() -> None:
    """Set :data:`GC_THRESHOLDS` and freeze what is alive (start-up objects are never scanned
    again); ``mcw run`` calls it once started, the benches before they measure."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class LoopRunner:
    """Runs :meth:`ControlLoop.tick` every ``control_period_s`` in a thread until stopped.

    Ticks are scheduled on the monotonic clock; a tick that overruns makes the next one start at
    once rather than queueing up missed ones.  A failing tick is logged and counted
    (``on_error``), the loop carries on.
    """

    def __init__(self, loop: ControlLoop, clock: Callable[[], float] = time.time,
                 on_error: Callable[[], None] | None = None) -> None:
        self.loop = loop
        self._clock = clock
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mcw-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        failing = 0
        while not self._stop.is_set():
            try:
                self.loop.tick(self._clock())
                if failing:
                    log.info("control ticks work again after %d failures", failing)
                failing = 0
            except Exception as exc:
                # A dependency outage fails every tick: the traceback once, then one line per
                # tick, so the log stays readable (the count is on /metrics).
                if failing == 0:
                    log.exception("control tick failed")
                else:
                    log.error("control tick failed again (%d in a row): %s", failing + 1, exc)
                failing += 1
                if self._on_error is not None:
                    self._on_error()
            period = self.loop.settings.control_period_s
            next_at = max(next_at + period, time.monotonic())
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Ask the loop to stop after the current tick; True if it stopped within the timeout."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
