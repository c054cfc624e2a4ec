"""The real-stack bench's smoke: one short scenario through the shipped path, end to end.

``bench/bench_realstack.py`` as an operator runs it, on ``wifi-backhaul`` (make e2e's case) for
a few seconds with three policies: the default scheduler alone, the oracle through the real
agents, and ``mcw run`` with the shipped signed model.  It checks the report's shape and that
every policy moved bytes both ways; the figures themselves are the bench's, not a test's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack import AGENT_BINARY, REPO
from tests.support.influxd import influxd_binary
from tests.support.mosquitto import mosquitto_binary
from tests.support.redis_server import redis_binary

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not AGENT_BINARY.exists() or mosquitto_binary() is None
    or influxd_binary() is None or redis_binary() is None or shutil.which("ip") is None
    or shutil.which("iptables-restore") is None,
    reason="needs root, ip, iptables, mosquitto, influxd, redis-server and make agent")


def test_one_scenario_end_to_end(tmp_path: Path) -> None:
    policies = ("default", "oracle", "model")
    cmd = [sys.executable, str(REPO / "bench" / "bench_realstack.py"), "--scenario",
           "wifi-backhaul", "--runs", "1", "--duration", "6", "--warmup", "3", "--json",
           "--out", str(tmp_path)]
    for p in policies:
        cmd += ["--policy", p]
    res = subprocess.run(cmd, capture_output=True, timeout=400, cwd=REPO)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-3000:]
    doc = json.loads(res.stdout)
    assert doc["runs"] == 1
    s = doc["scenarios"]["wifi-backhaul"]
    for d in ("dl", "ul"):
        assert set(s[d]) == set(policies)
        assert set(s["twin"][d]) == set(policies)
        # Every policy carried traffic: a dead connection or a shaper that cut everything
        # shows here, not a figure to judge.
        assert all(0.2 < v < 1.1 for v in s[d].values()), s[d]
        assert 0.0 < s["twin"][d]["default"] <= 1.0
        assert s["vs_default"][d]["default"] == 1.0
    assert all(p50 is not None and p95 >= p50 for p50, p95 in s["rtt_ms"].values())
    assert Path(s["png"]).stat().st_size > 10_000
    assert (tmp_path / "realstack.json").exists()
    # The paths carried traffic before the xApp's first weights: the small flow had an answer
    # and the bulk's first second with bytes had begun (its records are per whole second,
    # stamped at the second's end).  Orders of stamps of the wall clock; the xApp's record
    # counts from the trace's start.
    run = tmp_path / "wifi-backhaul" / "run1" / "model"
    trace_start = json.loads((run / "applied.json").read_text())["t0"]
    first_weight = trace_start + min(r["t"] for r in _jsonl(run / "forecasts.jsonl")
                                     if r["kind"] == "weight")
    assert min(r["t"] for r in _jsonl(run / "rtt.jsonl")) < first_weight
    assert min(r["t"] for r in _jsonl(run / "dl.jsonl") if r["mbps"] > 0) - 1 < first_weight


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
