"""Every query of the shipped dashboards, run against the e2e run's Prometheus and InfluxDB.

Grafana fills in ``$timeFilter``, ``$__interval`` and the ``cpe`` variable before it sends an
InfluxDB query, and picks the data source from ``${prometheus}``/``${influxdb}``; this module
does the same substitutions Grafana does for the last ``window`` and the CPE chosen.  A query
that returns no series fails the check, except the E2 panel's in a run without E2 (RMR's C
library is not available here), which is reported as expected-pending.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from dashboards import DASHBOARDS, dashboard_json, queries
from tests.e2e.prometheus import Prometheus
from tests.e2e.report import Check
from tests.support.influxd import InfluxServer


def influx_results(influx: InfluxServer, q: str, cpe: str, time_filter: str, interval: str,
                   epoch: str | None = None) -> list[dict[str, Any]]:
    """The ``results`` of a dashboard InfluxQL query after Grafana's substitutions of
    ``$timeFilter``, ``$__interval`` and the ``cpe`` variable (raises on a query error)."""
    text = (q.replace("$timeFilter", time_filter).replace("$__interval", interval)
             .replace("$cpe", cpe))
    params = {"db": influx.database, "q": text, **({"epoch": epoch} if epoch else {})}
    with urllib.request.urlopen(f"{influx.url}/query?" + urllib.parse.urlencode(params),
                                timeout=30) as r:
        results: list[dict[str, Any]] = json.loads(r.read()).get("results", [])
    errors = [res["error"] for res in results if "error" in res]
    if errors:
        raise RuntimeError(f"{text}: {errors}")
    return results


def influx_query(influx: InfluxServer, q: str, cpe: str, window: str = "15m") -> int:
    """Series a dashboard InfluxQL query returns over the last ``window``."""
    results = influx_results(influx, q, cpe, f"time > now() - {window}", "10s")
    return sum(len(res.get("series") or []) for res in results)


def check_dashboards(prom: Prometheus, influx: InfluxServer, cpe: str,
                     e2_running: bool) -> list[Check]:
    """One check per query of every dashboard."""
    out: list[Check] = []
    for name, build in DASHBOARDS.items():
        for q in queries(dashboard_json(build())):
            try:
                n = (len(prom.query(q.text.replace("$cpe", cpe))) if q.source == "prometheus"
                     else influx_query(influx, q.text, cpe))
                err = ""
            except (OSError, RuntimeError) as exc:
                n, err = 0, str(exc)
            e2 = "mcw_e2_" in q.text
            out.append(Check(f"dashboard {name} / {q.panel}: {q.text[:70]}", n > 0,
                             err or f"{n} series",
                             expected_pending=e2 and not e2_running and n == 0))
    return out
