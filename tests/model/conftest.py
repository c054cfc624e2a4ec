"""Fixtures of the model tests: a real influxd, and small trained artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.support.influxd import InfluxServer, influxd_binary, start_influxd


@pytest.fixture(scope="session", autouse=True)
def _one_openmp_thread() -> Iterator[None]:
    """Tiny fits and predictions are slower with OpenMP threads (and the test machine is
    shared): run the model code on one thread, as the benchmark measures it."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.fixture
def influx(tmp_path: Path) -> Iterator[InfluxServer]:
    """A fresh InfluxDB 1.8 of this test alone (it may stop and restart it) on a free
    loopback port with database ``mcw``."""
    if influxd_binary() is None:
        pytest.skip("influxd not installed (make deps-tools)")
    server = start_influxd(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _influx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfluxServer]:
    if influxd_binary() is None:
        pytest.skip("influxd not installed (make deps-tools)")
    server = start_influxd(tmp_path_factory.mktemp("influx-shared"))
    try:
        yield server
    finally:
        server.stop()


_DB_COUNTER = iter(range(1_000_000))


@pytest.fixture
def influx_db(_influx_server: InfluxServer) -> InfluxServer:
    """A real InfluxDB 1.8 shared by the session, with an empty database for this test
    (never stop it: tests that simulate outages use :func:`influx`)."""
    return _influx_server.with_database(f"t{next(_DB_COUNTER)}")


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
