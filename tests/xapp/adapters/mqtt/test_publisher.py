"""MqttWeightPublisher against a real Mosquitto with the shipped ACL and a test PKI."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.mosquitto import MosquittoBroker, TestClient, connect_client
from tests.support.polling import wait_until
from tests.xapp.adapters.mqtt.conftest import decision
from xapp.adapters.mqtt import (
    FileVersionStore,
    MemoryVersionStore,
    MqttSettings,
    MqttWeightPublisher,
    PayloadError,
)
from xapp.core.ports import WeightPublisher

W = "mcw/v1/cpe/{}/weights"


def versions(client: TestClient, cpe_id: str) -> list[int]:
    return [json.loads(m.payload)["version"] for m in client.on(W.format(cpe_id))]


def retained_doc(broker: MosquittoBroker, cpe_id: str) -> dict[str, Any]:
    """What a CPE that connects now receives: the retained weights."""
    late = connect_client(broker, cpe_id, client_id=f"late-{cpe_id}-{time.monotonic_ns()}")
    try:
        late.subscribe(W.format(cpe_id))
        assert late.wait_for(lambda: bool(late.messages)), "no retained weights"
        msg = late.messages[0]
        assert msg.retain
        return dict(json.loads(msg.payload))
    finally:
        late.close()


def test_cpe_receives_its_retained_weights_with_growing_versions(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore(), clock=lambda: 1_750_000_000.25)
    as_interface: WeightPublisher = pub  # the xApp loop sees only the interface
    assert as_interface is pub
    cpe = connect_client(broker, "cpe-0001")
    try:
        pub.start()
        assert pub.wait_connected(10)
        cpe.subscribe(W.format("cpe-0001"))
        got = []
        for w in ({"nr": 30, "wifi": 100, "lifi": 1}, {"nr": 10, "wifi": 100}, {"wifi": 5}):
            got.append(pub.publish("cpe-0001", decision(w), mode="load_balancing", lease_s=30))
            n = len(got)
            assert cpe.wait_for(lambda: len(cpe.messages) >= n)  # noqa: B023
        assert got == [1, 2, 3] == versions(cpe, "cpe-0001")
        last = json.loads(cpe.messages[-1].payload)
        assert last["ul"]["weights"] == last["dl"]["weights"] == {"wifi": 5}
        assert last["lease_s"] == 30
        assert last["schema"] == "mcw.weights.v2" and last["cpe_id"] == "cpe-0001"
        assert last["issued_at_ms"] == 1_750_000_000_250
        assert pub.flush(5) and pub.acked_version("cpe-0001") == 3
        assert retained_doc(broker, "cpe-0001")["version"] == 3
        assert pub.stats.acked == 3 and pub.stats.rejected == 0
    finally:
        cpe.close()
        pub.stop()


def test_invalid_weights_are_refused_counted_and_use_no_version(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore()).start()
    try:
        assert pub.publish("cpe-0001", decision({"nr": 1}), mode="fixed_split", lease_s=5) == 1
        bad_cases: list[tuple[dict[str, int], str, float]] = [
            ({"nr": 0, "wifi": 0}, "fixed_split", 5), ({"nr": 300}, "fixed_split", 5),
            ({"nr": 1}, "bogus", 5), ({"nr": 1}, "fixed_split", 0)]
        for weights, mode, lease in bad_cases:
            with pytest.raises(PayloadError):
                pub.publish("cpe-0001", decision(weights), mode=mode, lease_s=lease)
        with pytest.raises(PayloadError):
            pub.publish("cpe/+", decision({"nr": 1}), mode="fixed_split", lease_s=5)
        assert pub.stats.invalid == 5
        assert pub.drops.snapshot() == {"weights/schema": 4, "weights/bad-cpe-id": 1}
        assert pub.publish("cpe-0001", decision({"nr": 2}), mode="fixed_split", lease_s=5) == 2
        assert pub.flush(5)
        assert retained_doc(broker, "cpe-0001")["version"] == 2
    finally:
        pub.stop()


def test_coalesces_to_the_latest_per_cpe_while_unreachable(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore())
    cpe = connect_client(broker, "cpe-0001")
    try:
        cpe.subscribe(W.format("cpe-0001"))
        # Not started yet: everything queues, and only the newest per CPE survives.
        for i in range(1, 51):
            pub.publish("cpe-0001", decision({"nr": i, "wifi": 1}), mode="load_balancing",
                        lease_s=30)
        pub.publish("cpe-0002", decision({"nr": 7}), mode="load_balancing", lease_s=30)
        assert pub.stats.coalesced == 49 and pub.pending() == 2
        pub.start()
        assert pub.flush(10)
        assert pub.stats.sent == 2 and pub.stats.acked == 2  # one message per CPE, no more
        assert cpe.wait_for(lambda: bool(cpe.messages))
        assert versions(cpe, "cpe-0001") == [50]
        assert json.loads(cpe.messages[0].payload)["ul"]["weights"] == {"nr": 50, "wifi": 1}
    finally:
        cpe.close()
        pub.stop()


def test_rapid_updates_arrive_in_order_and_end_at_the_latest(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore()).start()
    cpe = connect_client(broker, "cpe-0001")
    try:
        assert pub.wait_connected(10)
        cpe.subscribe(W.format("cpe-0001"))
        last = 0
        for i in range(300):
            last = pub.publish("cpe-0001", decision({"nr": 1 + i % 200, "wifi": 3}),
                               mode="load_balancing", lease_s=30)
        assert pub.flush(10)
        assert cpe.wait_for(lambda: bool(versions(cpe, "cpe-0001"))
                            and versions(cpe, "cpe-0001")[-1] == last)
        got = versions(cpe, "cpe-0001")
        assert got == sorted(set(got)), "versions went backwards or repeated"
        assert pub.stats.sent + pub.stats.coalesced == 300
        assert retained_doc(broker, "cpe-0001")["version"] == last
    finally:
        cpe.close()
        pub.stop()


def test_version_store_survives_a_publisher_restart(
        broker: MosquittoBroker, settings: MqttSettings, tmp_path: Path) -> None:
    path = tmp_path / "versions.json"
    first = MqttWeightPublisher(settings, FileVersionStore(path), version_block=4).start()
    try:
        used = [first.publish("cpe-0001", decision({"nr": 5}), mode="load_balancing",
                              lease_s=30) for _ in range(6)]
        assert first.flush(10)
    finally:
        first.stop()
    second = MqttWeightPublisher(settings, FileVersionStore(path), version_block=4).start()
    try:
        v = second.publish("cpe-0001", decision({"nr": 6}), mode="load_balancing", lease_s=30)
        assert v > max(used)
        assert second.flush(10)
        doc = retained_doc(broker, "cpe-0001")
        assert doc["version"] == v and doc["ul"]["weights"] == {"nr": 6}
    finally:
        second.stop()


def test_reconnects_after_a_broker_crash_and_delivers_the_latest(
        broker: MosquittoBroker, settings: MqttSettings,
        caplog: pytest.LogCaptureFixture) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore()).start()
    try:
        assert pub.wait_connected(10)
        pub.publish("cpe-0001", decision({"nr": 1}), mode="load_balancing", lease_s=30)
        assert pub.flush(5)
        broker.kill()  # SIGKILL: no goodbye, retained state since the last autosave is lost
        assert wait_until(lambda: not pub.connected, 5)
        latest = {}
        for i in range(2, 12):
            for cpe_id in ("cpe-0001", "cpe-0002", "cpe-0003"):
                latest[cpe_id] = pub.publish(cpe_id, decision({"nr": i, "lifi": 1}),
                                             mode="load_balancing", lease_s=30)
        # A few failed reconnect attempts, with backoff.
        assert wait_until(lambda: caplog.text.count("cannot reach the broker") >= 3, 10)
        broker.start()
        assert pub.wait_connected(10)
        assert pub.flush(10)
        assert pub.stats.connects >= 2 and pub.stats.disconnects >= 1
        for cpe_id, version in latest.items():
            doc = retained_doc(broker, cpe_id)
            assert doc["version"] == version
            assert doc["ul"]["weights"] == {"nr": 11, "lifi": 1}
    finally:
        pub.stop()


def test_more_cpes_than_the_window_all_get_their_weights(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore(), window=3).start()
    cpe = connect_client(broker, "cpe-0004")
    try:
        assert pub.wait_connected(10)
        cpe.subscribe(W.format("cpe-0004"))
        # Only cpe-0004 has a certificate here, but the broker accepts (and retains) the
        # xApp's weights for any CPE id: 40 CPEs through a window of 3 in flight.
        ids = [f"sim-{i:03d}" for i in range(39)] + ["cpe-0004"]
        for round_ in range(2):
            for cpe_id in ids:
                pub.publish(cpe_id, decision({"wifi": 1 + round_}), mode="load_balancing",
                            lease_s=30)
        assert pub.flush(10)
        assert all(pub.acked_version(c) == 2 for c in ids)
        assert cpe.wait_for(lambda: bool(versions(cpe, "cpe-0004"))
                            and versions(cpe, "cpe-0004")[-1] == 2)
    finally:
        cpe.close()
        pub.stop()
