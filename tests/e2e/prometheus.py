"""A real Prometheus (the Debian package) scraping the xApp and every agent, on a free port."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.polling import free_port, stop_process, wait_until


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


class Prometheus:
    """``prometheus`` with one job for the xApp and one for the agents, scraping every second."""

    def __init__(self, workdir: Path, xapp_port: int, agent_ports: list[int]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in agent_ports)
        (workdir / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: mcw-xapp\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{xapp_port}']}}]\n"
            f"  - job_name: mcw-agent\n    static_configs: [{{targets: [{targets}]}}]\n")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("prometheus is not installed (apt-get install prometheus)")
        log = (self.workdir / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT)
        if not wait_until(lambda: self._ok("/-/ready"), 30):
            raise RuntimeError(f"prometheus did not become ready; see {self.workdir}")
        return self

    def _ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as r:
                return int(r.status) == 200
        except OSError:
            return False

    def query(self, expr: str, time_s: float | None = None) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` (raises on a query error)."""
        params = {"query": expr}
        if time_s is not None:
            params["time"] = f"{time_s:.3f}"
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.loads(r.read())
        if doc.get("status") != "success":
            raise RuntimeError(f"prometheus query {expr!r}: {doc}")
        return list(doc["data"]["result"])

    def series_range(self, expr: str, start_s: float, end_s: float,
                     step_s: float = 1.0) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """Every series of ``expr`` over [start, end] (unix seconds): (labels, (t, value))."""
        params = {"query": expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}",
                  "step": f"{step_s:g}"}
        url = f"{self.url}/api/v1/query_range?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.loads(r.read())
        if doc.get("status") != "success":
            raise RuntimeError(f"prometheus query {expr!r}: {doc}")
        return [({str(k): str(v) for k, v in s["metric"].items()},
                 [(float(t), float(v)) for t, v in s["values"]])
                for s in doc["data"]["result"]]

    def query_range(self, expr: str, start_s: float, end_s: float,
                    step_s: float = 1.0) -> list[tuple[float, float]]:
        """The first series of ``expr`` over [start, end] (unix seconds) as (t, value) pairs."""
        series = self.series_range(expr, start_s, end_s, step_s)
        return series[0][1] if series else []

    def targets_up(self) -> dict[str, int]:
        """Targets up per job, from the ``up`` metric."""
        out: dict[str, int] = {}
        for s in self.query("sum by (job) (up)"):
            out[s["metric"]["job"]] = int(float(s["value"][1]))
        return out

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
