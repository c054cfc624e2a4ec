"""The dashboard code, its committed JSON and the chart's ConfigMap agree; the JSON is sound.

Whether every query returns data is checked by ``make e2e`` against its real Prometheus and
InfluxDB (:mod:`tests.e2e.dashboard_queries`); here the model itself.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dashboards import DASHBOARDS, dashboard_json, queries
from dashboards.__main__ import OUT, main

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
