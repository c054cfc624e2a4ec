"""InfluxDB's wiring against a port where nothing listens: the timings of the control period,
the readiness probe from the first check, this replica's points and rows only, the intake
stopped before the store; and the token read from its Secret file."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from xapp.app.config import parse_controls
from xapp.app.wiring.influx import build_influx, read_token, start_intake
from xapp.core.intake import LatestKpis
from xapp.core.ownership import ShardFence
from xapp.core.timings import derive_timings
from xapp.core.workers import Worker


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_store_and_the_intake_follow_the_period_and_the_shards(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    controls = parse_controls({"influxdb": {"url": f"http://127.0.0.1:{closed_port()}",
                                            "token_file": str(token)},
                               "sharding": {"replica_id": "r1"}})
    timings = derive_timings(0.5)
    fence = ShardFence(4)
    checks: dict[str, Callable[[], bool]] = {}
    stoppers: list[Callable[[], object]] = []
    workers: list[Worker] = []
    store = build_influx(controls, timings, fence, checks, stoppers, workers)
    try:
        intake = start_intake(store, LatestKpis(), timings, fence, stoppers, workers)
        assert (store.config.timeout_ms, store.config.writer, store.config.token) == (
            1000, "r1", "s3cret")
        assert store.shard_of == fence.shard
        assert checks["influxdb"]() is False  # probed once already: nothing answers
        assert (intake.interval_s, intake.overlap_s) == (0.5, 1.0)
        assert intake.accept == fence.mask
        assert stoppers[0] == intake.stop  # no poll into a closed store
        assert [w.name for w in workers] == ["influx-flush", "mcw-check-influxdb",
                                             "influx-intake"]
    finally:
        for stop in stoppers:
            stop()


def test_one_replica_reads_every_row() -> None:
    controls = parse_controls({"influxdb": {"url": f"http://127.0.0.1:{closed_port()}"}})
    stoppers: list[Callable[[], object]] = []
    store = build_influx(controls, derive_timings(1.0), ShardFence(4, everything=True), {},
                         stoppers, [])
    try:
        intake = start_intake(store, LatestKpis(), derive_timings(1.0), None, stoppers, [])
        assert intake.accept is None
    finally:
        for stop in stoppers:
            stop()


def test_the_token_comes_from_its_file_or_is_empty(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "token").write_text("  abc \n")
    assert read_token(str(tmp_path / "token")) == "abc"
    with caplog.at_level(logging.WARNING, logger="xapp.app.wiring.influx"):
        assert read_token(str(tmp_path / "absent")) == ""
    assert any("connecting without a token" in r.getMessage() for r in caplog.records)
