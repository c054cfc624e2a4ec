"""The ``mcw run`` process in-process, lab mode (files for KPIs and weights), real Redis.

HTTP endpoints on a free port, ``/ready`` following Redis going away and coming back, the loop
carrying on meanwhile, hot reload of config-file.json (a new control period included), and no
worker left behind.  The command itself (SIGTERM, exit codes): ``test_run_cli.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pytest

from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from xapp.adapters.lab import read_published as published
from xapp.app.config import load_config
from xapp.app.process import XappProcess
from xapp.app.run_cli import configure
from xapp.app.run_options import RunOptions
from xapp.app.wiring import rmr as wiring_rmr
from xapp.core.timings import LIVE, Timings, derive_timings

CONTROLS: dict[str, Any] = {
    "loop": {"control_period_s": 0.1, "kpi_max_age_s": 5.0}, "log_level": "INFO",
    "sdl_namespace": "mcw-proc",
    "default_policy": {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
                       "capacity_floor_mbps": 1.0},
}
KPIS = {"cpes": {"cpe-1": {"nr": {"delivered_mbps": 342, "saturated": 1},
                           "wifi": {"delivered_mbps": 1190, "saturated": 1},
                           "lifi": {"delivered_mbps": 12, "saturated": 1}}}}


def write_config(path: Path, controls: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"name": "mcw-xapp", "version": "0.1.0", "controls": controls}))
    return path


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(argv)


def lab_files(tmp_path: Path) -> dict[str, Path]:
    """A config file, a KPI file and where the weights go."""
    kpi = tmp_path / "kpis.json"
    kpi.write_text(json.dumps(KPIS))
    return {"config": write_config(tmp_path / "config-file.json", CONTROLS), "kpis": kpi,
            "out": tmp_path / "weights.jsonl"}


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, Path]:
    return lab_files(tmp_path)


def lab_process(tmp_path: Path, control_period_s: float) -> XappProcess:
    """A started ``mcw run`` in lab mode (KPI file in, weights file out, SDL in memory) at
    ``control_period_s``; the caller stops it."""
    kpis = tmp_path / "kpis.json"
    kpis.write_text(json.dumps(KPIS))
    config = write_config(tmp_path / "config-file.json",
                          {**CONTROLS, "loop": {**CONTROLS["loop"],
                                                "control_period_s": control_period_s}})
    args = parse(["--config", str(config), "--http-host", "127.0.0.1", "--http-port", "0",
                  "--rmr", "off", "--sdl", "memory", "--estimator", "ewma",
                  "--kpi-file", str(kpis), "--publish-file", str(tmp_path / "w.jsonl")])
    proc = XappProcess(RunOptions.from_args(args), load_config(args.config))
    proc.start()
    return proc


@pytest.fixture
def process(lab: dict[str, Path], redis: RedisServer) -> Iterator[XappProcess]:
    args = parse(["--config", str(lab["config"]), "--http-host", "127.0.0.1", "--http-port", "0",
                  "--rmr", "off", "--estimator", "ewma", "--kpi-file", str(lab["kpis"]),
                  "--publish-file", str(lab["out"]), "--config-poll-s", "0.1"])
    proc = XappProcess(RunOptions.from_args(args), load_config(args.config))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop(grace_s=10)


def test_endpoints(process: XappProcess, lab: dict[str, Path]) -> None:
    assert process.http is not None
    port = process.http.port
    assert wait_until(lambda: len(published(lab["out"])) > 0)
    assert get(port, "/ric/v1/health/alive")[0] == 200
    code, body = get(port, "/ric/v1/health/ready")
    assert code == 200 and json.loads(body) == {"ready": True,
                                                "checks": {"running": True, "sdl": True}}
    code, body = get(port, "/ric/v1/config")
    doc = json.loads(body)
    assert code == 200 and doc["controls"]["loop"]["control_period_s"] == 0.1
    assert doc["descriptor"]["name"] == "mcw-xapp" and doc["policy_type_ids"] == [20100, 20101]
    code, body = get(port, "/metrics")
    text = body.decode()
    assert code == 200
    ticks = [line for line in text.splitlines() if line.startswith("mcw_ticks_total ")]
    assert ticks and float(ticks[0].split()[1]) >= 1
    assert "mcw_tick_duration_seconds_bucket" in text
    assert 'mcw_publishes_total{result="ok"}' in text
    assert get(port, "/nope")[0] == 404
    first = published(lab["out"])[0]
    assert first["cpe_id"] == "cpe-1" and first["version"] >= 1
    assert first["schema"] == "mcw.weights.v2"
    for direction in ("dl", "ul"):
        assert first[direction]["weights"]["wifi"] > first[direction]["weights"]["nr"] > 0


def test_ready_tells_the_truth_about_redis(process: XappProcess, lab: dict[str, Path],
                                           redis: RedisServer) -> None:
    assert process.http is not None
    port = process.http.port
    assert wait_until(lambda: get(port, "/ric/v1/health/ready")[0] == 200)
    assert wait_until(lambda: len(published(lab["out"])) > 0)
    redis.stop()
    assert wait_until(lambda: get(port, "/ric/v1/health/ready")[0] == 503)
    body = json.loads(get(port, "/ric/v1/health/ready")[1])
    assert body["checks"]["sdl"] is False
    # The loop carries on from memory: a capacity change still reaches the CPE.
    before = len(published(lab["out"]))
    lab["kpis"].write_text(json.dumps({"cpes": {"cpe-1": {
        "nr": {"delivered_mbps": 900, "saturated": 1},
        "wifi": {"delivered_mbps": 100, "saturated": 1}}}}))
    assert wait_until(lambda: len(published(lab["out"])) > before)
    assert get(port, "/ric/v1/health/alive")[0] == 200
    redis.start()
    assert wait_until(lambda: get(port, "/ric/v1/health/ready")[0] == 200)
    # Caught up: the CPE's latest published version is in Redis.
    assert wait_until(lambda: process.state.pending() == 0)
    from xapp.adapters.sdl import ricsdl_backend

    sdl = ricsdl_backend()
    stored = json.loads(sdl.get("mcw-proc", {"cpe/cpe-1"})["cpe/cpe-1"])
    sdl.close()
    assert stored["version"] == process.state.cpe("cpe-1").version  # type: ignore[union-attr]


def test_config_change_on_disk_is_applied(process: XappProcess, lab: dict[str, Path],
                                          caplog: pytest.LogCaptureFixture) -> None:
    assert wait_until(lambda: len(published(lab["out"])) > 0)
    assert published(lab["out"])[-1]["ul"]["weights"]["wifi"] > 10
    write_config(lab["config"], {**CONTROLS, "log_level": "DEBUG", "default_policy": {
        **CONTROLS["default_policy"], "max_weight": 10}})
    assert wait_until(lambda: max(published(lab["out"])[-1]["ul"]["weights"].values()) <= 10)
    assert process.watcher.current.controls.log_level == "DEBUG"
    # A broken file is ignored (once the watcher has read it) and the running configuration stays.
    with caplog.at_level(logging.ERROR, logger="xapp.app.config"):
        lab["config"].write_text("{broken")
        assert wait_until(lambda: any("ignored" in r.getMessage() for r in caplog.records))
    assert process.watcher.current.controls.default_policy["max_weight"] == 10


def test_ready_says_rmr_is_off_in_auto_mode_without_the_library(
        lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: with ``--rmr auto`` and no librmr, /ready said ``"rmr": true`` while no A1
    request could arrive.  Now the check is false and ``disabled`` says why; the pod stays
    ready, which is what auto mode is for."""
    monkeypatch.setattr(wiring_rmr, "rmr_library_available",
                        lambda: (False, "librmr_si.so: cannot open shared object file"))
    args = parse(["--config", str(lab["config"]), "--http-host", "127.0.0.1", "--http-port", "0",
                  "--rmr", "auto", "--sdl", "memory", "--estimator", "ewma",
                  "--kpi-file", str(lab["kpis"]), "--publish-file", str(lab["out"])])
    proc = XappProcess(RunOptions.from_args(args), load_config(args.config))
    proc.start()
    try:
        assert proc.http is not None
        code, body = get(proc.http.port, "/ric/v1/health/ready")
        doc = json.loads(body)
        assert code == 200 and doc["ready"] is True and doc["checks"]["rmr"] is False
        assert "--rmr auto without the RMR library (librmr_si.so: cannot open" in \
            doc["disabled"]["rmr"]
        assert "no A1" in doc["disabled"]["rmr"]
        metrics = get(proc.http.port, "/metrics")[1].decode()
        assert 'mcw_dependency_up{dependency="rmr"} 0.0' in metrics
    finally:
        proc.stop(grace_s=10)


def test_a_stopped_process_leaves_no_worker_behind(lab: dict[str, Path],
                                                   redis: RedisServer) -> None:
    """Every worker thread ends with the process: the clock reader used to go on reading a
    Redis that was gone, for as long as the interpreter lived (seen in CI's log)."""
    args = parse(["--config", str(lab["config"]), "--http-host", "127.0.0.1", "--http-port", "0",
                  "--rmr", "off", "--estimator", "ewma", "--kpi-file", str(lab["kpis"]),
                  "--publish-file", str(lab["out"])])
    before = {t.ident for t in threading.enumerate()}
    proc = XappProcess(RunOptions.from_args(args), load_config(args.config))
    proc.start()
    assert proc.clock is not None  # the Redis version store reads Redis' clock
    proc.stop(grace_s=10)
    left = sorted(t.name for t in threading.enumerate()
                  if t.ident not in before and t.is_alive() and t.name.startswith("mcw-"))
    assert left == []


@pytest.fixture
def slow(tmp_path: Path) -> Iterator[tuple[XappProcess, Path]]:
    """A lab process at a 10 s period, and its config file."""
    proc = lab_process(tmp_path, 10.0)
    try:
        yield proc, tmp_path / "config-file.json"
    finally:
        proc.stop(5)


def _reload(proc: XappProcess, config: Path, period: float) -> None:
    old = proc.config
    write_config(config, {**CONTROLS, "loop": {**CONTROLS["loop"], "control_period_s": period}})
    proc._on_config(old, load_config(config))


def test_a_lab_process_follows_a_new_period_whole(slow: tuple[XappProcess, Path]) -> None:
    proc, config = slow
    assert proc.timings_in_use() == LIVE  # no InfluxDB, Redis or shards: nothing else held
    _reload(proc, config, 1.0)
    assert proc.loop is not None and proc.loop.settings.control_period_s == 1.0
    assert proc.timings == derive_timings(1.0)
    assert proc.http is not None
    doc = json.loads(get(proc.http.port, "/ric/v1/config")[1])
    assert doc["timings"] == asdict(derive_timings(1.0))


def test_a_process_holding_derived_timings_keeps_its_period_and_says_why(
        slow: tuple[XappProcess, Path], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before issue 33 the loop took 1 s while the InfluxDB timeout, flush and intake kept
    10 s's values, and nothing was logged."""
    proc, config = slow
    every = frozenset(f.name for f in fields(Timings))
    monkeypatch.setattr(proc, "timings_in_use", lambda: every - {"shard_lease_s"})
    with caplog.at_level(logging.WARNING, logger="xapp.app.process"):
        _reload(proc, config, 1.0)
    assert proc.loop is not None and proc.loop.settings.control_period_s == 10.0
    assert proc.timings == derive_timings(10.0)
    assert any("needs a restart" in r.getMessage()
               and "influx_timeout_ms 10000 -> 2000" in r.getMessage() for r in caplog.records)
    # Other loop settings of the same reload still apply.
    old = proc.config
    write_config(config, {**CONTROLS, "loop": {**CONTROLS["loop"], "control_period_s": 10.0,
                                               "kpi_max_age_s": 7.0}})
    proc._on_config(old, load_config(config))
    assert proc.loop.settings.kpi_max_age_s == 7.0
