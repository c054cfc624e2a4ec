"""A CPE with a valid certificate publishes hostile bytes on its own topics (real Mosquitto).

The ACL lets any CPE write its own state and telemetry, so none of this is stopped before the
xApp. After each message the xApp's subscriber must still be alive, still hear the next valid
telemetry and state of another CPE, and have counted the drop under the right reason.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import pytest

from tests.support.mosquitto import MosquittoBroker, TestClient, connect_client
from tests.support.polling import wait_until
from tests.xapp.adapters.mqtt.test_subscriber import state_doc, telemetry_doc
from xapp.adapters.mqtt import ChannelSubscriber, CpeState, MqttSettings, shard_topic
from xapp.core.forecast import KpiFrame
from xapp.core.workers import Supervisor

ATTACKER = "cpe-0001"
OTHER = "cpe-0002"


def telemetry_text(**nr: Any) -> str:
    """A valid telemetry document of the attacker, as text, with ``nr`` fields replaced."""
    doc = json.loads(telemetry_doc(ATTACKER, 1.0))
    doc["wats"]["nr"]["ul"].update(nr)
    return json.dumps(doc)


def with_number(field: str, literal: str) -> bytes:
    """A telemetry document whose ``nr.<field>`` is the raw JSON number ``literal``."""
    return telemetry_text(**{field: 123456789}).replace("123456789", literal).encode()


#: (case, topic kind, payload, the drop counted). Every payload reaches the xApp: the broker
#: forwards anything up to its max_packet_size (16 KiB) from a CPE on its own topics.
CASES: list[tuple[str, Literal["state", "telemetry"], bytes, str]] = [
    ("nested-5000-open", "telemetry", b"[" * 5000, "telemetry/bad-json"),
    ("nested-5000-open", "state", b'{"a":' * 2000 + b"[" * 5000, "state/bad-json"),
    ("nested-5000", "state", b"[" * 5000 + b"]" * 5000, "state/bad-json"),
    # Balanced, 5,000 levels need 10,000 bytes: over the telemetry limit before any parsing.
    ("nested-5000", "telemetry", b"[" * 5000 + b"]" * 5000, "telemetry/too-large"),
    ("int-500-digits", "telemetry", with_number("cwnd", "9" * 500), "telemetry/bad-json"),
    ("int-500-digits", "state",
     state_doc(ATTACKER, 1).replace(b'"applied_version": 1', b'"applied_version": '
                                    + b"7" * 500), "state/bad-json"),
    ("float-1e999", "telemetry", with_number("delivered_mbps", "1e999"), "telemetry/bad-json"),
    ("float-nan", "telemetry", with_number("rtt_ms", "NaN"), "telemetry/bad-json"),
    ("float-minus-infinity", "telemetry", with_number("rtt_ms", "-Infinity"),
     "telemetry/bad-json"),
    ("garbage-12k", "telemetry", bytes(range(256)) * 48, "telemetry/too-large"),
    ("invalid-utf8", "telemetry", b'{"schema": "\xff\xfe\xc0\x80"}', "telemetry/bad-json"),
    ("invalid-utf8", "state", b"\xed\xa0\x80" * 10, "state/bad-json"),
    # A key twice: json.loads (and the xApp before) took the last, so the state below passed as
    # the attacker's own while a reader keeping the first sees the victim's id.
    ("duplicate-key", "state",
     state_doc(ATTACKER, 1).replace(b'"cpe_id": "cpe-0001"',
                                    b'"cpe_id": "cpe-0002", "cpe_id": "cpe-0001"'),
     "state/bad-json"),
    ("duplicate-key", "telemetry",
     telemetry_doc(ATTACKER, 1.0).replace(b'"delivered_mbps": 1.0',
                                          b'"delivered_mbps": 900.0, "delivered_mbps": 1.0'),
     "telemetry/bad-json"),
    ("lone-surrogate", "state",
     state_doc(ATTACKER, 1, last_error="x").replace(b'"x"', b'"\\ud800"'), "state/bad-json"),
]


@pytest.fixture
def xapp(settings: MqttSettings) -> Iterator[tuple[ChannelSubscriber, list[KpiFrame],
                                                   list[CpeState]]]:
    frames: list[KpiFrame] = []
    states: list[CpeState] = []
    sub = ChannelSubscriber(settings, on_telemetry=frames.append, on_state=states.append)
    sub.start()
    try:
        assert sub.wait_subscribed(10)
        yield sub, frames, states
    finally:
        sub.stop()


def assert_still_listening(sub: ChannelSubscriber, other: TestClient, frames: list[KpiFrame],
                           states: list[CpeState], version: int) -> None:
    """The subscriber takes the other CPE's next valid telemetry and state."""
    assert sub.thread_alive and sub.healthy()
    other.publish(shard_topic(OTHER, "telemetry"), telemetry_doc(OTHER, 42.5))
    other.publish(shard_topic(OTHER, "state"), state_doc(OTHER, version))
    assert sub.wait_for(lambda s: (st := s.directory.state(OTHER)) is not None
                        and st.applied_version == version, 5), "state did not arrive"
    assert sub.wait_for(lambda _s: any(OTHER in f.cpe for f in frames), 5)
    assert states[-1].cpe_id == OTHER and states[-1].applied_version == version
    assert sub.thread_alive and sub.restarts == 0


@pytest.mark.parametrize(("case", "kind", "payload", "reason"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_hostile_message_is_dropped_and_the_xapp_keeps_listening(
        broker: MosquittoBroker,
        xapp: tuple[ChannelSubscriber, list[KpiFrame], list[CpeState]],
        case: str, kind: Literal["state", "telemetry"], payload: bytes, reason: str) -> None:
    sub, frames, states = xapp
    assert len(payload) < 16000, "must fit the broker's max_packet_size to reach the xApp"
    attacker = connect_client(broker, ATTACKER)
    other = connect_client(broker, OTHER)
    try:
        assert attacker.publish(shard_topic(ATTACKER, kind), payload) < 0x80
        assert sub.wait_for(lambda s: s.received >= 1, 5)
        assert sub.drops.snapshot() == {reason: 1}
        assert sub.callback_errors == 0
        assert_still_listening(sub, other, frames, states, version=5)
        # Nothing of the attacker's reached the state or the callbacks.
        assert sub.directory.state(ATTACKER) is None
        assert {c for f in frames for c in f.cpe} == {OTHER}
        assert all(np.isfinite(f.column("delivered_mbps")).all() for f in frames)
    finally:
        attacker.close()
        other.close()


def test_every_hostile_message_in_a_row(
        broker: MosquittoBroker,
        xapp: tuple[ChannelSubscriber, list[KpiFrame], list[CpeState]]) -> None:
    """One xApp through all of them, each followed by the other CPE's valid messages."""
    sub, frames, states = xapp
    attacker = connect_client(broker, ATTACKER)
    other = connect_client(broker, OTHER)
    want: dict[str, int] = {}
    try:
        for n, (_case, kind, payload, reason) in enumerate(CASES, start=1):
            attacker.publish(shard_topic(ATTACKER, kind), payload)
            want[reason] = want.get(reason, 0) + 1
            assert_still_listening(sub, other, frames, states, version=n)
        assert sub.wait_for(lambda s: s.drops.snapshot() == want, 5), sub.drops.snapshot()
    finally:
        attacker.close()
        other.close()


def test_two_megabytes_of_garbage_never_reach_the_xapp(
        broker: MosquittoBroker,
        xapp: tuple[ChannelSubscriber, list[KpiFrame], list[CpeState]]) -> None:
    """The broker's max_packet_size (16 KiB) is the first bound: it disconnects the sender.

    What fits under it and over the xApp's own limit is ``garbage-12k`` above.
    """
    sub, frames, states = xapp
    attacker = connect_client(broker, ATTACKER)
    other = connect_client(broker, OTHER)
    try:
        attacker.client.publish(shard_topic(ATTACKER, "telemetry"), b"\x00" * 2_000_000, qos=0)
        assert wait_until(lambda: "disconnected due to oversize packet" in broker.log(), 5)
        assert_still_listening(sub, other, frames, states, version=1)
        assert sub.drops.snapshot() == {} and sub.received == 2
    finally:
        attacker.close()
        other.close()


class _Fatal(BaseException):
    """Not an Exception: nothing in the subscriber catches it, so paho's thread ends."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_network_thread_is_restarted_by_the_health_probe(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    states: list[CpeState] = []
    fired = threading.Event()

    def on_state(state: CpeState) -> None:
        states.append(state)
        if state.applied_version == 1 and not fired.is_set():
            fired.set()
            raise _Fatal

    sub = ChannelSubscriber(settings, on_state=on_state).start()
    other = connect_client(broker, OTHER)
    try:
        assert sub.wait_subscribed(10) and sub.healthy() and sub.thread_alive
        other.publish(shard_topic(OTHER, "state"), state_doc(OTHER, 1), retain=True)
        assert fired.wait(5)
        assert sub.wait_for(lambda s: not s.thread_alive, 5)
        assert not sub.healthy()
        supervisor = Supervisor()
        supervisor.watch("mqtt-subscriber", sub.healthy, sub.restart)
        assert supervisor.alive()  # the supervisor starts a new thread
        assert sub.thread_alive and sub.restarts == 1
        assert sub.wait_subscribed(10)
        other.publish(shard_topic(OTHER, "state"), state_doc(OTHER, 2))
        assert sub.wait_for(lambda s: (st := s.directory.state(OTHER)) is not None
                            and st.applied_version == 2, 5)
        assert not sub.restart()  # alive: nothing to restart
    finally:
        other.close()
        sub.stop()
    assert sub.healthy()  # stopped is not dead
