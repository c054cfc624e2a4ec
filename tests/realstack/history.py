"""The xApp's own record of one run, saved beside the run's other files: what ``mcw run`` wrote to
InfluxDB (the KPIs it got, agents' telemetry and the trace's radio KPIs; its forecasts; the weights
it published), one JSON line per point in time order (``forecasts.jsonl``).

A reader follows the loop period by period and WAT by WAT: the forecast a decision was made with
beside the delivered rate and saturation that measured it (issue 32's lifi-blockage runs, where a
WAT switched off on a forecast was never measured).  Each line has ``kind`` (``kpi``,
``forecast``, ``weight``), ``t`` (seconds from the trace's start, negative in the warm-up), the
point's tags (``cpe``, ``wat``, ``direction`` when it has one) and its fields.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Final

from tests.support.influxd import InfluxServer
from xapp.core.kpis import MEASUREMENT_KPI, MEASUREMENT_PREDICTION, MEASUREMENT_WEIGHT

FILE: Final = "forecasts.jsonl"
KINDS: Final = {"kpi": MEASUREMENT_KPI, "forecast": MEASUREMENT_PREDICTION,
                "weight": MEASUREMENT_WEIGHT}


def points(server: InfluxServer, measurement: str) -> list[dict[str, Any]]:
    """Every point of ``measurement``, as dicts with ``time`` in Unix milliseconds and no null
    fields."""
    q = f"SELECT * FROM {server.database}.autogen.{measurement}"
    url = f"{server.url}/query?" + urllib.parse.urlencode({"epoch": "ms"})
    data = urllib.parse.urlencode({"q": q}).encode()
    with urllib.request.urlopen(url, data=data, timeout=10.0) as resp:
        doc = json.loads(resp.read())
    out: list[dict[str, Any]] = []
    for result in doc.get("results", []):
        for series in result.get("series", []) or []:
            for values in series["values"]:
                out.append({k: v for k, v in zip(series["columns"], values, strict=True)
                            if v is not None})
    return out


def save(server: InfluxServer, t0: float, run_dir: Path) -> int:
    """Write every point of the database, the run's alone (each run empties it first:
    :meth:`tests.realstack.harness.Servers.reset`), to ``run_dir / FILE``, times relative to
    ``t0`` (Unix seconds); returns how many.  Whatever the xApp could have read as history is
    in the file."""
    rows = []
    for kind, measurement in KINDS.items():
        for p in points(server, measurement):
            t = round(float(p.pop("time")) / 1000.0 - t0, 3)
            rows.append({"kind": kind, "t": t, **p})
    rows.sort(key=lambda r: (r["t"], r["kind"], str(r.get("wat")), str(r.get("direction"))))
    with (run_dir / FILE).open("w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    return len(rows)
