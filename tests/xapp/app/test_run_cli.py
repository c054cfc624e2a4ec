"""``mcw run`` as a subprocess, lab mode: SIGTERM stops it cleanly (and a restart keeps the
versions growing), start-up errors exit with their code and say why, ``--help`` explains."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from tests.xapp.app.test_process import CONTROLS, lab_files
from xapp.adapters.lab import read_published as published
from xapp.adapters.sdl import ricsdl_backend


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, Path]:
    return lab_files(tmp_path)


def stored_version(cpe: str) -> int:
    """The version of ``cpe``'s record in SDL (0 before the flusher wrote one)."""
    sdl = ricsdl_backend()
    try:
        raw = sdl.get(CONTROLS["sdl_namespace"], {f"cpe/{cpe}"}).get(f"cpe/{cpe}")
    finally:
        sdl.close()
    return int(json.loads(raw)["version"]) if raw else 0


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
            assert wait_until(lambda: stored_version("cpe-1") >= versions[-1])  # noqa: B023
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
