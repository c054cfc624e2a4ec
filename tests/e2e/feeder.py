"""KPIs of a twin scenario replayed in real time into InfluxDB, as a KPI exporter would write them.

Each CPE replays the scenario's capacity trace (``wifi-walk`` by default) from its own offset, so
the fleet does not move in lock step; every other radio KPI stays at the paper's testbed values
(:data:`tests.integration.stack.BASE_KPIS`).  Every acknowledged write (HTTP 204) is counted, so
the report can prove that no acknowledged KPI point went missing.
"""

from __future__ import annotations

import time

import numpy as np

from tests.integration.stack import KpiFeeder
from tests.support.influxd import InfluxServer
from twin.scenarios import build


class ScenarioFeeder(KpiFeeder):
    """A :class:`KpiFeeder` whose ``delivered_mbps`` follows a twin scenario's capacities."""

    def __init__(self, server: InfluxServer, cpes: list[str], scenario: str = "wifi-walk",
                 period_s: float = 0.5, seed: int = 0) -> None:
        super().__init__(server, cpes, period_s)
        sc = build(scenario, seed=seed)
        self.wats = sc.wats
        self.capacity = np.asarray(sc.capacity("dl")[:, 0, :])  # (steps, wats), Mbps
        self.dt_s = sc.dt_s
        self.t0 = time.monotonic()
        self.offsets = [(i * 97) % len(self.capacity) for i in range(len(cpes))]
        self.cpes = cpes

    def lines(self, time_ns: int) -> list[str]:
        step = int((time.monotonic() - self.t0) / self.dt_s)
        with self.lock:
            for cpe, off in zip(self.cpes, self.offsets, strict=True):
                row = self.capacity[(step + off) % len(self.capacity)]
                for wat, cap in zip(self.wats, row, strict=True):
                    if wat in self.kpis[cpe]:
                        self.kpis[cpe][wat]["delivered_mbps"] = round(float(cap), 1)
        return super().lines(time_ns)

    def acked_points(self, wat: str = "nr") -> int:
        """``wat_kpi`` points of ``wat`` InfluxDB acknowledged with 204 (each write carries
        one per CPE)."""
        return self.written * sum(1 for w in self.kpis.values() if wat in w)
