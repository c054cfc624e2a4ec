"""The operators' dashboard: capacity, weights, the fleet of agents and the xApp's own health.

Two data sources, as deployed: Prometheus (the xApp's and the agents' ``/metrics``) and InfluxDB
1.8 (the KPIs the xApp reads, and the forecasts and weights it writes back: ``wat_kpi``,
``wat_prediction``, ``wat_weight``).  A ``cpe`` variable picks the CPE the per-CPE panels show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement
from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos, VariableRefresh

# Data sources by variable, so one JSON serves every Grafana whatever its data sources' uids.
PROM = DataSourceRef(type_val="prometheus", uid="${prometheus}")
INFLUX = DataSourceRef(type_val="influxdb", uid="${influxdb}")
#: Seconds of history the per-CPE InfluxDB panels group by (Grafana's interval).
GROUP = "GROUP BY time($__interval)"


@dataclass(frozen=True)
class Query:
    """One query of a panel: its data source kind, the panel's title and the text."""

    source: str  # "prometheus" or "influxdb"
    panel: str
    text: str


@dataclass(frozen=True)
class InfluxQL(cogvariants.Dataquery):
    """A raw InfluxQL target of Grafana's InfluxDB data source (the SDK has no builder for
    it; the dashboard schema takes any data source's query as an open object)."""

    ref_id: str
    query: str
    alias: str

    def to_json(self) -> dict[str, object]:
        return {"refId": self.ref_id, "query": self.query, "alias": self.alias,
                "rawQuery": True, "resultFormat": "time_series", "datasource": {
                    "type": INFLUX.type_val, "uid": INFLUX.uid}}


class _Built(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, query: cogvariants.Dataquery) -> None:
        self.query = query

    def build(self) -> cogvariants.Dataquery:
        return self.query


def _prom(*exprs: tuple[str, str]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    return [prometheus.Dataquery().expr(e).legend_format(legend).ref_id(chr(65 + i))
            for i, (e, legend) in enumerate(exprs)]


def _influx(*qs: tuple[str, str]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    return [_Built(InfluxQL(chr(65 + i), q, alias)) for i, (q, alias) in enumerate(qs)]


@dataclass(frozen=True)
class _Panel:
    """A time series panel at (x, y) of Grafana's 24-column grid."""

    title: str
    targets: list[cogbuilder.Builder[cogvariants.Dataquery]]
    x: int
    y: int
    unit: str = "short"
    w: int = 12
    h: int = 8


@dataclass(frozen=True)
class _Row:
    """A row header across the grid at y."""

    title: str
    y: int


def _panels() -> list[_Panel | _Row]:
    cpe = "cpe = '$cpe' AND $timeFilter"
    return [
        _Row("Per CPE ($cpe)", 0),
        _Panel("Predicted against delivered capacity per WAT and direction", _influx(
            (f"SELECT mean(median_mbps) FROM wat_prediction WHERE {cpe} {GROUP}, wat, "
             "direction", "predicted $tag_wat $tag_direction"),
            (f"SELECT mean(lower_mbps) FROM wat_prediction WHERE {cpe} {GROUP}, wat, "
             "direction", "lower bound $tag_wat $tag_direction"),
            (f"SELECT mean(delivered_mbps) FROM wat_kpi WHERE {cpe} {GROUP}, wat",
             "delivered $tag_wat")), 0, 1, unit="Mbits"),
        _Panel("Weights per WAT and direction (published; the agents apply them)", _influx(
            (f"SELECT last(weight) FROM wat_weight WHERE {cpe} {GROUP}, wat, direction",
             "$tag_wat $tag_direction"),), 12, 1),
        _Panel("Aggregate delivered against the predicted sum", _influx(
            ("SELECT sum(m) FROM (SELECT mean(delivered_mbps) AS m FROM wat_kpi WHERE "
             f"{cpe} {GROUP}, wat) {GROUP}", "delivered (sum of WATs)"),
            ("SELECT sum(m) FROM (SELECT mean(median_mbps) AS m FROM wat_prediction WHERE "
             f"{cpe} AND direction = 'dl' {GROUP}, wat) {GROUP}", "predicted sum, dl")),
            0, 9, unit="Mbits"),
        # The agent's metrics carry no CPE label (one agent, one scrape target): the fleet view.
        _Panel("Weights the agents apply, fleet mean per WAT", _prom(
            ("avg by (wat) (mcw_agent_weight)", "{{wat}}"),), 12, 9),
        # What the steering rules' RTT and loss thresholds act on, as the agents measure it:
        # the reporting end's smoothed RTT and the share of the sender's segments resent.
        _Panel("RTT per WAT and direction", _influx(
            (f"SELECT mean(rtt_ms) FROM wat_kpi WHERE {cpe} {GROUP}, wat, direction",
             "$tag_wat $tag_direction"),), 0, 17, unit="ms"),
        _Panel("Retransmissions per WAT and direction (% of data segments sent)", _influx(
            (f"SELECT mean(retrans_pct) FROM wat_kpi WHERE {cpe} {GROUP}, wat, direction",
             "$tag_wat $tag_direction"),), 12, 17, unit="percent"),
        _Row("Model", 25),
        _Panel("Lower-bound coverage against its target", _prom(
            ("mcw_model_lower_coverage", "coverage {{family}}"),
            ("mcw_model_lower_coverage_target", "target {{family}}")), 0, 26,
            unit="percentunit"),
        _Panel("Lower-bound multiplier (model error correction)", _prom(
            ("mcw_model_lower_multiplier", "{{family}}"),), 12, 26),
        _Row("Fleet", 34),
        _Panel("Agents online, lagging, in error", _prom(
            ("mcw_agents_known", "known"), ("mcw_agents_online", "online"),
            ("mcw_agents_lagging", "lagging"), ("mcw_agents_with_error", "in error")), 0, 35),
        _Panel("Proxies and the CPEs whose downlink they apply", _prom(
            ("mcw_proxies_known", "proxies known"), ("mcw_proxies_online", "proxies online"),
            ("mcw_cpes_downlink_applied", "CPEs with downlink applied")), 12, 35),
        _Panel("Agents connected to the broker, lease expiries", _prom(
            ("sum(mcw_agent_mqtt_connected)", "connected"),
            ("sum(rate(mcw_agent_lease_expiries_total[1m]))", "lease expiries / s")), 0, 43),
        _Panel("Agents scraped by Prometheus", _prom(
            ('sum(up{job="mcw-agent"})', "up"),), 12, 43),
        _Row("xApp", 51),
        _Panel("Tick duration (p50, p99)", _prom(
            ("histogram_quantile(0.5, sum by (le) (rate(mcw_tick_duration_seconds_bucket[1m])))",
             "p50"),
            ("histogram_quantile(0.99, sum by (le) "
             "(rate(mcw_tick_duration_seconds_bucket[1m])))", "p99")), 0, 52, unit="s"),
        _Panel("E2 subscriptions and indications", _prom(
            ("sum by (event) (rate(mcw_e2_subscription_events_total[1m]))",
             "subscription {{event}}"),
            ("sum by (event) (rate(mcw_e2_indication_events_total[1m]))",
             "indication {{event}}")), 12, 52),
        _Panel("Drops by reason", _prom(
            ("sum by (kind, reason) (increase(mcw_mqtt_subscriber_dropped_payloads_total[5m]))",
             "received {{kind}} {{reason}}"),
            ("sum by (reason) (increase(mcw_kpi_rows_skipped_total[5m]))",
             "KPI rows {{reason}}")), 0, 60),
        _Panel("Worker restarts, readiness, dependencies", _prom(
            ("sum by (worker) (mcw_worker_restarts_total)", "restarts {{worker}}"),
            ("mcw_ready", "ready"), ("mcw_dependency_up", "{{dependency}} up")), 12, 60),
    ]


def build() -> dashboard.Dashboard:
    dash = (dashboard.Dashboard("mcw: multi-connectivity weights").uid("mcw-xapp")
            .tags(["mcw", "o-ran", "mptcp"]).timezone("utc").refresh("10s")
            .time("now-1h", "now")
            .with_variable(dashboard.DatasourceVariable("prometheus").label("Prometheus")
                           .type("prometheus"))
            .with_variable(dashboard.DatasourceVariable("influxdb").label("InfluxDB")
                           .type("influxdb"))
            .with_variable(dashboard.QueryVariable("cpe").label("CPE").datasource(INFLUX)
                           .query('SHOW TAG VALUES FROM "wat_weight" WITH KEY = "cpe"')
                           .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)))
    legend = (common.VizLegendOptions().show_legend(True).display_mode(LegendDisplayMode.LIST)
              .placement(LegendPlacement.BOTTOM))
    for ident, item in enumerate(_panels(), start=1):
        if isinstance(item, _Row):
            dash = dash.with_row(dashboard.Row(item.title).id(ident)
                                 .grid_pos(GridPos(h=1, w=24, x=0, y=item.y)))
            continue
        panel = (timeseries.Panel().id(ident).title(item.title).unit(item.unit).legend(legend)
                 .datasource(PROM if isinstance(item.targets[0], prometheus.Dataquery)
                             else INFLUX)
                 .grid_pos(GridPos(h=item.h, w=item.w, x=item.x, y=item.y)))
        for target in item.targets:
            panel = panel.with_target(target)
        dash = dash.with_panel(panel)
    return dash


def dashboard_json(dash: dashboard.Dashboard | None = None) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (what the chart's ConfigMap carries)."""
    doc: dict[str, Any] = json.loads(json.dumps((dash or build()).build(), cls=JSONEncoder))
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
