"""Other writers' ``wat_kpi`` points (RAN KPI exporters, other replicas) polled from InfluxDB into
the intake: :class:`InfluxIntake`."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from xapp.adapters.influx.store import InfluxStore
from xapp.core.forecast import KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.kpis import KPI_FIELDS, cell_code
from xapp.core.timings import derive_timings
from xapp.core.workers import Worker


class InfluxIntake:
    """Feeds :class:`~xapp.core.intake.LatestKpis` with ``wat_kpi`` points as they reach InfluxDB.

    Each poll reads only what is new since the previous one (with ``overlap_s`` of slack for
    points that arrive late; re-reading a point changes nothing in the intake).  ``fields``
    (default: every ``wat_kpi`` field) may limit the read, e.g. to the RAN KPIs when every
    replica receives all agent telemetry over MQTT directly (:data:`~xapp.core.kpis.
    AGENT_FIELDS` then need not be read back).  Runs in its own thread; a failing or hung
    InfluxDB delays these KPIs (they age out of the intake) but never a tick.
    """

    def __init__(self, store: InfluxStore, intake: LatestKpis,
                 fields: tuple[str, ...] | None = None, *, interval_s: float = 1.0,
                 overlap_s: float = 2.0, lookback_s: float = 10.0,
                 clock: Callable[[], float] = time.time,
                 accept: Callable[[list[str]], NDArray[np.bool_]] | None = None) -> None:
        self.store = store
        #: Which rows (by CPE id) go into the intake; None: every row (one replica).
        self.accept = accept
        self.intake = intake
        self.fields = fields
        self.interval_s = interval_s
        self.overlap_s = overlap_s
        self.lookback_s = lookback_s
        self.clock = clock
        self.polls = 0
        self.rows_read = 0
        self._newest: float | None = None
        #: Polls every ``interval_s``; a failed poll (InfluxDB away or answering garbage) is
        #: logged and counted by the worker, and the next one tries again.
        self.worker = Worker("influx-intake", self.poll_once, interval_s)

    @classmethod
    def for_period(cls, store: InfluxStore, intake: LatestKpis, period_s: float,
                   fields: tuple[str, ...] | None = None,
                   clock: Callable[[], float] = time.time,
                   accept: Callable[[list[str]], NDArray[np.bool_]] | None = None
                   ) -> InfluxIntake:
        """The intake as ``mcw run`` sets it up for a control period.

        It polls once per period (at most once a second: InfluxDB's per-query cost grows with
        the number of series, not with the window) and re-reads two polls back, which covers
        writers that flush once per period as this xApp's replicas do
        (:func:`flush_interval_s`). The re-read window follows the period rather than a fixed
        2 s, which at a 0.2 s period re-read every point ten times.
        """
        t = derive_timings(period_s)
        return cls(store, intake, fields, interval_s=t.intake_poll_s,
                   overlap_s=t.intake_overlap_s, clock=clock, accept=accept)

    def poll_once(self) -> int:
        """Read what is new and merge it into the intake; returns the rows read."""
        now = self.clock()
        start = (now - self.lookback_s if self._newest is None
                 else max(now - self.lookback_s, self._newest - self.overlap_s))
        df = self.store.read_table(start=_rfc3339(start), stop=_rfc3339(now + 1e-3),
                                   fields=self.fields, not_writer=self.store.config.writer)
        self.polls += 1
        if len(df) and self.accept is not None:
            # What other replicas' shards had is read too: the next poll starts after it.
            self._newest = float(df["time_s"].max())
            df = df[self.accept(df["cpe"].astype(str).tolist())]
        if len(df) == 0:
            return 0
        values = self.store.clean_kpis(
            {f: pd.to_numeric(df[f], errors="coerce").to_numpy(dtype=np.float64)
             for f in KPI_FIELDS if f in df})
        cells, which = np.unique(df["cell"].to_numpy(dtype=str), return_inverse=True)
        values["cell_id"] = np.array([cell_code(c) for c in cells.tolist()],
                                     dtype=np.float64)[which]
        times = df["time_s"].to_numpy(dtype=np.float64)
        frame = KpiFrame(time_s=float(times.max()), cpe=df["cpe"].to_numpy(dtype=str),
                         wat=df["wat"].to_numpy(dtype=str), values=values,
                         direction=df["direction"].to_numpy(dtype=str))
        self.intake.update(frame, times=times)
        self._newest = float(times.max())
        self.rows_read += len(df)
        return len(df)

    def start(self) -> Worker:
        return self.worker.start()

    def stop(self) -> None:
        self.worker.stop(timeout_s=5.0)


def _rfc3339(t: float) -> str:
    return str(pd.Timestamp(t, unit="s", tz="UTC").isoformat()).replace("+00:00", "Z")
