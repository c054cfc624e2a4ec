"""``mcw twin`` and ``mcw demo`` end to end through the real command table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from twin.sysctl_backend import WEIGHTS_PATH
from xapp.cli import main


def test_twin_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["twin", "--scenario", "paper-static", "--policy", "fixed:30,100,1",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("aggregate_mbps", "oracle_mbps", "capacity_sum_mbps", "ratio_to_oracle",
                "per_wat_mbps", "weight_updates", "lagged_oracle_ratio"):
        assert key in doc
    assert 0.0 < doc["lagged_oracle_ratio"] <= 1.0
    assert set(doc["per_wat_mbps"]) == {"nr", "wifi", "lifi"}
    assert doc["aggregate_mbps"] >= 0.9 * doc["capacity_sum_mbps"]


def test_twin_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "walk.png"
    assert main(["twin", "--scenario", "wifi-walk", "--policy", "probe", "--duration", "60",
                 "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "ratio to oracle" in out and png.read_bytes()[:4] == b"\x89PNG"
    assert "lagged oracle" in out


@pytest.mark.parametrize("argv", [["--policy", "fixed:1,2"], ["--cpes", "0"],
                                  ["--max-weight", "0"], ["--policy", "nope"]])
def test_twin_bad_input(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["twin", *argv]) == 2
    assert "mcw twin:" in capsys.readouterr().err


def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--out", str(tmp_path), "--quiet"]) == 0
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    assert doc["sysctl"]["writes"] > 10
    text = (tmp_path / "sysroot" / WEIGHTS_PATH).read_text().split()
    assert len(text) == 15 and text[0] == "335544330"
    assert doc["xapp"]["aggregate_mbps"] > doc["probe"]["aggregate_mbps"]
    # The shipped model drives the loop; the EWMA and the lagged oracle are references.
    latest = (Path(__file__).resolve().parents[2] / "models" / "default" / "LATEST")
    assert doc["model"]["version"] and doc["model"]["version"] in latest.read_text()
    assert doc["xapp"]["estimator"] != doc["ewma"]["estimator"]
    assert 0 < doc["lagged_oracle"]["ratio_to_oracle"] <= 1
    assert doc["ewma"]["aggregate_mbps"] > doc["probe"]["aggregate_mbps"]
    out = capsys.readouterr().out
    assert "xapp (model)" in out and "xapp (EWMA)" in out and "lagged oracle" in out


def test_demo_refuses_a_tampered_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    shipped = Path(__file__).resolve().parents[2] / "models" / "default"
    model = tmp_path / "model"
    shutil.copytree(shipped, model)
    artifact = next(model.glob("*.skops"))
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF
    artifact.write_bytes(bytes(data))
    monkeypatch.setenv("MCW_MODEL", str(model))
    assert main(["demo", "--out", str(tmp_path / "out"), "--quiet"]) == 1
    assert "cannot load the model" in capsys.readouterr().err
