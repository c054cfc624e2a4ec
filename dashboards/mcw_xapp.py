"""The operators' dashboard: capacity, weights, the fleet of agents and the xApp's own health.

Two data sources, as deployed: Prometheus (the xApp's and the agents' ``/metrics``) and InfluxDB
1.8 (the KPIs the xApp reads, and the forecasts and weights it writes back: ``wat_kpi``,
``wat_prediction``, ``wat_weight``).  A ``cpe`` variable picks the CPE the per-CPE panels show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafanalib.core import (
    Dashboard,
    GridPos,
    RowPanel,
    Target,
    Template,
    Templating,
    TimeSeries,
)
from grafanalib.influxdb import InfluxDBTarget

PROM = "${prometheus}"
INFLUX = "${influxdb}"
#: Seconds of history the per-CPE InfluxDB panels group by (Grafana's interval).
GROUP = "GROUP BY time($__interval)"


@dataclass(frozen=True)
class Query:
    """One query of a panel: its data source kind, the panel's title and the text."""

    source: str  # "prometheus" or "influxdb"
    panel: str
    text: str


def _prom(*exprs: tuple[str, str]) -> list[Target]:
    return [Target(expr=e, legendFormat=legend, refId=chr(65 + i), datasource=PROM)
            for i, (e, legend) in enumerate(exprs)]


def _influx(*qs: tuple[str, str]) -> list[InfluxDBTarget]:
    return [InfluxDBTarget(query=q, alias=alias, refId=chr(65 + i), datasource=INFLUX)
            for i, (q, alias) in enumerate(qs)]


def _panel(title: str, targets: list[Any], x: int, y: int, unit: str = "short",
           w: int = 12, h: int = 8) -> TimeSeries:
    return TimeSeries(title=title, targets=targets, gridPos=GridPos(h=h, w=w, x=x, y=y),
                      unit=unit)


def _panels() -> list[Any]:
    cpe = "cpe = '$cpe' AND $timeFilter"
    return [
        RowPanel(title="Per CPE ($cpe)", gridPos=GridPos(h=1, w=24, x=0, y=0)),
        _panel("Predicted against delivered capacity per WAT and direction", _influx(
            (f"SELECT mean(median_mbps) FROM wat_prediction WHERE {cpe} {GROUP}, wat, "
             "direction", "predicted $tag_wat $tag_direction"),
            (f"SELECT mean(lower_mbps) FROM wat_prediction WHERE {cpe} {GROUP}, wat, "
             "direction", "lower bound $tag_wat $tag_direction"),
            (f"SELECT mean(delivered_mbps) FROM wat_kpi WHERE {cpe} {GROUP}, wat",
             "delivered $tag_wat")), 0, 1, unit="Mbits"),
        _panel("Weights per WAT and direction (published; the agents apply them)", _influx(
            (f"SELECT last(weight) FROM wat_weight WHERE {cpe} {GROUP}, wat, direction",
             "$tag_wat $tag_direction"),), 12, 1),
        _panel("Aggregate delivered against the predicted sum", _influx(
            ("SELECT sum(m) FROM (SELECT mean(delivered_mbps) AS m FROM wat_kpi WHERE "
             f"{cpe} {GROUP}, wat) {GROUP}", "delivered (sum of WATs)"),
            ("SELECT sum(m) FROM (SELECT mean(median_mbps) AS m FROM wat_prediction WHERE "
             f"{cpe} AND direction = 'dl' {GROUP}, wat) {GROUP}", "predicted sum, dl")),
            0, 9, unit="Mbits"),
        # The agent's metrics carry no CPE label (one agent, one scrape target): the fleet view.
        _panel("Weights the agents apply, fleet mean per WAT", _prom(
            ("avg by (wat) (mcw_agent_weight)", "{{wat}}"),), 12, 9),
        RowPanel(title="Model", gridPos=GridPos(h=1, w=24, x=0, y=17)),
        _panel("Lower-bound coverage against its target", _prom(
            ("mcw_model_lower_coverage", "coverage {{family}}"),
            ("mcw_model_lower_coverage_target", "target {{family}}")), 0, 18,
            unit="percentunit"),
        _panel("Lower-bound multiplier (model error correction)", _prom(
            ("mcw_model_lower_multiplier", "{{family}}"),), 12, 18),
        RowPanel(title="Fleet", gridPos=GridPos(h=1, w=24, x=0, y=26)),
        _panel("Agents online, lagging, in error", _prom(
            ("mcw_agents_known", "known"), ("mcw_agents_online", "online"),
            ("mcw_agents_lagging", "lagging"), ("mcw_agents_with_error", "in error")), 0, 27),
        _panel("Proxies and the CPEs whose downlink they apply", _prom(
            ("mcw_proxies_known", "proxies known"), ("mcw_proxies_online", "proxies online"),
            ("mcw_cpes_downlink_applied", "CPEs with downlink applied")), 12, 27),
        _panel("Agents connected to the broker, lease expiries", _prom(
            ("sum(mcw_agent_mqtt_connected)", "connected"),
            ("sum(rate(mcw_agent_lease_expiries_total[1m]))", "lease expiries / s")), 0, 35),
        _panel("Agents scraped by Prometheus", _prom(
            ('sum(up{job="mcw-agent"})', "up"),), 12, 35),
        RowPanel(title="xApp", gridPos=GridPos(h=1, w=24, x=0, y=43)),
        _panel("Tick duration (p50, p99)", _prom(
            ("histogram_quantile(0.5, sum by (le) (rate(mcw_tick_duration_seconds_bucket[1m])))",
             "p50"),
            ("histogram_quantile(0.99, sum by (le) "
             "(rate(mcw_tick_duration_seconds_bucket[1m])))", "p99")), 0, 44, unit="s"),
        _panel("E2 subscriptions and indications", _prom(
            ("sum by (event) (rate(mcw_e2_subscription_events_total[1m]))",
             "subscription {{event}}"),
            ("sum by (event) (rate(mcw_e2_indication_events_total[1m]))",
             "indication {{event}}")), 12, 44),
        _panel("Drops by reason", _prom(
            ("sum by (kind, reason) (increase(mcw_mqtt_subscriber_dropped_payloads_total[5m]))",
             "received {{kind}} {{reason}}"),
            ("sum by (reason) (increase(mcw_kpi_rows_skipped_total[5m]))",
             "KPI rows {{reason}}")), 0, 52),
        _panel("Worker restarts, readiness, dependencies", _prom(
            ("sum by (worker) (mcw_worker_restarts_total)", "restarts {{worker}}"),
            ("mcw_ready", "ready"), ("mcw_dependency_up", "{{dependency}} up")), 12, 52),
    ]


def build() -> Dashboard:
    variables = Templating(list=[
        Template(name="prometheus", type="datasource", query="prometheus", default="Prometheus",
                 label="Prometheus"),
        Template(name="influxdb", type="datasource", query="influxdb", default="InfluxDB",
                 label="InfluxDB"),
        Template(name="cpe", label="CPE", dataSource=INFLUX,
                 query='SHOW TAG VALUES FROM "wat_weight" WITH KEY = "cpe"', default=""),
    ])
    return Dashboard(title="mcw: multi-connectivity weights", uid="mcw-xapp",
                     tags=["mcw", "o-ran", "mptcp"], timezone="utc", refresh="10s",
                     panels=_panels(), templating=variables).auto_panel_ids()


def dashboard_json(dash: Dashboard | None = None) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (what the chart's ConfigMap carries)."""
    from grafanalib._gen import DashboardEncoder

    doc: dict[str, Any] = json.loads(json.dumps((dash or build()).to_json_data(),
                                                cls=DashboardEncoder))
    return doc


def queries(doc: dict[str, Any]) -> list[Query]:
    """Every query of a dashboard JSON model, with its source kind, in panel order."""
    out: list[Query] = []
    for panel in doc.get("panels", []):
        for t in panel.get("targets", []):
            if t.get("expr"):
                out.append(Query("prometheus", panel["title"], t["expr"]))
            elif t.get("query"):
                out.append(Query("influxdb", panel["title"], t["query"]))
    return out


#: file name in charts/mcw-xapp/files/dashboards -> builder
DASHBOARDS = {"mcw-xapp.json": build}
