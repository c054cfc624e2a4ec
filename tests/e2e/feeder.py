"""KPIs of a twin scenario replayed in real time into InfluxDB, as a KPI exporter would write them.

Each CPE replays the scenario's capacity trace (``wifi-walk`` by default) from its own offset, so
the fleet does not move in lock step; every other radio KPI stays at the paper's testbed values
(:data:`tests.integration.stack.BASE_KPIS`).  Every acknowledged write (HTTP 204) is counted, so
the report can prove that no acknowledged KPI point went missing.

The CPE of the real MPTCP connection is not replayed: its rows are its own WATs, each reporting
the rate its shaped link carries while the CPE's interface is up and 0 while it is down, read
from the interface itself every period, as the radio's own exporter would.
"""

from __future__ import annotations

import json
import subprocess
import time

import numpy as np

from tests.e2e.netns import Topology
from tests.integration.stack import BASE_KPIS, KpiFeeder
from tests.support.influxd import InfluxServer
from twin.scenarios import build


class ScenarioFeeder(KpiFeeder):
    """A :class:`KpiFeeder` whose ``delivered_mbps`` follows a twin scenario's capacities."""

    def __init__(self, server: InfluxServer, cpes: list[str], scenario: str = "wifi-walk",
                 period_s: float = 0.5, seed: int = 0,
                 real: tuple[str, Topology] | None = None) -> None:
        super().__init__(server, cpes, period_s)
        self.real = real
        if real is not None:
            self.kpis[real[0]] = {p.wat: dict(BASE_KPIS[p.wat]) for p in real[1].paths}
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
                if self.real is not None and cpe == self.real[0]:
                    continue
                row = self.capacity[(step + off) % len(self.capacity)]
                for wat, cap in zip(self.wats, row, strict=True):
                    if wat in self.kpis[cpe]:
                        self.kpis[cpe][wat]["delivered_mbps"] = round(float(cap), 1)
        if self.real is not None:
            cpe, topo = self.real
            up = self._links_up(topo)
            with self.lock:
                for p in topo.paths:
                    self.kpis[cpe][p.wat]["delivered_mbps"] = float(p.mbit) if up.get(p.ifc) \
                        else 0.0
        return super().lines(time_ns)

    @staticmethod
    def _links_up(topo: Topology) -> dict[str, bool]:
        """Whether each of the CPE's interfaces is up, from the kernel (``ip -j link``)."""
        try:
            out = subprocess.run(["ip", "-n", topo.cpe, "-j", "link", "show"],
                                 capture_output=True, timeout=5, check=True).stdout
            return {str(link["ifname"]): "UP" in link.get("flags", [])
                    for link in json.loads(out)}
        except (OSError, subprocess.SubprocessError, ValueError):
            return {}  # the namespace is gone or ip failed: every WAT reads as down

    def acked_points(self, wat: str = "nr") -> int:
        """``wat_kpi`` points of ``wat`` InfluxDB acknowledged with 204 (each write carries
        one per CPE)."""
        return self.written * sum(1 for w in self.kpis.values() if wat in w)
