"""Fencing at the publisher (several replicas): weights leave only while this replica holds
the CPE's shard with a locally valid lease, at hand-over and again on the wire (a real
Mosquitto)."""

from __future__ import annotations

from tests.support.mosquitto import MosquittoBroker, connect_client
from tests.xapp.adapters.mqtt.conftest import decision
from tests.xapp.adapters.mqtt.test_publisher import W, versions
from xapp.adapters.mqtt import MemoryVersionStore, MqttSettings, MqttWeightPublisher
from xapp.core.ownership import Fenced, ShardFence
from xapp.core.ports import WeightBatch
from xapp.core.shards import shard_of


def batch(ids: list[str]) -> WeightBatch:
    return WeightBatch.same([(c, decision({"nr": 3, "wifi": 1}), "load_balancing")
                             for c in ids], lease_s=30.0)


def test_fenced_cpes_use_no_version_and_lapsed_queues_never_leave(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    fence = ShardFence(64)
    mine = "cpe-0002"
    fence.grant(shard_of(mine), float("inf"))
    other = next(f"sim-{i}" for i in range(999) if shard_of(f"sim-{i}") != shard_of(mine))
    store = MemoryVersionStore()
    pub = MqttWeightPublisher(settings, store, fence=fence)  # not started: messages queue
    cpe = connect_client(broker, mine)
    try:
        cpe.subscribe(W.format(mine))
        result = pub.publish_many(batch([mine, other]))
        assert result.versions == {mine: 1}
        assert isinstance(result.errors[other], Fenced)
        assert pub.last_version(other) == 0 and pub.stats.fenced == 1
        # The lease lapses while the message waits for the connection: it is dropped at the
        # wire, not sent late.
        fence.revoke(shard_of(mine))
        pub.start()
        assert pub.wait_connected(10)
        assert not cpe.wait_for(lambda: versions(cpe, mine) != [], 1.0)
        assert pub.stats.fenced == 2 and fence.fenced == 2 and pub.pending() == 0
        # Another owner published meanwhile (its ceiling is in the shared store); the shard
        # comes back: forget, then versions start above that ceiling.
        store.set_ceilings({mine: 500})
        pub.forget({shard_of(mine)})
        fence.grant(shard_of(mine), float("inf"))
        assert pub.publish_many(batch([mine])).versions == {mine: 501}
        assert cpe.wait_for(lambda: versions(cpe, mine) == [501], 5)
    finally:
        cpe.close()
        pub.stop()


def test_a_store_away_holds_back_only_the_cpes_that_need_it(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    """Several replicas share the version store (Redis); when it does not answer, CPEs with
    versions left in their block keep getting weights, the others are reported."""

    class Away(MemoryVersionStore):
        away = False

        def get_ceilings(self, cpe_ids):  # type: ignore[no-untyped-def]
            if self.away:
                raise TimeoutError("Timeout reading from socket")
            return super().get_ceilings(cpe_ids)

        def set_ceilings(self, ceilings):  # type: ignore[no-untyped-def]
            if self.away:
                raise TimeoutError("Timeout reading from socket")
            super().set_ceilings(ceilings)

    fence = ShardFence(64, everything=False)
    for s in range(64):
        fence.grant(s, float("inf"))
    store = Away()
    pub = MqttWeightPublisher(settings, store, fence=fence)
    try:
        assert pub.publish_many(batch(["cpe-0001"])).versions == {"cpe-0001": 1}
        store.away = True
        result = pub.publish_many(batch(["cpe-0001", "cpe-0002"]))
        assert result.versions == {"cpe-0001": 2}
        assert isinstance(result.errors["cpe-0002"], TimeoutError)
        store.away = False
        assert pub.publish_many(batch(["cpe-0002"])).versions == {"cpe-0002": 1}
    finally:
        pub.stop()
