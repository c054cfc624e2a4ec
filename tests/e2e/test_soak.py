"""``bench/soak.py``'s smoke: a short soak through the shipped stack with two faults.

It checks the report's shape and that every fault was injected and recovered; the memory
figures are the bench's, not a test's (a minute says nothing about a leak)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.stack import AGENT_BINARY, REPO
from tests.support.influxd import influxd_binary
from tests.support.mosquitto import mosquitto_binary
from tests.support.redis_server import redis_binary

pytestmark = pytest.mark.skipif(
    not AGENT_BINARY.exists() or mosquitto_binary() is None or influxd_binary() is None
    or redis_binary() is None,
    reason="needs mosquitto, influxd, redis-server and make agent")


def test_short_soak_recovers_every_fault(tmp_path: Path) -> None:
    cmd = [sys.executable, str(REPO / "bench" / "soak.py"), "--minutes", "1.5", "--cpes", "20",
           "--agents", "3", "--faults", "2", "--pool", "broker-restart,redis-restart",
           "--warmup-s", "15", "--sample-s", "5", "--json", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, timeout=280, cwd=REPO)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-3000:]
    doc = json.loads(res.stdout)
    assert (doc["cpes"], doc["agents"], doc["minutes"]) == (20, 3, 1.5)
    f = doc["faults"]
    assert f["planned"] == f["injected"] == f["recovered"] == 2, f
    assert all(not x["failed_checks"] for x in f["list"]), f["list"]
    for which in ("xapp", "total"):
        fig = doc["rss"][which]
        assert 0 < fig["start_mib"] <= fig["peak_mib"] and fig["end_mib"] <= fig["peak_mib"]
        assert fig["restarts"] == 0
        assert {"last_half_growth_pct", "last_half_slope_mib_per_min"} <= set(fig)
    rows = (tmp_path / "soak.csv").read_text().splitlines()
    assert rows[0].startswith("t_s,pid,xapp_rss_mib")
    assert len(rows) - 1 == doc["rss"]["xapp"]["samples"] >= 10
    assert Path(doc["png"]).stat().st_size > 10_000
