"""``mcw run`` with E2 on: the subscriber worker, the callback and the E2 endpoints in-process.

Lab mode (KPI and weight files), RMR off, SDL in a real redis-server; the Subscription Manager
is the stand-in of :mod:`test_subscriptions` on loopback, the node comes from
``controls.e2.nodes``.
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2.test_subscriptions import MEID, StandInSubmgr
from tests.support.polling import free_port, wait_until
from tests.support.redis_server import RedisServer
from xapp.app import runtime
from xapp.app.config import load_config


def get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        body = r.read()
    return body if path == "/metrics" else json.loads(body)


def start(tmp_path: Path, e2: dict[str, Any], http_port: int) -> runtime.XappProcess:
    kpis = tmp_path / "kpis.json"
    kpis.write_text(json.dumps({"cpes": {}}))
    config = tmp_path / "config-file.json"
    config.write_text(json.dumps({"name": "mcw-xapp", "controls": {
        "control_period_s": 0.2, "sdl_namespace": "mcw-e2proc", "e2": e2}}))
    parser = argparse.ArgumentParser()
    runtime.configure(parser)
    args = parser.parse_args([
        "--config", str(config), "--http-host", "127.0.0.1", "--http-port", str(http_port),
        "--rmr", "off", "--estimator", "ewma", "--kpi-file", str(kpis),
        "--publish-file", str(tmp_path / "out.jsonl")])
    proc = runtime.XappProcess(args, load_config(args.config))
    proc.start()
    return proc


def test_e2_off_without_submgr_url(tmp_path: Path, redis: RedisServer) -> None:
    proc = start(tmp_path, {"submgr_url": ""}, 0)
    try:
        assert proc.http is not None
        assert get(proc.http.port, "/ric/v1/e2/subscriptions")["active"] is False
        assert get(proc.http.port, "/ric/v1/config")["e2"]["active"] is False
        assert "mcw-e2-subscriptions" not in proc.alive()[1]
    finally:
        proc.stop(5)


def test_e2_subscribes_serves_and_unsubscribes(tmp_path: Path, redis: RedisServer) -> None:
    submgr = StandInSubmgr()
    port = free_port()
    proc = start(tmp_path, {
        "submgr_url": submgr.url, "client_host": "127.0.0.1", "http_port": port,
        "rnib": True, "poll_period_s": 0.2, "report_styles": [1],
        "nodes": [{"inventory_name": MEID, "ran_function_id": 2, "kpm_version": 3}]}, port)
    try:
        assert wait_until(lambda: get(port, "/ric/v1/e2/subscriptions")["nodes"].get(
            MEID, {}).get("subscription", {}).get("state") == "active", timeout_s=10)
        view = get(port, "/ric/v1/e2/subscriptions")
        sub = view["nodes"][MEID]["subscription"]
        assert sub["id"] == "sub-1" and sub["instances"][0]["e2_instance_id"] == 7
        assert view["nodes"][MEID]["kpm"]["version"] == 3
        assert "received" in view["indications"]
        config = get(port, "/ric/v1/config")
        assert config["e2"] == {"active": True, "nodes": {"active": 1},
                                "active_subscriptions": 1,
                                "details": "/ric/v1/e2/subscriptions"}
        assert config["controls"]["e2"]["submgr_url"] == submgr.url
        metrics = get(port, "/metrics").decode()
        assert 'mcw_e2_nodes{state="active"} 1.0' in metrics
        assert 'mcw_e2_subscription_events_total{event="requests"} 1.0' in metrics
        assert 'mcw_worker_up{state="ok",worker="mcw-e2-subscriptions"} 1.0' in metrics
        assert proc.alive()[1]["mcw-e2-subscriptions"] == "ok"
    finally:
        proc.stop(5)
        submgr.close()
    assert submgr.deletes == ["sub-1"]
    assert not submgr.problems
