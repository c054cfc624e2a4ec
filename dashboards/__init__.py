"""The Grafana dashboards of the product, kept as code with grafana-foundation-sdk (whose types
are generated from the dashboard schema Grafana publishes).

``python -m dashboards`` writes the JSON the Helm chart ships
(``charts/mcw-xapp/files/dashboards/``); ``python -m dashboards --check`` fails when that JSON
is stale; ``dashboards/schemacheck`` (Go, the same SDK's types) decodes it strictly against the
schema.  :func:`queries` lists every query a dashboard runs, so ``make e2e`` can run each one
against its real Prometheus and InfluxDB.
"""

from dashboards.mcw_xapp import DASHBOARDS, Query, dashboard_json, queries

__all__ = ["DASHBOARDS", "Query", "dashboard_json", "queries"]
