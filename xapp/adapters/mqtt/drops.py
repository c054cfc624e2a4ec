"""Counting (and logging, rate-limited) the payloads that are dropped."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

log = logging.getLogger(__name__)

#: Outside bytes end up in a drop's detail: at most this many characters of it are logged.
_LOG_CHARS: Final = 300


@dataclass
class DropCounter:
    """Counts (and logs) payloads dropped per (kind, reason); safe for concurrent use.

    Every drop is counted; the log is rate-limited per (kind, reason): the first drop at once,
    then at most one line per ``log_interval_s`` saying how many were not logged in between,
    so a CPE flooding garbage costs a line every few seconds, not one per message.
    """

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    log_interval_s: float = 10.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _logged_at: dict[tuple[str, str], float] = field(default_factory=dict, repr=False)
    _unlogged: Counter[tuple[str, str]] = field(default_factory=Counter, repr=False)

    def drop(self, kind: str, reason: str, detail: str, topic_name: str = "", *,
             exc_info: BaseException | None = None) -> None:
        key = (kind, reason)
        now = self.clock()
        with self._lock:
            self.counts[key] += 1
            last = self._logged_at.get(key)
            if last is not None and now - last < self.log_interval_s:
                self._unlogged[key] += 1
                return
            self._logged_at[key] = now
            skipped = self._unlogged.pop(key, 0)
        # Outside bytes end up in the detail (a schema message quotes the value): bounded.
        log.warning("dropped %s payload on %r: %s: %s%s", kind, topic_name[:_LOG_CHARS], reason,
                    detail[:_LOG_CHARS],
                    f" (and {skipped} more since the last report)" if skipped else "",
                    exc_info=exc_info)

    def total(self, kind: str | None = None) -> int:
        with self._lock:
            return sum(n for (k, _), n in self.counts.items() if kind is None or k == kind)

    def snapshot(self) -> dict[str, int]:
        """``{"kind/reason": count}`` for metrics and ``--json`` output."""
        with self._lock:
            return {f"{k}/{r}": n for (k, r), n in sorted(self.counts.items())}
