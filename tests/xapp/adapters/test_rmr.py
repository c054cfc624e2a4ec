"""Real RMR round trips with a running ``mcw run`` on loopback and a static route table, and a
RIC Indication (12050) through an in-process ``RmrGlue`` into the intake.

Skipped, with the reason, when ``librmr_si.so`` cannot be loaded (it is in no package registry;
the image installs it, and a local build can be pointed at with LD_LIBRARY_PATH).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.stack import http_get
from tests.support.paths import SHARED
from tests.support.polling import free_port, wait_until
from tests.support.redis_server import RedisServer
from xapp.adapters.lab import read_published as published
from xapp.adapters.rmr import rmr_library_available

_ok, _why = rmr_library_available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"RMR round trips need RMR: {_why}")

A1_POLICY_REQ, A1_POLICY_RESP, A1_POLICY_QUERY = 20010, 20011, 20012
KPIS = {"cpes": {"cpe-1": {"nr": {"delivered_mbps": 342, "saturated": 1},
                           "wifi": {"delivered_mbps": 1190, "saturated": 1},
                           "lifi": {"delivered_mbps": 12, "saturated": 1}},
                 "cpe-2": {"nr": {"delivered_mbps": 300, "saturated": 1},
                           "wifi": {"delivered_mbps": 600, "saturated": 1}}}}


def ticks(http_port: int) -> float:
    """The control loop's ticks so far (``mcw_ticks_total`` of /metrics; 0 while unreachable)."""
    code, body = http_get(http_port, "/metrics")
    if code != 200:
        return 0.0
    return sum(s.value for fam in text_string_to_metric_families(body.decode())
               for s in fam.samples if s.name == "mcw_ticks_total")


@pytest.fixture
def rig(tmp_path: Path, redis: RedisServer, monkeypatch: pytest.MonkeyPatch
        ) -> Iterator[dict[str, Any]]:
    """A running ``mcw run`` (subprocess) and an RMR peer in this process, routed to each other."""
    xapp_port, peer_port, http_port = free_port(), free_port(), free_port()
    routes = tmp_path / "routes.rt"
    routes.write_text("newrt|start\n"
                      f"rte|{A1_POLICY_REQ}|127.0.0.1:{xapp_port}\n"
                      f"rte|100|127.0.0.1:{xapp_port}\n"
                      f"rte|{A1_POLICY_QUERY}|127.0.0.1:{peer_port}\n"
                      "newrt|end\n")
    rmr_env = {"RMR_SEED_RT": str(routes), "RMR_RTG_SVC": "-1", "RMR_SRC_ID": "127.0.0.1"}
    for k, v in rmr_env.items():
        monkeypatch.setenv(k, v)
    config = tmp_path / "config-file.json"
    config.write_text(json.dumps({"name": "mcw-xapp", "version": "0.1.0", "controls": {
        "loop": {"control_period_s": 0.1}, "sdl_namespace": "mcw-rmr", "log_level": "INFO"}}))
    kpis = tmp_path / "kpis.json"
    kpis.write_text(json.dumps(KPIS))
    out = tmp_path / "weights.jsonl"
    env = {**os.environ, **redis.dbaas_env(), **rmr_env, "CONFIG_FILE": str(config)}
    for k in ("HOSTNAME",):  # no appmgr here: registration is skipped with a warning
        env.pop(k, None)
    from tests.xapp.adapters.rmr_peer import RmrPeer

    peer = RmrPeer(peer_port)
    proc = subprocess.Popen(
        [sys.executable, "-m", "xapp.cli", "run", "--rmr", "on", "--rmr-port", str(xapp_port),
         "--http-host", "127.0.0.1", "--http-port", str(http_port), "--estimator", "ewma",
         "--kpi-file", str(kpis), "--publish-file", str(out), "--grace-s", "10"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        yield {"peer": peer, "proc": proc, "out": out, "http_port": http_port}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        peer.close()


def queries(peer: Any) -> list[dict[str, Any]]:
    """The A1_POLICY_QUERY the xApp sends at start: one per policy type it handles."""
    return [json.loads(peer.receive(A1_POLICY_QUERY, timeout_s=20)) for _ in range(2)]


def test_a1_policy_round_trip_changes_published_weights(rig: dict[str, Any]) -> None:
    peer, out = rig["peer"], rig["out"]
    # At start the xApp asks the mediator to resend the instances of its types.
    assert queries(peer) == [{"policy_type_id": 20100}, {"policy_type_id": 20101}]
    assert wait_until(lambda: any(p["cpe_id"] == "cpe-1" for p in published(out)))
    assert [p for p in published(out) if p["cpe_id"] == "cpe-1"][-1]["ul"]["weights"]["wifi"] > 0

    # The Go mediator's encoding: type id as a string, payload as a JSON string.
    resp = peer.request(A1_POLICY_REQ, {
        "operation": "CREATE", "policy_type_id": "20100", "policy_instance_id": "no-wifi",
        "payload": json.dumps({"excluded_wats": ["wifi"], "scope": {"cpes": ["cpe-1"]}})},
        A1_POLICY_RESP)
    assert resp["status"] == "OK" and resp["policy_type_id"] == 20100
    assert resp["policy_instance_id"] == "no-wifi" and resp["handler_id"]

    def last(cpe: str) -> dict[str, int]:
        weights: dict[str, int] = [p for p in published(out)
                                   if p["cpe_id"] == cpe][-1]["ul"]["weights"]
        return weights

    assert wait_until(lambda: last("cpe-1").get("wifi") == 0 and last("cpe-1")["nr"] > 0)
    assert last("cpe-2")["wifi"] > 0  # out of scope

    # An invalid update is refused and the policy stays.
    resp = peer.request(A1_POLICY_REQ, {
        "operation": "UPDATE", "policy_type_id": 20100, "policy_instance_id": "no-wifi",
        "payload": {"max_weight": 999}}, A1_POLICY_RESP)
    assert resp["status"] == "ERROR"
    refused_at = ticks(rig["http_port"])
    # Two ticks on the book as the refusal left it: a changed policy would have republished.
    assert wait_until(lambda: ticks(rig["http_port"]) >= refused_at + 2)
    assert last("cpe-1")["wifi"] == 0

    resp = peer.request(A1_POLICY_REQ, {"operation": "DELETE", "policy_type_id": 20100,
                                        "policy_instance_id": "no-wifi"}, A1_POLICY_RESP)
    assert resp["status"] == "DELETED"
    assert wait_until(lambda: last("cpe-1")["wifi"] > 0)


def test_health_check_is_answered(rig: dict[str, Any]) -> None:
    peer = rig["peer"]
    peer.send(100, b"ping")
    assert peer.receive(101, timeout_s=20) == b"OK\n"


def test_sigterm_with_rmr_stops_within_grace(rig: dict[str, Any]) -> None:
    peer, proc = rig["peer"], rig["proc"]
    queries(peer)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out.decode()[-3000:]
    assert time.monotonic() - started < 10


def test_hostile_a1_requests_do_not_stop_a1_or_health_checks(rig: dict[str, Any]) -> None:
    """Issue 9: before, a deep or non-ASCII-digit request raised out of the handler and killed
    the frame's dispatch thread; nothing was answered again."""
    peer = rig["peer"]
    queries(peer)
    hostile = [
        b'{"operation":"CREATE","policy_type_id":20100,"policy_instance_id":"p",'
        b'"payload":' + b"[" * 5000 + b"]" * 5000 + b"}",
        json.dumps({"operation": "CREATE", "policy_type_id": "\u00b2",
                    "policy_instance_id": "p", "payload": {}}).encode(),
        json.dumps({"operation": "CREATE", "policy_type_id": 20100,
                    "policy_instance_id": "p", "payload": {"scope": {"cpes": ["cpe-1\n"]}}}
                   ).encode(),
    ]
    for raw in hostile:
        peer.send(A1_POLICY_REQ, raw)
        assert json.loads(peer.receive(A1_POLICY_RESP, timeout_s=20))["status"] == "ERROR"
    peer.send(100, b"ping")
    assert peer.receive(101, timeout_s=20) == b"OK\n"
    resp = peer.request(A1_POLICY_REQ, {"operation": "CREATE", "policy_type_id": 20100,
                                        "policy_instance_id": "after", "payload": {}},
                        A1_POLICY_RESP)
    assert resp["status"] == "OK"


def big_request(iid: str) -> bytes:
    """Issue 22's request: ``scope.cpes = [0, "c0", ..., "c29999"]``, 282 KiB, refused."""
    return json.dumps({"operation": "CREATE", "policy_type_id": 20100,
                       "policy_instance_id": iid, "payload": {"scope": {
                           "cpes": [0] + [f"c{i}" for i in range(30000)]}}}).encode()


def test_the_282_kib_request_of_issue_22_and_a_health_check_during_it(
        rig: dict[str, Any]) -> None:
    """Issue 22: answered after 50 s before, with the health check unanswered all along.  How
    long the health check waits is not timed here (wall time on a shared machine says little):
    what held it, the frame's copy of the payload, is counted in
    ``test_a_282_kib_payload_is_copied_once_on_its_way_in``."""
    peer = rig["peer"]
    queries(peer)
    peer.send(100, b"ping")
    assert peer.receive(101, timeout_s=20) == b"OK\n"  # warm: connections are up
    peer.send(A1_POLICY_REQ, big_request("p-big"))
    peer.send(100, b"ping")
    assert peer.receive(101, timeout_s=20) == b"OK\n"
    resp = json.loads(peer.receive(A1_POLICY_RESP, timeout_s=20))
    assert (resp["status"], resp["policy_instance_id"]) == ("ERROR", "p-big")


def test_a1_requests_and_health_checks_under_load_are_all_answered_in_order(
        rig: dict[str, Any]) -> None:
    """150 A1 requests, every 30th the 282 KiB one, with a health check after every third,
    sent without waiting: each request is answered once, in the order sent (one A1 worker,
    none dropped: fewer than its queue holds), and every health check OK."""
    peer = rig["peer"]
    queries(peer)
    expected, checks = [], 0
    for i in range(150):
        iid = f"load-{i}"
        if i % 30 == 15:
            peer.send(A1_POLICY_REQ, big_request(iid))
            expected.append((iid, "ERROR"))
        else:
            peer.send(A1_POLICY_REQ, json.dumps({
                "operation": "CREATE", "policy_type_id": 20100, "policy_instance_id": iid,
                "payload": {"scope": {"cpes": [f"cpe-{i % 2 + 1}"]}}}).encode())
            expected.append((iid, "OK"))
        if i % 3 == 0:
            peer.send(100, b"ping")
            checks += 1
    answers = [json.loads(peer.receive(A1_POLICY_RESP, timeout_s=30)) for _ in expected]
    assert [(a["policy_instance_id"], a["status"]) for a in answers] == expected
    assert [peer.receive(101, timeout_s=30) for _ in range(checks)] == [b"OK\n"] * checks
    assert not peer.received  # nothing else, and nothing twice


# --- RmrGlue in this process, on a static route table ----------------------------------------

RIC_INDICATION = 12050


def route_to_glue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, glue_port: int,
                  peer_port: int) -> None:
    """RIC indications and health checks to the glue; health answers and the A1 query to the
    peer; no appmgr and no config file (registration is skipped)."""
    routes = tmp_path / "routes.rt"
    routes.write_text("newrt|start\n"
                      f"rte|{RIC_INDICATION}|127.0.0.1:{glue_port}\n"
                      f"rte|100|127.0.0.1:{glue_port}\n"
                      f"rte|101|127.0.0.1:{peer_port}\n"
                      f"rte|{A1_POLICY_QUERY}|127.0.0.1:{peer_port}\n"
                      "newrt|end\n")
    for k, v in {"RMR_SEED_RT": str(routes), "RMR_RTG_SVC": "-1",
                 "RMR_SRC_ID": "127.0.0.1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("HOSTNAME", raising=False)
    monkeypatch.delenv("CONFIG_FILE", raising=False)


def test_a_282_kib_payload_is_copied_once_on_its_way_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy_types: Any) -> None:
    """Issue 33 item 8: the frame's receive thread built each payload from a tuple of one
    Python int per byte (60-80 ms for 282 KiB, the interpreter lock held), and the health
    check sent right after the 282 KiB request of issue 22 waited for it.  Counted, not
    timed: while a message of that size and a health check behind it are received and
    answered, Python allocates less than twice the payload (nine times before)."""
    from tests.xapp.adapters.rmr_peer import RmrPeer
    from xapp.adapters.a1 import A1Handler
    from xapp.adapters.rmr import RmrGlue
    from xapp.core.policy_book import PolicyBook

    glue_port, peer_port = free_port(), free_port()
    route_to_glue(tmp_path, monkeypatch, glue_port, peer_port)
    received: list[bytes] = []
    glue = RmrGlue(A1Handler(PolicyBook(), policy_types, "test"), lambda: True, port=glue_port,
                   on_indication=lambda payload, _meid: received.append(payload))
    glue.start()
    peer = RmrPeer(peer_port)
    try:
        peer.send(100, b"ping")
        assert peer.receive(101, timeout_s=20) == b"OK\n"  # connections up both ways
        payload = bytes(range(256)) * 1129  # 282 KiB, every byte value
        tracemalloc.start()
        try:
            peer.send(RIC_INDICATION, payload)
            peer.send(100, b"ping")
            assert peer.receive(101, timeout_s=20) == b"OK\n"
            assert wait_until(lambda: len(received) == 1, timeout_s=20)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert received == [payload] and glue.callback_errors == 0
        assert peak < 2 * len(payload)
    finally:
        glue.stop(timeout_s=8.0)
        peer.close()


# --- E2: a RIC Indication (12050) through RMR to the intake ----------------------------------

GOLDEN_INDICATION = (SHARED / "data" / "e2sim-kpm"
                     / "ind0.bin")
E2_NODE = "gnb_001_001_0000000a"
E2_CELL = "00f110-00000000a"


@pytest.mark.skipif(not GOLDEN_INDICATION.exists(),
                    reason=f"golden indication {GOLDEN_INDICATION} absent")
def test_golden_indication_over_rmr_reaches_the_intake(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy_types: Any) -> None:
    """The E2 termination's 12050, routed by a static table to RmrGlue, goes through the E2
    decoder process and KpmIngest into the intake (as ``mcw run`` wires it); a garbage 12050
    before it is counted and changes nothing, and the dispatch thread still answers health
    checks."""
    from tests.xapp.adapters.rmr_peer import RmrPeer
    from xapp.adapters.a1 import A1Handler
    from xapp.adapters.e2 import e2ap
    from xapp.adapters.e2.decoder_process import DecoderProcess
    from xapp.adapters.e2.ingest import KpmIngest
    from xapp.adapters.e2.records import ActiveSubscription
    from xapp.adapters.e2.registry import CpeRegistry
    from xapp.adapters.e2.subscription_book import SubscriptionBook
    from xapp.adapters.rmr import RmrGlue
    from xapp.core.intake import LatestKpis
    from xapp.core.policy_book import PolicyBook

    glue_port, peer_port = free_port(), free_port()
    route_to_glue(tmp_path, monkeypatch, glue_port, peer_port)

    golden = GOLDEN_INDICATION.read_bytes()
    decoded = e2ap.decode_ric_indication(golden)
    book = SubscriptionBook(decoded.request.requestor)
    book.add(ActiveSubscription(
        subscription_id="sub-1", node=E2_NODE, request=decoded.request,
        ran_function_id=decoded.ran_function_id, kpm_version=3, report_style=1, cell=E2_CELL,
        measurement_ids={1: "RRU.PrbTotDl"}))
    registry = CpeRegistry()
    registry.add("cpe-1", ["crnti:1"], E2_CELL)
    intake = LatestKpis()
    ingest = KpmIngest(book, registry, intake.update)
    glue = RmrGlue(A1Handler(PolicyBook(), policy_types, "test"), lambda: True, port=glue_port,
                   indications=DecoderProcess(ingest))
    glue.start()
    peer = RmrPeer(peer_port)
    try:
        peer.send(RIC_INDICATION, b"\x00not an indication", meid=E2_NODE)
        peer.send(RIC_INDICATION, golden, meid=E2_NODE)
        assert wait_until(lambda: ingest.counters["accepted"] == 1, timeout_s=20)
        assert ingest.counters["refused_e2ap"] == 1 and glue.callback_errors == 0
        snap = intake.latest(time.time(), 60.0)
        assert snap.direction is not None
        got = {(str(c), str(d)): float(v) for c, d, v in
               zip(snap.cpe, snap.direction, snap.column("prb_util"), strict=True)}
        assert got["cpe-1", "dl"] == pytest.approx(0.01)  # measID 1 = 1 % of the PRBs
        peer.send(100, b"ping")
        assert peer.receive(101, timeout_s=20) == b"OK\n"
    finally:
        glue.stop(timeout_s=8.0)
        peer.close()
