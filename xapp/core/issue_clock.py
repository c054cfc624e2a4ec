"""The clock that stamps ``issued_at_ms`` on weights: it never goes back, across owners too.

An agent orders updates by issue time first and version second
(``kernel-agent/lease/lease.go``): an update issued before the last one it applied is stale,
whatever its version.  So a replica whose clock is behind the previous owner's would have
every update refused until its clock caught up, and the agents would fall back to safe
weights when their lease ended (issue 33).  The issue clock is therefore the maximum of:

* this host's wall clock;
* a *reference*: SDL's Redis clock (``TIME``), sampled by a round trip and carried forward on
  this host's monotonic clock, so every replica issues on one clock whatever its own says;
* a *floor*: what the previous holders of the shards this replica acquired may have issued
  (left in the lease table, :mod:`xapp.adapters.shard_leases`), for when the reference is
  missing or wrong;
* the last value it returned (a wall clock stepped back does not step the issue times back).

Only the first can go back; the maximum with the others cannot.  The clock is biased ahead on
purpose: an issue time a little ahead of an agent's clock costs nothing (the agent allows a
skew, and a lease never lasts beyond its own clock plus the lease), one behind shortens the
lease or is refused.  :meth:`skew_s` names this host's skew against the reference for the
metric ``mcw_clock_skew_seconds`` and the log.

Pure but for the two injected clocks; thread-safe.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

#: A reference sample whose round trip took longer than this is not taken: its error (half
#: the round trip) would be larger than the ordering it is meant to keep.
MAX_SAMPLE_RTT_S = 0.25


class IssueClock:
    """Issue times in Unix ms; see the module's docstring."""

    def __init__(self, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        self._wall = wall
        self._mono = mono
        self._lock = threading.Lock()
        self._ref: tuple[float, float] | None = None  # (reference ms, monotonic s) at sampling
        self._skew_s: float | None = None
        self._floor = 0
        self._last = 0
        #: Reference samples refused for a round trip over MAX_SAMPLE_RTT_S.
        self.slow_samples = 0

    def sample(self, reference_ms: float, sent_mono: float, received_mono: float,
               sent_wall: float, received_wall: float) -> bool:
        """Take a reading of the reference (``reference_ms``, Unix ms) made between
        ``sent_*`` and ``received_*`` (this host's monotonic and wall seconds); it is placed at
        the middle of the round trip.  Returns whether it was taken."""
        rtt = received_mono - sent_mono
        if not 0 <= rtt <= MAX_SAMPLE_RTT_S or not math.isfinite(reference_ms):
            with self._lock:
                self.slow_samples += 1
            return False
        mid_mono = (sent_mono + received_mono) / 2
        mid_wall = (sent_wall + received_wall) / 2
        with self._lock:
            self._ref = (float(reference_ms), mid_mono)
            self._skew_s = mid_wall - reference_ms / 1000.0
        return True

    def read_reference(self, read_ms: Callable[[], float]) -> bool:
        """Take a reading of the reference by calling ``read_ms`` (Unix ms; it may raise),
        timed on this clock's own wall and monotonic clocks."""
        sent_mono, sent_wall = self._mono(), self._wall()
        reference_ms = read_ms()
        return self.sample(reference_ms, sent_mono, self._mono(), sent_wall, self._wall())

    def raise_floor(self, issued_ms: int) -> None:
        """Never issue below ``issued_ms`` again (a previous holder's issue time)."""
        with self._lock:
            self._floor = max(self._floor, int(issued_ms))

    def reference_ms(self) -> float | None:
        with self._lock:
            ref = self._ref
        if ref is None:
            return None
        return ref[0] + (self._mono() - ref[1]) * 1000.0

    def skew_s(self) -> float | None:
        """This host's wall clock minus the reference at the last sample (None before one):
        negative when this host is behind."""
        with self._lock:
            return self._skew_s

    def now_ms(self) -> int:
        """The issue time for weights sent now."""
        wall = int(self._wall() * 1000)
        ref = self.reference_ms()
        with self._lock:
            value = max(wall, self._floor, self._last)
            if ref is not None:
                value = max(value, int(ref))
            self._last = value
            return value

    def last_ms(self) -> int:
        """The last issue time returned (0 before any)."""
        with self._lock:
            return self._last
