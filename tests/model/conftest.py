"""Fixtures of the model tests: a real influxd, and small trained artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.support.influxd import InfluxServer, influxd_binary, start_influxd


@pytest.fixture
def influx(tmp_path: Path) -> Iterator[InfluxServer]:
    """A fresh InfluxDB 1.8 on a free loopback port with database ``mcw``."""
    if influxd_binary() is None:
        pytest.skip("influxd not installed (make deps-tools)")
    server = start_influxd(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def synthetic_table(seed: int = 0, n_cpes: int = 3, duration_s: float = 120.0) -> pd.DataFrame:
    """Twin telemetry of the wifi-walk scenario (all three families)."""
    from twin.kpis import synthesize
    from twin.scenarios import build

    scn = build("wifi-walk", n_cpes=n_cpes, seed=seed, duration_s=duration_s)
    return synthesize(scn, period_s=1.0, censor_fraction=0.1, seed=seed,
                      cpe_prefix=f"s{seed}-")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with one small artifact trained on synthetic data (and LATEST)."""
    from xapp.model import artifact, training

    ds = training.replay(pd.concat([synthetic_table(0), synthetic_table(1)], ignore_index=True))
    models = training.fit_families(ds, None, {"max_iter": 20})
    directory = tmp_path_factory.mktemp("models")
    artifact.save(models, directory, {"training": {"note": "test"}})
    return directory
