"""The worker that runs the control loop every control period, and the GC settings."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

from xapp.core.loop import ControlLoop
from xapp.core.timings import derive_timings
from xapp.core.workers import Worker

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


class LoopRunner(Worker):
    """The supervised worker that runs :meth:`ControlLoop.tick` every control period.

    Ticks are scheduled on the monotonic clock; a tick that overruns makes the next one start at
    once rather than queueing up missed ones.  A failing tick is logged and counted
    (``on_error``), the loop carries on.  A tick that runs longer than two periods (at least
    :data:`xapp.core.timings.TICK_DEADLINE_FLOOR_S`) makes the worker stuck, which fails
    ``/ric/v1/health/alive``.
    """

    def __init__(self, loop: ControlLoop, clock: Callable[[], float] = time.time,
                 on_error: Callable[[], None] | None = None, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        # ``clock`` stamps the ticks (wall time, as the KPIs are); ``monotonic`` schedules them
        # and times the deadline, so a test can run a hung tick past it without waiting.
        self.loop = loop

        def period() -> float:
            return float(loop.settings.control_period_s)

        super().__init__("mcw-loop", lambda: loop.tick(clock()), period,
                         deadline_s=lambda: derive_timings(period()).tick_deadline_s,
                         on_error=None if on_error is None else (lambda _exc: on_error()),
                         clock=monotonic)
