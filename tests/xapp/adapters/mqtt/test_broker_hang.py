"""Readiness tells the truth about a hung broker (issue 22): a Mosquitto stopped with SIGSTOP
keeps its TCP connections open, so "connected" stayed true and ``/ric/v1/health/ready`` 200 for
the 25 s it was stopped.  Now an answer overdue (PINGREQ or PUBACK) turns the ``broker`` check
to false within seconds, and it recovers when the broker answers again."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from tests.support.mosquitto import MosquittoBroker
from tests.support.polling import wait_until
from tests.xapp.adapters.mqtt.conftest import decision
from xapp.adapters.mqtt import MemoryVersionStore, MqttSettings, MqttWeightPublisher
from xapp.app.endpoints import READY_PATH, Health, HttpServer
from xapp.app.metrics import Metrics


def ready(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{READY_PATH}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_for(condition: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until ``condition()`` held; fails the test past ``timeout_s``."""
    started = time.monotonic()
    if not wait_until(condition, timeout_s):
        pytest.fail(f"not within {timeout_s} s")
    return time.monotonic() - started


@pytest.fixture
def rig(broker: MosquittoBroker, settings: MqttSettings
        ) -> Iterator[tuple[MosquittoBroker, MqttWeightPublisher, int]]:
    pub = MqttWeightPublisher(replace(settings, answer_timeout_s=1.0), MemoryVersionStore()).start()
    http = HttpServer(Health({"broker": pub.answering}), lambda: {}, Metrics(),
                      host="127.0.0.1", port=0)
    http.start()
    try:
        assert pub.wait_connected(10)
        yield broker, pub, http.port
    finally:
        if broker.proc is not None:
            broker.proc.send_signal(signal.SIGCONT)
        http.stop()
        pub.stop(flush_timeout_s=0.5)


def test_an_idle_connection_to_a_stopped_broker_is_not_ready(
        rig: tuple[MosquittoBroker, MqttWeightPublisher, int]) -> None:
    broker, pub, port = rig
    assert ready(port) == (200, {"ready": True, "checks": {"broker": True}})
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGSTOP)
    # Probed after 1 s of silence, overdue 1 s later: well inside the 25 s of the issue.
    took = wait_for(lambda: ready(port)[0] == 503, 5.0)
    assert took < 4.0
    assert ready(port) == (503, {"ready": False, "checks": {"broker": False}})
    assert pub.connected  # the connection is still open: only the overdue answer shows it
    broker.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: ready(port)[0] == 200, 5.0)


def test_a_publish_the_stopped_broker_does_not_acknowledge_is_not_ready(
        rig: tuple[MosquittoBroker, MqttWeightPublisher, int]) -> None:
    broker, pub, port = rig
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGSTOP)
    pub.publish("cpe-1", decision({"nr": 1, "wifi": 3}), mode="load_balancing", lease_s=30.0)
    wait_for(lambda: ready(port)[0] == 503, 5.0)
    assert pub.acked_version("cpe-1") == 0
    broker.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: ready(port)[0] == 200, 5.0)
    wait_for(lambda: pub.acked_version("cpe-1") == 1, 5.0)
