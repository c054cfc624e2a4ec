"""The publisher's batch API, keepalive and connection handling against a real Mosquitto."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from tests.support.mosquitto import MosquittoBroker, Pki, connect_client
from tests.support.polling import free_port, wait_until
from tests.xapp.adapters.mqtt.conftest import decision
from tests.xapp.adapters.mqtt.test_publisher import W, retained_doc, versions
from xapp.adapters.mqtt import MemoryVersionStore, MqttSettings, MqttWeightPublisher, PayloadError
from xapp.core.ports import WeightBatch


def test_publish_many_queues_the_valid_and_reports_the_refused(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore(), window=2).start()
    cpe = connect_client(broker, "cpe-0002")
    try:
        assert pub.wait_connected(10)
        cpe.subscribe(W.format("cpe-0002"))
        ids = [f"sim-{i:03d}" for i in range(30)] + ["cpe-0002"]
        result = pub.publish_many(WeightBatch.same(
            [(c, decision({"nr": 3, "wifi": 1}), "load_balancing") for c in ids]
            + [("cpe-0003", decision({"nr": 0}), "load_balancing"),   # all zero
               ("bad/+", decision({"nr": 1}), "load_balancing"),      # bad cpe_id
               ("cpe-0002", decision({"nr": 9}), "fixed_split")],     # newer, wins
            lease_s=30.0))
        assert result.versions == {**dict.fromkeys(ids, 1), "cpe-0002": 2}
        assert sorted(result.errors) == ["bad/+", "cpe-0003"]
        assert all(isinstance(e, PayloadError) for e in result.errors.values())
        assert pub.stats.invalid == 2 and pub.stats.coalesced == 1
        assert pub.last_version("cpe-0003") == 0  # a refused CPE uses no version
        assert pub.flush(10)
        assert all(pub.acked_version(c) == 1 for c in ids[:-1])
        assert pub.acked_version("cpe-0002") == 2
        assert cpe.wait_for(lambda: versions(cpe, "cpe-0002") == [2])
        doc = json.loads(cpe.messages[-1].payload)
        assert doc["ul"]["weights"] == {"nr": 9} and doc["dl"]["mode"] == "fixed_split"
        # A second tick: every CPE moves to its next version, nothing is coalesced away.
        again = pub.publish_many(WeightBatch.same(
            [(c, decision({"lte": 4}), "active_standby") for c in ids], lease_s=60.0))
        assert set(again.versions.values()) == {2, 3} and not again.errors
        assert pub.flush(10)
        assert retained_doc(broker, "cpe-0002")["version"] == 3
    finally:
        cpe.close()
        pub.stop()


def test_empty_batch_and_the_single_call_agree(broker: MosquittoBroker,
                                               settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore()).start()
    try:
        assert pub.publish_many(WeightBatch.same([], lease_s=5.0)).versions == {}
        assert pub.publish("cpe-0001", decision({"nr": 1}), mode="fixed_split", lease_s=5) == 1
        assert pub.publish_many(WeightBatch.same([("cpe-0001", decision({"nr": 2}), "fixed_split")],
                                               lease_s=5.0)).versions == {"cpe-0001": 2}
        assert pub.flush(10) and pub.stats.requested == 2
    finally:
        pub.stop()


def test_idle_connection_is_kept_alive_with_pings(broker: MosquittoBroker,
                                                   settings: MqttSettings) -> None:
    # Mosquitto drops a client that is silent for 1.5 keepalive periods.
    pub = MqttWeightPublisher(dataclasses.replace(settings, keepalive_s=1),
                              MemoryVersionStore()).start()
    try:
        assert pub.wait_connected(10)
        time.sleep(3.5)  # idle past the broker's 1.5 s limit: the broker's timer is the test
        assert pub.connected and pub.stats.disconnects == 0 and pub.stats.connects == 1
        pub.publish("cpe-0001", decision({"wifi": 2}), mode="load_balancing", lease_s=30)
        assert pub.flush(5)
    finally:
        pub.stop()


def test_a_foreign_certificate_never_connects_and_stop_ends_the_backoff(
        broker: MosquittoBroker, settings: MqttSettings, pki: Pki,
        caplog: pytest.LogCaptureFixture) -> None:
    cert, key = pki.cert("rogue")  # signed by another CA: the broker refuses the handshake
    # A minute between attempts: longer than stop() waits for the thread (15 s).
    rogue = dataclasses.replace(settings, cert_file=str(cert), key_file=str(key),
                                reconnect_min_s=60.0, reconnect_max_s=60.0)
    pub = MqttWeightPublisher(rogue, MemoryVersionStore()).start()
    thread = pub._thread
    assert thread is not None
    try:
        pub.publish("cpe-0001", decision({"nr": 1}), mode="load_balancing", lease_s=30)
        assert wait_until(lambda: "retry in 60.0 s" in caplog.text, 15)
        assert not pub.connected
        assert pub.pending() == 1 and pub.stats.connects == 0
    finally:
        pub.stop(flush_timeout_s=0.1)
    assert not thread.is_alive()  # stop() woke it from its wait


def test_no_broker_then_broker_delivers_what_was_queued(
        pki: Pki, tmp_path: Path, settings: MqttSettings,
        caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    late = MosquittoBroker(pki, tmp_path / "late-broker", port=port)
    pub = MqttWeightPublisher(dataclasses.replace(settings, port=port),
                              MemoryVersionStore()).start()
    try:
        for i in range(1, 4):
            pub.publish("cpe-0001", decision({"nr": i}), mode="load_balancing", lease_s=30)
        # Connections refused, and tried again after the backoff.
        assert wait_until(lambda: caplog.text.count("cannot reach the broker") >= 2, 10)
        assert not pub.connected and pub.stats.coalesced == 2
        late.start()
        assert pub.wait_connected(10) and pub.flush(10)
        doc = retained_doc(late, "cpe-0001")
        assert doc["version"] == 3 and doc["ul"]["weights"] == {"nr": 3}
        assert pub.stats.sent == 1
    finally:
        pub.stop()
        late.stop()


def test_messages_in_flight_at_a_crash_are_resent_or_replaced_by_newer(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    pub = MqttWeightPublisher(settings, MemoryVersionStore(), window=200).start()
    try:
        assert pub.wait_connected(10)
        ids = [f"sim-{i:04d}" for i in range(3000)] + [f"cpe-000{i}" for i in range(1, 5)]
        pub.publish_many(WeightBatch.same([(c, decision({"nr": 1}), "load_balancing") for c in ids],
                                        lease_s=30.0))
        broker.kill()  # mid-stream: some acknowledged, some in flight, most still queued
        newer = ids[::2]
        pub.publish_many(WeightBatch.same([(c, decision({"nr": 2}), "load_balancing")
                                         for c in newer], lease_s=30.0))
        broker.start()
        assert pub.wait_connected(10) and pub.flush(20)
        assert all(pub.acked_version(c) == pub.last_version(c) for c in ids)
        assert pub.stats.rejected == 0 and pub.stats.connects == 2
        for c in ("cpe-0001", "cpe-0002", "cpe-0003", "cpe-0004"):
            doc = retained_doc(broker, c)
            assert doc["version"] == pub.last_version(c)
            assert doc["ul"]["weights"] == {"nr": 2 if c in newer else 1}
    finally:
        pub.stop()
