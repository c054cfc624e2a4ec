"""The real servers the tests start, as fixtures of every test (tests/conftest.py loads this
plugin): one place, so an area's conftest never re-exports another area's servers.

``broker`` (Mosquitto with the shipped ACL and a session PKI), ``redis`` (ricsdl pointed at it),
``influx`` (a test's own influxd, which it may stop) and ``influx_db`` (a database of its own on
the session's influxd).  Each skips with the install command when its binary is missing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.influxd import InfluxServer, influxd_binary, start_influxd
from tests.support.mosquitto import MosquittoBroker, Pki, make_pki, mosquitto_binary
from tests.support.redis_server import RedisServer, redis_binary


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), n_cpes=4)


@pytest.fixture
def broker(pki: Pki, tmp_path: Path) -> Iterator[MosquittoBroker]:
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    b = MosquittoBroker(pki, tmp_path / "broker").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """A redis-server of the test's own; ricsdl (DBAAS_SERVICE_*) points at it."""
    if redis_binary() is None:
        pytest.skip("redis-server is not installed")
    with RedisServer(tmp_path / "redis") as server:
        for key, value in server.dbaas_env().items():
            monkeypatch.setenv(key, value)
        for key in ("DBAAS_SERVICE_SENTINEL_PORT", "DBAAS_MASTER_NAME", "DBAAS_NODE_COUNT"):
            monkeypatch.delenv(key, raising=False)
        yield server


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


_DB_COUNTER = itertools.count()


@pytest.fixture
def influx_db(_influx_server: InfluxServer) -> InfluxServer:
    """A real InfluxDB 1.8 shared by the session, with an empty database for this test
    (never stop it: tests that simulate outages use :func:`influx`)."""
    return _influx_server.with_database(f"t{next(_DB_COUNTER)}")
