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

from dashboards import DASHBOARDS, dashboard_json, queries
from tests.e2e.prometheus import Prometheus
from tests.e2e.report import Check
from tests.support.influxd import InfluxServer


def influx_query(influx: InfluxServer, q: str, cpe: str, window: str = "15m") -> int:
    """Series a dashboard InfluxQL query returns after Grafana's substitutions."""
    text = (q.replace("$timeFilter", f"time > now() - {window}")
             .replace("$__interval", "10s").replace("$cpe", cpe))
    url = f"{influx.url}/query?" + urllib.parse.urlencode({"db": "mcw", "q": text})
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    errors = [res["error"] for res in doc.get("results", []) if "error" in res]
    if errors:
        raise RuntimeError(f"{text}: {errors}")
    return sum(len(res.get("series") or []) for res in doc.get("results", []))


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
