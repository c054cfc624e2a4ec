"""``mcw run`` in-process and as a subprocess, lab mode (files for KPIs and weights), real Redis.

HTTP endpoints on a free port, ``/ready`` following Redis going away and coming back, the loop
carrying on meanwhile, hot reload of config-file.json, and SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from xapp.adapters.lab import read_published as published
from xapp.app import runtime as main
from xapp.app.config import load_config

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
    main.configure(parser)
    return parser.parse_args(argv)


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, Path]:
    kpi = tmp_path / "kpis.json"
    kpi.write_text(json.dumps(KPIS))
    return {"config": write_config(tmp_path / "config-file.json", CONTROLS), "kpis": kpi,
            "out": tmp_path / "weights.jsonl"}


def lab_process(tmp_path: Path, control_period_s: float) -> main.XappProcess:
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
    proc = main.XappProcess(main.RunOptions.from_args(args), load_config(args.config))
    proc.start()
    return proc


@pytest.fixture
def process(lab: dict[str, Path], redis: RedisServer) -> Iterator[main.XappProcess]:
    args = parse(["--config", str(lab["config"]), "--http-host", "127.0.0.1", "--http-port", "0",
                  "--rmr", "off", "--estimator", "ewma", "--kpi-file", str(lab["kpis"]),
                  "--publish-file", str(lab["out"]), "--config-poll-s", "0.1"])
    proc = main.XappProcess(main.RunOptions.from_args(args), load_config(args.config))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop(grace_s=10)


def test_endpoints(process: main.XappProcess, lab: dict[str, Path]) -> None:
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
    assert doc["descriptor"]["name"] == "mcw-xapp" and doc["policy_type_id"] == 20100
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


def test_ready_tells_the_truth_about_redis(process: main.XappProcess, lab: dict[str, Path],
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


def test_config_change_on_disk_is_applied(process: main.XappProcess, lab: dict[str, Path]) -> None:
    assert wait_until(lambda: len(published(lab["out"])) > 0)
    assert published(lab["out"])[-1]["ul"]["weights"]["wifi"] > 10
    write_config(lab["config"], {**CONTROLS, "log_level": "DEBUG", "default_policy": {
        **CONTROLS["default_policy"], "max_weight": 10}})
    assert wait_until(lambda: max(published(lab["out"])[-1]["ul"]["weights"].values()) <= 10)
    assert process.watcher.current.controls.log_level == "DEBUG"
    # A broken file is ignored and the running configuration stays.
    lab["config"].write_text("{broken")
    time.sleep(0.5)
    assert process.watcher.current.controls.default_policy["max_weight"] == 10


def test_sigterm_stops_cleanly_and_restart_keeps_versions(lab: dict[str, Path],
                                                          redis: RedisServer) -> None:
    # A restarted xApp restores the CPE's weights and does not resend them until half the
    # lease has passed (the retained message is still with the broker); a short lease keeps
    # the test short.  Also exercises an MCW_* override.
    env = {**os.environ, **redis.dbaas_env(), "MCW_LOOP_LEASE_S": "2"}
    cmd = [sys.executable, "-m", "xapp.cli", "run", "--config", str(lab["config"]),
           "--http-host", "127.0.0.1", "--http-port", "0", "--rmr", "off",
           "--estimator", "ewma", "--kpi-file", str(lab["kpis"]),
           "--publish-file", str(lab["out"]), "--grace-s", "10"]
    versions: list[int] = []
    for _ in range(2):
        seen = len(versions)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert wait_until(lambda: len(published(lab["out"])) > seen)  # noqa: B023
            versions = [p["version"] for p in published(lab["out"])]
            time.sleep(0.5)  # let the SDL flusher write the CPE record
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, out.decode()[-3000:]
        assert time.monotonic() - started < 10
        lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
        assert lines and all({"ts", "crit", "id", "msg"} <= set(line) for line in lines)
        assert any("stopped" in line["msg"] for line in lines)
    # Versions keep growing across the restart (ceilings in SDL).
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


@pytest.mark.parametrize("extra_env, extra_args, code, words", [
    ({"MCW_MODEL_PATH": "/nonexistent/model"}, ["--estimator", "model"], 1,
     "capacity model not loadable"),
    ({"MCW_LOOP_CONTROL_PERIOD_S": "-3"}, [], 2, "control_period_s"),
])
def test_start_up_errors_are_clear(lab: dict[str, Path], extra_env: dict[str, str],
                                   extra_args: list[str], code: int, words: str) -> None:
    cmd = [sys.executable, "-m", "xapp.cli", "run", "--config", str(lab["config"]),
           "--http-host", "127.0.0.1", "--http-port", "0", "--rmr", "off", "--sdl", "memory",
           "--kpi-file", str(lab["kpis"]), "--publish-file", str(lab["out"]), *extra_args]
    done = subprocess.run(cmd, env={**os.environ, **extra_env}, capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == code
    assert words in done.stdout.decode() + done.stderr.decode()
    assert not lab["out"].exists()


def test_help_explains() -> None:
    done = subprocess.run([sys.executable, "-m", "xapp.cli", "run", "--help"],
                          capture_output=True, timeout=60, check=True)
    text = done.stdout.decode()
    assert "--kpi-file" in text and "CONFIG_FILE" in text and "/ric/v1/health/ready" in text


def test_ready_says_rmr_is_off_in_auto_mode_without_the_library(
        lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: with ``--rmr auto`` and no librmr, /ready said ``"rmr": true`` while no A1
    request could arrive.  Now the check is false and ``disabled`` says why; the pod stays
    ready, which is what auto mode is for."""
    import xapp.adapters.rmr as rmr

    monkeypatch.setattr(rmr, "rmr_library_available",
                        lambda: (False, "librmr_si.so: cannot open shared object file"))
    args = parse(["--config", str(lab["config"]), "--http-host", "127.0.0.1", "--http-port", "0",
                  "--rmr", "auto", "--sdl", "memory", "--estimator", "ewma",
                  "--kpi-file", str(lab["kpis"]), "--publish-file", str(lab["out"])])
    proc = main.XappProcess(main.RunOptions.from_args(args), load_config(args.config))
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
    proc = main.XappProcess(main.RunOptions.from_args(args), load_config(args.config))
    proc.start()
    assert proc.clock_worker is not None  # the Redis version store reads Redis' clock
    proc.stop(grace_s=10)
    left = sorted(t.name for t in threading.enumerate()
                  if t.ident not in before and t.is_alive() and t.name.startswith("mcw-"))
    assert left == []
