"""The channel's network threads as a supervisor sees them (real Mosquitto).

``healthy()`` and ``restart()`` are what the xApp registers with ``Supervisor.watch``: the
probe is False while the started thread is dead, and the supervisor starts it again within
its restart budget.
"""

from __future__ import annotations

import time

import pytest

from tests.support.mosquitto import MosquittoBroker, connect_client
from tests.support.polling import wait_until
from tests.xapp.adapters.mqtt.conftest import decision
from xapp.adapters.mqtt import MemoryVersionStore, MqttSettings, MqttWeightPublisher
from xapp.core.workers import Supervisor


class _Fatal(BaseException):
    """Not an Exception: the network loop does not catch it, so the thread ends."""


def test_the_publishers_heartbeat_advances_while_connected(settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore())
    assert pub.healthy() and not pub.thread_alive  # not started is not dead
    pub.start()
    try:
        assert pub.wait_connected(10) and pub.thread_alive and pub.healthy()
        # Idle, the loop still goes round: select() wakes at least once a second.
        for _ in range(3):
            beat = pub.last_loop_monotonic
            assert wait_until(lambda: pub.last_loop_monotonic > beat, 5)  # noqa: B023
    finally:
        pub.stop()
    assert pub.healthy() and not pub.thread_alive


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_publisher_thread_is_restarted_and_delivers(broker: MosquittoBroker,
                                                           settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore())
    cpe = connect_client(broker, "cpe-0001")
    serve = pub._serve
    calls = 0

    def serve_once_then_die(stream: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise _Fatal
        serve(stream)  # type: ignore[arg-type]

    # The one fault injected: the first connection's loop ends the thread.
    pub._serve = serve_once_then_die  # type: ignore[method-assign]
    try:
        pub.start()
        assert wait_until(lambda: calls == 1 and not pub.thread_alive, 10)
        assert not pub.connected and not pub.healthy()
        supervisor = Supervisor()
        supervisor.watch("mqtt-publisher", pub.healthy, pub.restart)
        assert supervisor.alive() and pub.restarts == 1 and pub.thread_alive
        assert cpe.subscribe("mcw/v1/cpe/cpe-0001/weights") == [1]
        version = pub.publish("cpe-0001", decision({"nr": 3, "wifi": 1}), mode="load_balancing",
                              lease_s=30)
        assert pub.flush(10)
        assert cpe.wait_for(lambda: bool(cpe.on("mcw/v1/cpe/cpe-0001/weights")), 5)
        assert pub.acked_version("cpe-0001") == version
    finally:
        cpe.close()
        pub.stop()


def test_a_stuck_publisher_thread_is_unhealthy(settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore()).start()
    try:
        assert pub.wait_connected(10) and pub.healthy()
        # Probed as if the loop had not gone round for longer than any reconnect may take.
        later = time.monotonic() + settings.reconnect_max_s + 60
        assert pub.thread_alive and not pub.healthy(now=later)
        supervisor = Supervisor()
        supervisor.watch("mqtt-publisher", lambda: pub.healthy(now=later), pub.restart)
        assert not supervisor.alive()  # a live but stuck thread is not restarted: pod restart
        assert pub.restarts == 0
    finally:
        pub.stop()
