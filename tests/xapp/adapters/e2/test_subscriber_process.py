"""``mcw run`` with E2 on: the subscriber worker, the callback and the E2 endpoints in-process.

Lab mode (KPI and weight files), RMR off, SDL in a real redis-server; the Subscription Manager
is the stand-in of :mod:`submgr_stand_in` on loopback, the node comes from
``controls.e2.nodes``.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.polling import free_port, wait_until
from tests.support.redis_server import RedisServer
from tests.xapp.adapters.e2.submgr_stand_in import MEID, StandInSubmgr
from xapp.app.config import load_config
from xapp.app.process import XappProcess
from xapp.app.run_cli import configure
from xapp.app.run_options import RunOptions


def get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        body = r.read()
    return body if path == "/metrics" else json.loads(body)


def start(tmp_path: Path, e2: dict[str, Any], http_port: int,
          rmr: str = "off") -> XappProcess:
    kpis = tmp_path / "kpis.json"
    kpis.write_text(json.dumps({"cpes": {}}))
    config = tmp_path / "config-file.json"
    config.write_text(json.dumps({"name": "mcw-xapp", "controls": {
        "loop": {"control_period_s": 0.2}, "sdl_namespace": "mcw-e2proc", "e2": e2}}))
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args([
        "--config", str(config), "--http-host", "127.0.0.1", "--http-port", str(http_port),
        "--rmr", rmr, "--estimator", "ewma", "--kpi-file", str(kpis),
        "--publish-file", str(tmp_path / "out.jsonl")])
    proc = XappProcess(RunOptions.from_args(args), load_config(args.config))
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


def test_indications_go_through_the_decoder_process_into_the_intake(
        tmp_path: Path, redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21: what ``mcw run`` wires behind RMR.  RMR's C library is not here: the glue is
    started without it (its workers only) and messages go in through its dispatch, as RMR's
    receive thread hands them over; from there on everything is what runs in a RIC."""
    from xapp.adapters import rmr
    from xapp.adapters.e2 import e2ap, kpm_encode
    from xapp.adapters.e2.decoder_process import DecoderProcess
    from xapp.adapters.e2.records import KpmReport, RicIndication, RicRequestId
    from xapp.app.wiring import rmr as rmr_wiring

    monkeypatch.setattr(rmr_wiring, "rmr_library_available", lambda: (True, ""))
    monkeypatch.setattr(rmr.RmrGlue, "start", rmr.RmrGlue.start_handlers)
    monkeypatch.setattr(rmr.RmrGlue, "rmr_healthy", lambda self: True)
    monkeypatch.setattr(rmr.RmrGlue, "_free", lambda self, sbuf: None)
    cell = "02f839-00000000a"
    submgr = StandInSubmgr()
    port = free_port()
    proc = start(tmp_path, {
        "submgr_url": submgr.url, "client_host": "127.0.0.1", "http_port": port,
        "rnib": False, "poll_period_s": 0.2, "report_styles": [1],
        "nodes": [{"inventory_name": MEID, "ran_function_id": 2, "kpm_version": 3,
                   "cell": cell}]}, port, rmr="auto")
    try:
        assert proc.e2 is not None and proc.rmr is not None
        assert proc.rmr.e2_worker is proc.e2.decoder
        assert isinstance(proc.e2.decoder, DecoderProcess)
        assert wait_until(lambda: get(port, "/ric/v1/e2/subscriptions")["nodes"].get(
            MEID, {}).get("subscription", {}).get("state") == "active", timeout_s=10)
        assert wait_until(lambda: proc.health().readiness()[1]["e2-decoder"], timeout_s=30)
        proc.e2.registry.add("cpe-1", ["crnti:1"], cell)
        header = kpm_encode.encode_kpm_indication_header(1_700_000_000_000, 3)
        message = kpm_encode.encode_kpm_indication_message(
            [KpmReport({"RRU.PrbUsedDl": 25.0, "RRU.PrbAvailDl": 100.0})], 3,
            granularity_ms=1000)
        payload = e2ap.encode_ric_indication(RicIndication(
            RicRequestId(123, 7), 2, 1, 1, "report", header, message))
        proc.rmr.dispatch(None, {rmr.MS_MSG_TYPE: rmr.RIC_INDICATION, rmr.MS_PAYLOAD: payload,
                                 rmr.MS_MEID: MEID.encode()}, object())
        ingest = proc.e2.ingest
        assert wait_until(lambda: ingest.counters["accepted"] == 1, timeout_s=30), \
            ingest.counters
        assert proc.components is not None
        snap = proc.components.intake.latest(time.time(), 60.0)
        assert snap.direction is not None
        got = {(str(c), str(d)): float(v) for c, d, v in
               zip(snap.cpe, snap.direction, snap.column("prb_util"), strict=True)}
        assert got[("cpe-1", "dl")] == pytest.approx(0.25)
        alive = proc.alive()[1]
        assert alive["mcw-e2-decoder"] == "ok" and alive["mcw-e2-decoder-feed"] == "ok"
        metrics = get(port, "/metrics").decode()
        assert 'mcw_e2_indications_dropped_total{reason="queue_full"} 0.0' in metrics
        assert 'mcw_e2_indication_events_total{event="decoded_v3"} 1.0' in metrics
        child = proc.e2.decoder._child
        assert child is not None
    finally:
        proc.stop(5)
        submgr.close()
    assert child.process.poll() is not None  # stopping the xApp ends its decoder process
