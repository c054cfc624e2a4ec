"""Raca importer (fixture files, and the real traces when present) and synthetic KPIs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import SHARED
from tests.xapp.model.test_cli import write_raca
from xapp.adapters.raca5g import RacaFormatError, read_session, read_sessions

REAL = SHARED / "data" / "raca5g"


def test_importer_skips_and_counts_malformed(tmp_path: Path) -> None:
    f = tmp_path / "B_x.csv"
    write_raca(f, 0, rows=120)
    text = f.read_text().splitlines()
    text[10] = text[10].replace("5G,-95", "5G,abc")  # unparsable RSRP -> NaN, counted
    text[20] = "2020.13.45_99.99.99" + text[20][19:]  # bad timestamp -> row skipped
    f.write_text("\n".join(text) + "\n")
    df, st = read_session(f)
    assert st.skipped_rows == 2 and st.bad_values == {"rsrp_dbm": 1}
    assert len(df) == 119 and df["rsrp_dbm"].isna().sum() == 1
    assert (df["wat"] == "nr").all() and df["delivered_mbps"].max() < 100


def test_importer_rejects_other_csv(tmp_path: Path) -> None:
    f = tmp_path / "other.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(RacaFormatError):
        read_session(f)


@pytest.mark.skipif(not REAL.exists(), reason="Raca traces not present (not part of the repo)")
def test_importer_on_real_traces() -> None:
    df, st = read_sessions([REAL / "Static"])
    assert st.files >= 1 and len(df) > 1000
    assert df["rat"].isin([2.0, 3.0, 4.0, 5.0]).mean() > 0.9
    assert 1.0 < df["delivered_mbps"].mean() < 500.0


def test_synthetic_kpis_follow_capacity() -> None:
    from twin.kpis import synthesize
    from twin.scenarios import build

    scn = build("wifi-walk", n_cpes=2, seed=0)
    df = synthesize(scn, period_s=1.0)
    wifi = df[df["wat"] == "wifi"]
    # PHY rate and capacity move together (rate adaptation), SNR falls with distance.
    assert np.corrcoef(wifi["phy_rate_mbps"], wifi["capacity_mbps"])[0, 1] > 0.8
    nr = df[df["wat"] == "nr"]
    assert nr["cqi"].between(0, 15).all() and nr["capacity_mbps"].max() <= 342.0 * 1.05
    lifi = df[df["wat"] == "lifi"]
    dark = lifi["rx_optical_dbm"] < -30
    assert dark.any()
    cap = lifi["capacity_mbps"]
    assert cap[dark].median() < 0.5 * cap[~dark].median()
    assert (df["delivered_mbps"] == df["capacity_mbps"]).all()
