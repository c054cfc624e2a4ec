"""``mcw model train/evaluate/info`` on small data sets (no files outside the repo needed)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.influxd import InfluxServer
from tests.xapp.model.conftest import KeyPair, synthetic_table
from xapp.adapters.influx.store import InfluxConfig, InfluxStore
from xapp.cli import main
from xapp.model.signing import key_id

RACA_HEADER = ("Timestamp,Longitude,Latitude,Speed,Operatorname,CellID,NetworkMode,RSRP,RSRQ,"
               "SNR,CQI,RSSI,DL_bitrate,UL_bitrate,State,PINGAVG,PINGMIN,PINGMAX,PINGSTDEV,"
               "PINGLOSS,CELLHEX,NODEHEX,LACHEX,RAWCELLID,NRxRSRP,NRxRSRQ")


def write_raca(path: Path, seed: int, rows: int = 400) -> None:
    """A Raca-format session: AR(1) throughput driven by SNR, one malformed row."""
    rng = np.random.default_rng(seed)
    snr = 10 + np.cumsum(rng.normal(0, 0.5, rows)).clip(-10, 10)
    rate = np.maximum(0, 20_000 + 2_000 * snr + rng.normal(0, 3_000, rows))
    lines = [RACA_HEADER]
    for i in range(rows):
        t = pd.Timestamp("2020-01-01") + pd.Timedelta(seconds=i + 10_000 * seed)
        lines.append(f"{t:%Y.%m.%d_%H.%M.%S},-8.4,51.9,10,B,11,5G,-95,-11,{snr[i]:.1f},12,-80,"
                     f"{int(rate[i])},50,D,-,-,-,-,-,B,A4DF,9CBA,1080500{i // 100},-99.0,-11.0")
    lines.insert(50, "garbage,row")
    path.write_text("\n".join(lines) + "\n")


def test_train_evaluate_info_raca_format(tmp_path: Path, signing_key: KeyPair,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    files = []
    for s in range(4):
        f = tmp_path / f"B_{s}.csv"
        write_raca(f, s)
        files.append(str(f))
    out = tmp_path / "models"
    key = ["--signing-key", str(signing_key.private_file)]
    # Raca traces are 4G/5G only: the xApp needs every family, so train refuses ...
    rc = main(["model", "train", *key, "--format", "raca5g", "--csv", *files[:3], "--out",
               str(out), "--max-iter", "20"])
    assert rc == 2 and "fewer than 50 labelled rows of wifi, lifi" in capsys.readouterr().err
    assert not out.exists()
    # ... unless the twin's telemetry covers the other technologies.
    twin = tmp_path / "twin.csv"
    assert main(["synth", "training", "--synthetic", "wifi-walk", "--cpes", "1", "--out",
                 str(twin)]) == 0
    capsys.readouterr()
    rc = main(["model", "train", *key, "--csv", *files[:3], str(twin), "--out", str(out),
               "--max-iter", "20", "--json"])
    assert rc == 0
    card = json.loads(capsys.readouterr().out)
    assert set(card["training"]["sources"]["csv"]["by_source"]) == {"raca5g", "synthetic"}
    assert card["training"]["test_groups"] and card["metrics_heldout"]["rows"] > 0
    assert card["training"]["sources"]["csv"]["skipped_rows"] == 3
    assert card["signing_key_id"] == key_id(signing_key.public)
    # The card carries how each family's bound was calibrated and its coverage per family on
    # the held-out groups.
    assert card["training"]["calibration"]["cellular"]["method"] == "grouped_conformal"
    for fam in ("cellular", "wifi", "lifi"):
        block = card["metrics_heldout"]["families"][fam]
        assert 0.0 <= block["lower_coverage"] <= 1.0 and block["lower_coverage_target"] == 0.9
    pub = ["--public-key", str(signing_key.public_file)]
    rc = main(["model", "evaluate", "--format", "raca5g", files[3], "--model", str(out), *pub,
               "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    for field in ("r2", "mae_kbps", "persistence_mae_kbps", "rows"):
        assert field in res
    assert res["rows"] == 399 and res["r2"] > 0.3
    assert set(res["families"]) == {"cellular"}  # Raca traces are 4G/5G only
    assert res["families"]["cellular"]["lower_coverage"] == res["lower_coverage"]
    assert res["families"]["cellular"]["lower_coverage_target"] == 0.9
    assert main(["model", "evaluate", "--format", "raca5g", files[3], "--model", str(out),
                 *pub]) == 0
    assert "lower-bound coverage" in capsys.readouterr().out
    assert main(["model", "info", "--model", str(out), *pub, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sha256"] == card["sha256"]
    # The shipped release key did not sign it.
    assert main(["model", "info", "--model", str(out)]) == 1
    assert "signed by key" in capsys.readouterr().err


def test_train_long_csv_and_bad_input(tmp_path: Path, signing_key: KeyPair,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "walk.csv"
    pd.concat([synthetic_table(0), synthetic_table(1)]).to_csv(csv, index=False)
    out = tmp_path / "m"
    key = ["--signing-key", str(signing_key.private_file)]
    assert main(["model", "train", *key, "--csv", str(csv), "--out", str(out), "--max-iter",
                 "10"]) == 0
    assert (out / "LATEST").exists()
    before = sorted(p.name for p in out.iterdir())
    assert sum(p.suffix == ".sig" for p in out.iterdir()) == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["model", "train", *key, "--csv", str(bad), "--out", str(out)]) == 1
    assert "missing" in capsys.readouterr().err
    # A bad key fails before any training, and writes nothing.
    assert main(["model", "train", "--signing-key", str(bad), "--csv", str(csv), "--out",
                 str(out)]) == 1
    assert "signing key" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before
    with pytest.raises(SystemExit):  # the key is not optional
        main(["model", "train", "--csv", str(csv), "--out", str(out)])


def test_train_on_closed_loop_telemetry(tmp_path: Path, signing_key: KeyPair) -> None:
    """The shipped loop's own telemetry as training data: no true capacity, censored periods
    passed to the fit as lower bounds."""
    out, twin = tmp_path / "m", tmp_path / "twin.csv"
    assert main(["synth", "training", "--synthetic", "paper-static", "--closed-loop",
                 "paper-static", "lockin", "--cpes", "1", "--out", str(twin)]) == 0
    assert main(["model", "train", "--signing-key", str(signing_key.private_file),
                 "--csv", str(twin), "--max-iter", "5", "--out", str(out), "--json"]) == 0
    card = json.loads(next(out.glob("*.card.json")).read_text())
    assert card["training"]["sources"]["csv"]["by_source"]["closed-loop"] > 0
    assert card["training"]["censored_rows"] > 0
    assert "lower bound" in card["training"]["label"]
    assert set(card["metrics_heldout"]["by_source"]) == {"closed-loop", "synthetic"}


def test_train_from_influx_since_24h(influx_db: InfluxServer, tmp_path: Path,
                                     signing_key: KeyPair,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A day of history in a real influxd: train from it, then score the artifact."""
    influx = influx_db
    now = time.time()
    parts = []
    for seed in range(2):
        t = synthetic_table(seed, n_cpes=2, duration_s=90.0)
        t["time_s"] = t["time_s"] - t["time_s"].min() + now - 200.0
        parts.append(t)
    table = pd.concat(parts, ignore_index=True)
    old = table.iloc[:30].copy()
    old["time_s"] -= 3 * 86_400.0  # older than --since: must not be read
    old["cpe"] = "too-old"
    store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, batch_size=5000))
    assert store.ping()
    written = store.write_table(pd.concat([table, old], ignore_index=True))
    assert store.flush()
    store.close()
    assert written == len(table) + len(old)
    out = tmp_path / "models"
    rc = main(["model", "train", "--signing-key", str(signing_key.private_file), "--influx",
               influx.url, "--bucket", influx.bucket, "--since",
               "24h", "--out", str(out), "--max-iter", "10", "--json"])
    assert rc == 0
    card = json.loads(capsys.readouterr().out)
    src = card["training"]["sources"]["influx"]
    assert src["rows"] == len(table) and src["since"] == "24h"
    assert set(card["families"]) == {"cellular", "wifi", "lifi"}
    metrics = card["metrics_heldout"]
    assert metrics["rows"] > 0 and "too-old" not in card["training"]["test_groups"]
    # Score the artifact on the same history exported as a long CSV: the held-out CPEs are
    # forecast better than by a model-free guess of zero, and the baselines are there.
    csv = tmp_path / "hist.csv"
    table.to_csv(csv, index=False)
    assert main(["model", "evaluate", "--format", "long", str(csv), "--model", str(out),
                 "--public-key", str(signing_key.public_file), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["rows"] > 0 and res["r2"] > 0.5
    assert res["persistence_mae_kbps"] > 0 and res["mae_kbps"] > 0

