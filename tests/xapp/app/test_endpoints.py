"""The HTTP server of health, config and metrics when its clients misbehave, and the documents
it serves made from the process's parts."""

from __future__ import annotations

import json
import logging
import socket
import struct
import urllib.request

import pytest

from tests.support.polling import wait_until
from xapp.app.config import load_config
from xapp.app.endpoints import (
    E2_SUBSCRIPTIONS_PATH,
    Health,
    HttpServer,
    config_view,
    cpes_view,
    e2_view,
    shards_view,
)
from xapp.app.metrics import Metrics
from xapp.core.ownership import ShardFence
from xapp.core.ports import CpeRecord
from xapp.core.shards import shard_of
from xapp.core.timings import derive_timings


def test_a_client_that_hangs_up_costs_one_debug_line(caplog: pytest.LogCaptureFixture,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    """A probe whose timeout fired resets the connection before the answer is written: the
    server logs it at debug level, prints no traceback, and goes on serving."""
    big = {f"k{i}": "x" * 100 for i in range(20_000)}  # an answer larger than socket buffers
    http = HttpServer(Health({}), lambda: big, Metrics(), host="127.0.0.1", port=0)
    http.start()
    caplog.set_level(logging.DEBUG, logger="xapp.app.endpoints")
    try:
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", http.port))
            s.sendall(b"GET /ric/v1/config HTTP/1.1\r\nHost: x\r\n\r\n")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # RST: the server's write fails
        # Each of them, handled, is one line.
        assert wait_until(lambda: sum("went away" in r.getMessage()
                                      for r in caplog.records) == 3, 10), caplog.records
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/ric/v1/health/alive",
                                    timeout=5) as r:
            assert r.status == 200
    finally:
        http.stop()
    assert "Traceback" not in capfd.readouterr().err


def record(version: int) -> CpeRecord:
    return CpeRecord.from_dict({"version": version, "time_s": 1.0, "weights": {"nr": 60,
                                                                                "wifi": 40}})


def test_each_cpe_names_its_shard_and_whether_this_replica_owns_it() -> None:
    now = [100.0]
    fence = ShardFence(4, clock=lambda: now[0])
    records = {f"cpe-{n}": record(n) for n in range(8)}
    mine = fence.shard("cpe-0")
    fence.grant(mine, until_monotonic=200.0)
    doc = cpes_view(records, None, fence, "r1")
    assert doc["replica_id"] == "r1" and set(doc["cpes"]) == set(records)
    for cpe_id, entry in doc["cpes"].items():
        assert entry["shard"] == shard_of(cpe_id, 4)
        assert entry["owner"] == ("r1" if entry["shard"] == mine else None)
        assert entry["applied_by"] == {"ul": None, "dl": None}  # no MQTT: nobody reports
    assert doc["cpes"]["cpe-3"]["published"]["version"] == 3


def test_e2_and_shards_say_when_they_are_off() -> None:
    assert e2_view(None) == {"active": False, "reason": "controls.e2.submgr_url is empty or "
                             "controls.e2.enabled is false"}
    assert shards_view(None, ShardFence(16, everything=True), "r1", None) == {
        "enabled": False, "replica_id": "r1", "shards": 16, "held": "all"}


def test_the_config_view_has_the_timings_in_force() -> None:
    loaded = load_config(None)
    doc = config_view(loaded, (20100, 20101), derive_timings(2.0), None)
    assert doc["path"] is None and doc["policy_type_ids"] == [20100, 20101]
    assert doc["controls"] == loaded.controls.to_dict()
    assert doc["timings"]["shard_lease_s"] == 3.0 and doc["timings"]["control_period_s"] == 2.0
    assert doc["e2"] == {"active": False, "nodes": {}, "active_subscriptions": 0,
                         "details": E2_SUBSCRIPTIONS_PATH}
    json.dumps(doc)  # served as JSON
