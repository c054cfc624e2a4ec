"""``mcw synth``: the twin's telemetry as files, read back by ``mcw model train``'s reader."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from xapp.app.model_cli import _read_csv
from xapp.cli import main


def test_kpis_to_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "walk.csv"
    assert main(["synth", "kpis", "--scenario", "wifi-walk", "--cpes", "2", "--duration", "5",
                 "--out", str(out), "--json"]) == 0
    assert '"scenario": "wifi-walk"' in capsys.readouterr().out
    df = pd.read_csv(out)
    assert {"time_s", "cpe", "wat", "delivered_mbps"} <= set(df.columns)
    assert df["cpe"].nunique() == 2 and set(df["wat"]) == {"nr", "wifi", "lifi"}


def test_training_mix_carries_its_sources(tmp_path: Path) -> None:
    out = tmp_path / "twin.csv"
    assert main(["synth", "training", "--synthetic", "paper-static", "--closed-loop",
                 "paper-static", "--cpes", "1", "--out", str(out)]) == 0
    df, stats = _read_csv([str(out)], "auto")
    assert set(df["source"]) == {"synthetic", "closed-loop"}
    # The closed loop's rows are what agents report: no true capacity.
    assert df.loc[df["source"] == "closed-loop", "capacity_mbps"].isna().all()
    assert stats["rows"] == len(df)


def test_training_needs_a_scenario(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["synth", "training", "--out", str(tmp_path / "x.csv")]) == 2
    assert "give --synthetic" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["synth", "kpis", "--scenario", "no-such", "--out", str(tmp_path / "y.csv")])
