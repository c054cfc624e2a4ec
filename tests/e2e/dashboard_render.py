"""The shipped Grafana dashboard drawn from the e2e run's own Prometheus and InfluxDB.

Grafana's server cannot be had here (it is not a Debian package and its licence keeps it out
of the project), so this draws the dashboard the way Grafana would lay it out: every panel of
the committed JSON at its ``gridPos`` on the 24-column grid, every target's query run over the
run's time range against the run's real data sources (the substitutions of
:mod:`tests.e2e.dashboard_queries`), each series labelled by the target's legend format.  What
it cannot show is Grafana's styling; what it does show is that each panel has the data an
operator would see.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tests.e2e.dashboard_queries import influx_results
from tests.e2e.prometheus import Prometheus
from tests.support.influxd import InfluxServer

Series = tuple[str, list[tuple[float, float]]]
#: Inches per grid row (Grafana draws 30 px rows on a 24-column grid).
UNIT_IN = 0.4


def _legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt) or \
        json.dumps(labels)


def prometheus_series(prom: Prometheus, target: dict[str, Any], cpe: str, start_s: float,
                      end_s: float) -> list[Series]:
    expr = str(target["expr"]).replace("$cpe", cpe)
    step = max(1.0, (end_s - start_s) / 300)
    return [(_legend(str(target.get("legendFormat", "")), labels), points)
            for labels, points in prom.series_range(expr, start_s, end_s, step)]


def influx_series(influx: InfluxServer, target: dict[str, Any], cpe: str, start_s: float,
                  end_s: float) -> list[Series]:
    out: list[Series] = []
    for res in influx_results(influx, str(target["query"]), cpe,
                              f"time >= {int(start_s)}s AND time <= {int(end_s)}s", "5s",
                              epoch="ms"):
        for s in res.get("series") or []:
            tags = {str(k): str(v) for k, v in (s.get("tags") or {}).items()}
            alias = _legend(re.sub(r"\$tag_(\w+)", r"{{\1}}", str(target.get("alias", ""))),
                            tags)
            points = [(row[0] / 1000.0, float(row[1])) for row in s["values"]
                      if row[1] is not None]
            out.append((alias, points))
    return out


def render(doc: dict[str, Any], prom: Prometheus, influx: InfluxServer, cpe: str,
           start_s: float, end_s: float, path: Path) -> tuple[Path, dict[str, int]]:
    """Draw every panel of dashboard ``doc`` over [start_s, end_s] (unix s) into ``path``;
    returns the path and the number of series each panel drew."""
    panels = doc["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(20, height * UNIT_IN))
    drawn: dict[str, int] = {}
    # Grid units to figure fractions, with room inside each cell for its title and ticks.
    gx, gy = 1 / 24, 1 / (height + 2)
    for p in panels:
        g = p["gridPos"]
        top = 1 - (g["y"] + 1) * gy
        if p["type"] == "row":
            fig.text(0.01, top - 0.5 * gy, p["title"].replace("$cpe", cpe), fontsize=13,
                     weight="bold", va="center")
            continue
        ax = fig.add_axes((g["x"] * gx + 0.035, top - g["h"] * gy + 0.9 * gy,
                           g["w"] * gx - 0.05, g["h"] * gy - 1.6 * gy))
        series: list[Series] = []
        for t in p.get("targets", []):
            series += (prometheus_series(prom, t, cpe, start_s, end_s) if "expr" in t
                       else influx_series(influx, t, cpe, start_s, end_s))
        drawn[p["title"]] = len(series)
        for label, points in series[:12]:  # as Grafana's legend, the first dozen
            ax.plot([t - start_s for t, _ in points], [v for _, v in points], lw=1,
                    label=label)
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        ax.set_title(p["title"].replace("$cpe", cpe), fontsize=9, loc="left")
        ax.set_ylabel({"Mbits": "Mbit/s", "percentunit": "fraction", "percent": "%", "s": "s",
                       "ms": "ms"}.get(unit, ""), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=6, loc="upper left", ncol=3, framealpha=0.6)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="grey")
    fig.text(0.01, 1 - 0.5 * gy, f"{doc['title']}: the shipped dashboard over a make e2e run "
             f"({end_s - start_s:.0f} s; x: seconds since start; CPE {cpe})", fontsize=14,
             va="center")
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path, drawn
