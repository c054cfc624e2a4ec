"""The intake: an in-memory table of the newest KPIs per (CPE, WAT, direction), read by every tick.

Sources push into it as data arrives (MQTT agent telemetry from the subscriber's thread, RAN KPIs
from the incremental InfluxDB reader, the twin's agents); the control loop's tick reads a
snapshot (:meth:`LatestKpis.latest`, the :class:`~xapp.core.ports.KpiSource` protocol) without
any I/O, so a slow or hung InfluxDB or broker cannot stretch a tick.

Each field of each row keeps its own time: RAN KPIs and subflow telemetry arrive as separate
points, and the newest of one must not hide the other.  A field older than ``max_age_s`` reads
as NaN; a row whose every field is that old is dropped from the table.  A point older than the
value already held is ignored, so feeding the same point twice (say, telemetry read back from
InfluxDB) changes nothing.  While the set of rows does not change, every snapshot returns the
same ``cpe``, ``wat``, ``direction`` and ``series`` arrays, so per-row state downstream
(estimators, the loop's row map) is realigned only when CPEs come or go.

Rows are keyed (cpe, wat, direction) with direction ``dl`` or ``ul``.  A row that comes without
a direction (radio KPIs: RSRP, SINR and the like describe the link, not a direction; InfluxDB
points written before directions existed) is written into both the ``dl`` and the ``ul`` row, so
each direction's row joins the link's radio KPIs with its own delivered throughput.
"""

from __future__ import annotations

import threading

import numpy as np
from numpy.typing import NDArray

from xapp.core.forecast import KpiFrame, expansion, series_of

Array = NDArray[np.float64]


class LatestKpis:
    """Newest value and time of every field per (cpe, wat, direction); safe for concurrent use.

    Parameters
    ----------
    max_rows : int, default=1_000_000
        Rows (CPE x WAT x direction) the table holds; rows beyond it are refused and counted
        in :attr:`dropped_rows` (a flood of made-up CPE ids must not exhaust memory).
    """

    def __init__(self, max_rows: int = 1_000_000) -> None:
        self.max_rows = max_rows
        self.dropped_rows = 0
        self._lock = threading.Lock()
        self._index: dict[tuple[str, str, str], int] = {}
        self._cpe: list[str] = []
        self._wat: list[str] = []
        self._dir: list[str] = []
        self._fields: dict[str, int] = {}
        self._values = np.full((0, 0), np.nan)
        self._times = np.full((0, 0), -np.inf)
        self._keys: tuple[NDArray[np.str_], ...] | None = None
        #: The (cpe, wat, direction) arrays of the last frame merged, and where its rows went.
        self._last_frame: tuple[object, object, object, _Placement] | None = None

    def __len__(self) -> int:
        return len(self._cpe)

    def update(self, frame: KpiFrame, times: Array | None = None) -> None:
        """Merge the rows of ``frame``, taken at ``times`` (per row) or the frame's own
        (:meth:`KpiFrame.row_times`); a row without a direction goes into the ``dl`` and the
        ``ul`` row of its (cpe, wat)."""
        if len(frame) == 0:
            return
        with self._lock:
            place = self._rows(frame)
            src, rows = place.src, place.rows
            t = (frame.row_times() if times is None
                 else np.asarray(times, dtype=np.float64))[src]
            for name, col in frame.values.items():
                j = self._field(name)
                r = rows
                v = np.asarray(col, dtype=np.float64)[src]
                fresh = np.isfinite(v) & (self._times[r, j] <= t)
                # (duplicate rows in one frame: the last one wins, as numpy assignment does)
                self._values[r[fresh], j] = v[fresh]
                self._times[r[fresh], j] = t[fresh]

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        """The table at ``now_s``: fields older than ``max_age_s`` are NaN."""
        with self._lock:
            self._evict(now_s - max_age_s)
            if self._keys is None:
                cpe = np.array(self._cpe, dtype=np.str_)
                direction = np.array(self._dir, dtype="<U2")
                self._keys = (cpe, np.array(self._wat, dtype=np.str_), direction,
                              series_of(cpe, direction))
            n = len(self._cpe)
            old = self._times[:n] < now_s - max_age_s
            values = np.where(old, np.nan, self._values[:n])
            cpe, wat, direction, series = self._keys
            return KpiFrame(time_s=now_s, cpe=cpe, wat=wat,
                            values={name: values[:, j] for name, j in self._fields.items()},
                            direction=direction, series=series)

    # --- internals (under the lock) ------------------------------------------------------------

    def _field(self, name: str) -> int:
        j = self._fields.get(name)
        if j is None:
            j = self._fields[name] = len(self._fields)
            rows = self._values.shape[0]
            self._values = np.concatenate([self._values, np.full((rows, 1), np.nan)], axis=1)
            self._times = np.concatenate([self._times, np.full((rows, 1), -np.inf)], axis=1)
        return j

    def _rows(self, frame: KpiFrame) -> _Placement:
        last = self._last_frame
        if (last is not None and last[0] is frame.cpe and last[1] is frame.wat
                and last[2] is frame.direction):
            return last[3]  # the same row arrays as last time (the twin's agents)
        take, direction = expansion(frame.direction, len(frame))
        rows = np.empty(len(take), dtype=np.intp)
        cpe, wat = frame.cpe.tolist(), frame.wat.tolist()
        for i, (s, d) in enumerate(zip(take.tolist(), direction.tolist(), strict=True)):
            key = (cpe[s], wat[s], d)
            r = self._index.get(key)
            if r is None:
                r = self._add(key)
            rows[i] = r
        keep = rows >= 0
        place = _Placement(take[keep], rows[keep])
        self._last_frame = (frame.cpe, frame.wat, frame.direction, place)
        return place

    def _add(self, key: tuple[str, str, str]) -> int:
        if len(self._cpe) >= self.max_rows:
            self.dropped_rows += 1
            return -1
        r = len(self._cpe)
        if r >= self._values.shape[0]:
            grow = max(16, r)
            width = self._values.shape[1]
            self._values = np.concatenate([self._values, np.full((grow, width), np.nan)])
            self._times = np.concatenate([self._times, np.full((grow, width), -np.inf)])
        self._index[key] = r
        self._cpe.append(key[0])
        self._wat.append(key[1])
        self._dir.append(key[2])
        self._keys = None
        return r

    def _evict(self, cutoff: float) -> None:
        n = len(self._cpe)
        if n == 0:
            return
        newest = self._times[:n].max(axis=1) if self._times.shape[1] else np.full(n, -np.inf)
        alive = newest >= cutoff
        if alive.all():
            return
        keep = np.flatnonzero(alive)
        self._values = self._values[keep]
        self._times = self._times[keep]
        self._cpe = [self._cpe[i] for i in keep.tolist()]
        self._wat = [self._wat[i] for i in keep.tolist()]
        self._dir = [self._dir[i] for i in keep.tolist()]
        self._index = {key: i for i, key in enumerate(
            zip(self._cpe, self._wat, self._dir, strict=True))}
        self._keys = None
        self._last_frame = None


class _Placement:
    """Where the rows of a frame go: frame row ``src[i]`` into table row ``rows[i]`` (a row
    without a direction appears twice, once per direction; refused rows not at all)."""

    __slots__ = ("rows", "src")

    def __init__(self, src: NDArray[np.intp], rows: NDArray[np.intp]) -> None:
        self.src = src
        self.rows = rows
