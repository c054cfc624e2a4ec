"""A broker that crashes loses its unsaved retained weights; the loop re-sends them on reconnect.

Mosquitto writes retained messages to disk every ``autosave_interval`` (30 s in the shipped
config), so a SIGKILL loses the weights retained since the last save.  Unchanged weights are
otherwise re-sent only every half lease; with a 60 s lease an agent reconnecting after the
crash would wait up to 30 s.  The control loop notices the publisher's reconnect and re-sends
every CPE's latest weights at once.  Real broker, real publisher, the loop in-process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.integration.stack import wait_until
from tests.support.mosquitto import (
    MosquittoBroker,
    Pki,
    TestClient,
    connect_client,
    make_pki,
    mosquitto_binary,
)
from xapp.adapters.lab import FileKpiSource
from xapp.adapters.mqtt import MemoryVersionStore, MqttSettings, MqttWeightPublisher
from xapp.adapters.sdl import SdlStateStore
from xapp.app.runner import LoopRunner
from xapp.core.ewma import EwmaEstimator
from xapp.core.loop import ControlLoop, LoopSettings, TickReport
from xapp.core.policy_book import PolicyBook

CPES = ("cpe-0001", "cpe-0002")


def received(client: TestClient, topic: str) -> bool:
    return bool(client.on(topic))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed")
    return make_pki(tmp_path / "pki", n_cpes=len(CPES))


@pytest.fixture
def broker(pki: Pki, tmp_path: Path) -> Iterator[MosquittoBroker]:
    b = MosquittoBroker(pki, tmp_path / "broker").start()
    try:
        yield b
    finally:
        b.stop()


def test_weights_resent_after_broker_crash(pki: Pki, broker: MosquittoBroker,
                                           tmp_path: Path) -> None:
    kpis = tmp_path / "kpis.json"
    kpis.write_text(json.dumps({"cpes": {c: {"nr": {"delivered_mbps": 342, "saturated": 1},
                                             "wifi": {"delivered_mbps": 1190, "saturated": 1}}
                                         for c in CPES}}))
    cert, key = pki.cert("mcw-xapp")
    publisher = MqttWeightPublisher(
        MqttSettings(host="127.0.0.1", port=broker.port, ca_file=str(pki.ca),
                     cert_file=str(cert), key_file=str(key), client_id="it-crash",
                     reconnect_min_s=0.1, reconnect_max_s=0.5),
        MemoryVersionStore()).start()
    assert publisher.wait_connected(10)
    state = SdlStateStore("it", None)
    book = PolicyBook({"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
                       "capacity_floor_mbps": 1.0})
    ticks: list[TickReport] = []
    loop = ControlLoop(FileKpiSource(kpis), EwmaEstimator(), publisher, None, book.resolver,
                       state, settings=LoopSettings(control_period_s=0.2, lease_s=60.0),
                       publisher_connects=lambda: publisher.stats.connects,
                       on_tick=ticks.append)
    runner = LoopRunner(loop)
    runner.start()
    try:
        assert wait_until(lambda: all(publisher.acked_version(c) > 0 for c in CPES), 10)
        before = {c: publisher.last_version(c) for c in CPES}
        # A few more ticks: nothing changes, nothing is re-sent (lease 60 s).
        seen = len(ticks)
        assert wait_until(lambda: len(ticks) >= seen + 3, 10)
        assert {c: publisher.last_version(c) for c in CPES} == before
        broker.kill()  # retained weights not yet autosaved are gone
        broker.start()
        assert wait_until(lambda: publisher.connected, 10)
        clients = [connect_client(broker, c, client_id=f"it-crash-{c}") for c in CPES]
        try:
            for client, c in zip(clients, CPES, strict=True):
                topic = f"mcw/v1/cpe/{c}/weights"
                assert client.subscribe(topic) == [1]
                # Well before the half-lease refresh (30 s): the re-send after reconnect.
                assert wait_until(partial(received, client, topic), 5.0), c
                doc = json.loads(client.on(topic)[-1].payload)
                assert doc["version"] > before[c]
                for direction in ("dl", "ul"):
                    assert doc[direction]["weights"]["wifi"] > doc[direction]["weights"]["nr"] > 0
        finally:
            for client in clients:
                client.close()
    finally:
        runner.stop()
        publisher.stop()
