"""The dashboard code, its committed JSON and the chart's ConfigMap agree; the JSON is sound.

Whether every query returns data is checked by ``make e2e`` against its real Prometheus and
InfluxDB (:mod:`tests.e2e.dashboard_queries`); here the model itself, and the panels of what the
steering thresholds act on against an InfluxDB fed as the agents' telemetry feeds it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from dashboards import DASHBOARDS, dashboard_json, queries
from dashboards.__main__ import OUT, main
from tests.e2e.dashboard_queries import influx_results
from tests.support.influxd import InfluxServer
from xapp.adapters.influx.store import InfluxConfig, InfluxStore
from xapp.adapters.mqtt.telemetry import telemetry_frame

REPO = Path(__file__).resolve().parents[2]


def test_committed_json_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_model_is_sound(name: str) -> None:
    doc = dashboard_json(DASHBOARDS[name]())
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 12
    panels = doc["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] != "row":
            assert p["targets"], p["title"]
            assert p["datasource"]["uid"] in ("${prometheus}", "${influxdb}"), p["title"]
    qs = queries(doc)
    assert len(qs) == sum(len(p.get("targets", [])) for p in panels)
    assert {q.source for q in qs} == {"prometheus", "influxdb"}
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"prometheus", "influxdb", "cpe"} <= variables


def test_per_cpe_panels_show_what_the_steering_thresholds_act_on(influx_db: InfluxServer
                                                                 ) -> None:
    """RTT and retransmissions per WAT and direction, as the agents report them: the Go
    agent's golden telemetry through the MQTT intake into ``wat_kpi``, then the dashboard's own
    queries, with Grafana's substitutions, find one series per (WAT, direction) with the
    message's values (none for a direction that sent nothing: the receiver's)."""
    store = InfluxStore(InfluxConfig(url=influx_db.url, bucket=influx_db.bucket))
    doc = json.loads((REPO / "kernel-agent" / "telemetry" / "testdata"
                      / "telemetry.golden.json").read_text())
    doc["time_ms"] = round((time.time() - 5) * 1000)
    store.write_kpis(telemetry_frame([doc]))
    assert store.flush()
    store.close()
    panels = {q.text: q.panel for q in queries(dashboard_json(DASHBOARDS["mcw-xapp.json"]()))}
    for field in ("rtt_ms", "retrans_pct"):
        [text] = [t for t in panels if f"mean({field})" in t and "FROM wat_kpi" in t]
        results = influx_results(influx_db, text, doc["cpe_id"], "time > now() - 15m", "10s")
        got = {(s["tags"]["wat"], s["tags"]["direction"]): v
               for res in results for s in res.get("series", [])
               for _, v in s["values"] if v is not None}
        want = {(w, d): (stats["rtt_ms"] if field == "rtt_ms" else stats[d][field])
                for w, stats in doc["wats"].items() for d in ("dl", "ul")
                if field == "rtt_ms" or field in stats[d]}
        assert got == want, (panels[text], got)


GO = shutil.which("go") or "/usr/local/go/bin/go"


def schemacheck(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GO, "run", ".", *map(str, files)],
                          cwd=REPO / "dashboards" / "schemacheck",
                          capture_output=True, text=True, timeout=600)


def test_json_decodes_strictly_against_grafanas_schema(tmp_path: Path) -> None:
    """Grafana drops what its schema does not know without a word; the check does not."""
    files = sorted(OUT.glob("*.json"))
    assert files
    ok = schemacheck(*files)
    assert ok.returncode == 0, ok.stderr
    # The check can fail: a field the schema lacks, and a legacy string data source.
    doc = json.loads(files[0].read_text())
    doc["panels"][1]["span"] = 6
    doc["panels"][2]["targets"][0]["datasource"] = "${prometheus}"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    refused = schemacheck(bad)
    assert refused.returncode == 1
    assert "unexpected field 'span'" in refused.stderr
    assert "panels[2].targets[0]" in refused.stderr, refused.stderr


def test_chart_ships_the_json_as_a_configmap() -> None:
    helm = shutil.which("helm") or str(REPO / ".tools" / "bin" / "helm")
    if not Path(helm).exists():
        pytest.skip("helm not found (make deps-tools)")
    out = subprocess.run(
        [helm, "template", "t", str(REPO / "charts" / "mcw-xapp"), "--show-only",
         "templates/configmap-dashboards.yaml", "--set", "metrics.grafanaDashboard.enabled=true"],
        capture_output=True, check=True, text=True, timeout=60).stdout
    cm = yaml.safe_load(out)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    for name in DASHBOARDS:
        assert json.loads(cm["data"][name]) == json.loads((OUT / name).read_text())
    off = subprocess.run(
        [helm, "template", "t", str(REPO / "charts" / "mcw-xapp")],
        capture_output=True, check=True, text=True, timeout=60).stdout
    assert "-dashboards" not in off
