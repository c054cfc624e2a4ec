"""``mcw telemetry import-raca``: Raca 5G traces into a CSV file or a real InfluxDB, malformed
rows skipped and counted, an unreachable InfluxDB an exit code of 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.support.influxd import InfluxServer
from tests.support.paths import SHARED
from tests.support.polling import free_port
from xapp.cli import main

RACA = SHARED / "data" / "raca5g" / "Static"


def _one_trace(directory: Path, extra_line: str = "") -> Path:
    if not RACA.is_dir():
        pytest.skip(f"{RACA} is not there (the shared data beside the repo)")
    src = sorted(RACA.glob("*.csv"))[0]
    directory.mkdir(exist_ok=True)
    dst = directory / src.name
    shutil.copy(src, dst)
    if extra_line:
        with dst.open("a") as fh:
            fh.write(extra_line)
    return dst


def test_import_to_csv_counts_rows_and_skips_the_malformed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = _one_trace(tmp_path / "clean")
    out = tmp_path / "rows.csv"
    assert main(["telemetry", "import-raca", str(clean), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["files"] == 1 and summary["out"] == str(out)
    assert summary["rows"] == len(pd.read_csv(out)) > 0
    bad = _one_trace(tmp_path / "bad", "not,a,raca,row\n")
    assert main(["telemetry", "import-raca", str(bad), "--out", str(out), "--json"]) == 0
    worse = json.loads(capsys.readouterr().out)
    assert worse["skipped_rows"] >= summary["skipped_rows"] + 1
    assert worse["rows"] == summary["rows"]


def test_import_into_influxdb(influx_db: InfluxServer, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    trace = _one_trace(tmp_path)
    assert main(["telemetry", "import-raca", str(trace), "--influx", influx_db.url,
                 "--bucket", influx_db.bucket, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    answer = json.loads(influx_db.query(f'SELECT count(*) FROM "{influx_db.database}".'
                                        '"autogen"."wat_kpi"'))
    counts = answer["results"][0]["series"][0]["values"][0][1:]
    assert max(counts) > 0 and summary["rows"] > 0


def test_an_unreachable_influxdb_is_exit_code_1(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    trace = _one_trace(tmp_path)
    rc = main(["telemetry", "import-raca", str(trace), "--influx",
               f"http://127.0.0.1:{free_port()}", "--json"])
    assert rc == 1
    assert "points not written" in capsys.readouterr().err


def test_a_missing_path_is_a_clear_error(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["telemetry", "import-raca", str(tmp_path / "nothing"), "--out",
                 str(tmp_path / "x.csv")]) == 1
    assert "mcw telemetry import-raca:" in capsys.readouterr().err
