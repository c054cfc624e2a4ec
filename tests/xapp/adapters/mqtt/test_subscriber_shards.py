"""ChannelSubscriber and the shard-keyed topics on a real Mosquitto (make-acl.sh's ACL): all
shards, one shard, shards changed on the live connection, a CPE naming another shard (refused by
the broker; dropped by the xApp where an older ACL let it through), and the legacy topics of
earlier agents."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.support.mosquitto import (
    MosquittoBroker,
    Pki,
    TestClient,
    connect_client,
    make_acl,
    mosquitto_binary,
)
from tests.xapp.adapters.mqtt.conftest import xapp_settings_for
from tests.xapp.adapters.mqtt.test_subscriber import state_doc, telemetry_doc
from tests.xapp.adapters.mqtt.test_subscriber_proxy import proxy_cpe_state
from xapp.adapters.mqtt import ChannelSubscriber, MqttSettings, shard_topic
from xapp.app.collector import ComponentCollector
from xapp.core.shards import shard_of

CPES = ("cpe-0001", "cpe-0002", "cpe-0003", "cpe-0004")
SHARD = {c: shard_of(c) for c in CPES}  # 47, 2, 21 and 49 of 64: all different
#: Versions of the markers :func:`settle` publishes, above any the tests report.
_MARKS = itertools.count(1000)


def publish_states(broker: MosquittoBroker, version: int = 1, cpes: tuple[str, ...] = CPES
                   ) -> None:
    """Each CPE agent's retained state (and a telemetry message) on its sharded topics."""
    for cpe in cpes:
        agent = connect_client(broker, cpe, client_id=f"agent-{cpe}-{version}")
        try:
            assert agent.publish(shard_topic(cpe, "state"), state_doc(cpe, version),
                                 retain=True) < 0x80
            assert agent.publish(shard_topic(cpe, "telemetry"), telemetry_doc(cpe, 5.0)) < 0x80
        finally:
            agent.close()


def settle(broker: MosquittoBroker, sub: ChannelSubscriber, cpe: str) -> None:
    """``cpe`` (of a shard ``sub`` holds) reports a marker version now; once ``sub`` has it,
    whatever an acknowledged publish or (un)subscribe before it was going to deliver has
    arrived too (Mosquitto queues each subscriber's messages in the order it handles packets:
    docs/design.md, "Waiting in tests"), so "nothing else came" is a fact, not a quiet period
    waited out.  The marker counts in ``sub.received``."""
    mark = next(_MARKS)
    agent = connect_client(broker, cpe, client_id=f"marker-{cpe}-{mark}")
    try:
        assert agent.publish(shard_topic(cpe, "state"), state_doc(cpe, mark)) < 0x80
    finally:
        agent.close()
    assert sub.wait_for(lambda s: (st := s.directory.state(cpe)) is not None
                        and st.applied_version == mark, 5)


def exposition(sub: ChannelSubscriber) -> str:
    registry = CollectorRegistry()
    registry.register(ComponentCollector(subscriber=sub))
    return generate_latest(registry).decode()


def telemetry_cpes(sub: ChannelSubscriber) -> set[str]:
    return {str(c) for c in sub.drain_telemetry().cpe}


def test_shards_are_distinct() -> None:
    assert len(set(SHARD.values())) == len(CPES)


def test_all_shards_by_default(proxy_broker: MosquittoBroker,
                               xapp_settings: MqttSettings) -> None:
    sub = ChannelSubscriber(xapp_settings).start()
    try:
        assert sub.wait_subscribed(10) and sub.shards() is None
        publish_states(proxy_broker)
        assert sub.wait_for(lambda s: set(s.directory.states()) == set(CPES), 5)
        assert sub.wait_for(lambda s: s.received >= 2 * len(CPES), 5)
        assert telemetry_cpes(sub) == set(CPES)
        assert sub.drops.total() == 0 and sub.legacy_received == 0
    finally:
        sub.stop()


def test_one_shard_and_a_live_move(proxy_broker: MosquittoBroker,
                                   xapp_settings: MqttSettings) -> None:
    sub = ChannelSubscriber(xapp_settings)
    sub.set_shards(frozenset({SHARD["cpe-0001"]}))  # before start: the first subscriptions
    sub.start()
    try:
        assert sub.wait_subscribed(10)
        publish_states(proxy_broker)
        assert sub.wait_for(lambda s: s.directory.state("cpe-0001") is not None, 5)
        assert sub.wait_for(lambda s: s.received >= 2, 5)
        settle(proxy_broker, sub, "cpe-0001")
        assert set(sub.directory.states()) == {"cpe-0001"}
        assert telemetry_cpes(sub) == {"cpe-0001"}
        assert sub.unheld == 0  # the broker sent nothing of other shards

        # The replica gives shard 47 up and takes shards 2 and 21, on the live connection:
        # their retained states arrive, cpe-0001's state is forgotten.
        sub.set_shards(frozenset({SHARD["cpe-0002"], SHARD["cpe-0003"]}))
        assert sub.shards() == frozenset({SHARD["cpe-0002"], SHARD["cpe-0003"]})
        assert sub.directory.state("cpe-0001") is None
        assert sub.wait_for(lambda s: set(s.directory.states()) == {"cpe-0002", "cpe-0003"}, 5)
        assert sub.wait_subscribed(5) and sub.healthy()
        received = sub.received
        publish_states(proxy_broker, version=2)
        assert sub.wait_for(lambda s: all(
            st.applied_version == 2 for st in s.directory.states().values()), 5)
        settle(proxy_broker, sub, "cpe-0002")
        assert set(sub.directory.states()) == {"cpe-0002", "cpe-0003"}
        assert telemetry_cpes(sub) == {"cpe-0002", "cpe-0003"}
        # Unsubscribed: nothing of shard 47 or 49 came (2 states, 2 telemetry and the marker
        # did).
        assert sub.received - received == 5
        # Back to every shard.
        sub.set_shards(None)
        assert sub.wait_for(lambda s: set(s.directory.states()) == set(CPES), 5)
        assert sub.drops.total() == 0
    finally:
        sub.stop()


#: The CPE grants of releases before issue 33: any shard, so the xApp's own check is what stood.
ANY_SHARD_PATTERNS = ("pattern write mcw/v1/s/+/cpe/%u/state\n"
                      "pattern write mcw/v1/s/+/cpe/%u/telemetry\n")


@pytest.fixture
def any_shard_broker(pki: Pki, tmp_path: Path) -> Iterator[MosquittoBroker]:
    """A broker whose ACL still lets a CPE write its own id under any shard."""
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    acl = tmp_path / "acl"
    acl.write_text(make_acl() + ANY_SHARD_PATTERNS)
    b = MosquittoBroker(pki, tmp_path / "broker", acl=acl).start()
    try:
        yield b
    finally:
        b.stop()


def test_a_cpe_naming_another_shard_is_refused_by_the_broker(
        proxy_broker: MosquittoBroker) -> None:
    cpe = connect_client(proxy_broker, "cpe-0001")
    try:
        assert cpe.publish("mcw/v1/s/2/cpe/cpe-0001/state", state_doc("cpe-0001", 1)) == 0x87
        assert cpe.publish(shard_topic("cpe-0001", "state"), state_doc("cpe-0001", 2)) < 0x80
    finally:
        cpe.close()


def test_a_cpe_naming_another_shard_is_dropped_and_counted(
        any_shard_broker: MosquittoBroker, pki: Pki) -> None:
    """Where the broker's ACL predates the per-CPE shard grants, the xApp drops the message."""
    sub = ChannelSubscriber(xapp_settings_for(any_shard_broker, pki)).start()
    cpe = connect_client(any_shard_broker, "cpe-0001")
    try:
        assert sub.wait_subscribed(10)
        # That ACL lets cpe-0001 write its own id under any shard; only 47 is its shard.
        assert cpe.publish("mcw/v1/s/2/cpe/cpe-0001/state", state_doc("cpe-0001", 1)) < 0x80
        assert cpe.publish("mcw/v1/s/2/cpe/cpe-0001/telemetry",
                           telemetry_doc("cpe-0001", 1.0)) < 0x80
        assert sub.wait_for(lambda s: s.received >= 2, 5)
        assert sub.directory.state("cpe-0001") is None and telemetry_cpes(sub) == set()
        assert sub.drops.snapshot() == {"state/shard-mismatch": 1,
                                        "telemetry/shard-mismatch": 1}
        assert cpe.publish(shard_topic("cpe-0001", "state"), state_doc("cpe-0001", 2)) < 0x80
        assert sub.wait_for(lambda s: s.directory.state("cpe-0001") is not None, 5)
    finally:
        cpe.close()
        sub.stop()


def test_legacy_topics_accepted_filtered_and_counted(
        proxy_broker: MosquittoBroker, xapp_settings: MqttSettings) -> None:
    mine = SHARD["cpe-0001"]
    sub = ChannelSubscriber(xapp_settings)
    sub.set_shards(frozenset({mine, SHARD["cpe-0002"]}))
    sub.start()
    old1 = connect_client(proxy_broker, "cpe-0001", client_id="old1")
    old3 = connect_client(proxy_broker, "cpe-0003", client_id="old3")
    proxy = connect_client(proxy_broker, "proxy-0001", client_id="p1")
    try:
        assert sub.wait_subscribed(10)
        # Agents of an earlier release: cpe-0001 (shard held) is taken, cpe-0003 is not.
        assert old1.publish("mcw/v1/cpe/cpe-0001/state", state_doc("cpe-0001", 1)) < 0x80
        assert old3.publish("mcw/v1/cpe/cpe-0003/state", state_doc("cpe-0003", 1)) < 0x80
        assert old1.publish("mcw/v1/cpe/cpe-0001/telemetry", telemetry_doc("cpe-0001", 1)) < 0x80
        base = "mcw/v1/proxy/proxy-0001/cpe"
        assert proxy.publish(f"{base}/cpe-0002/state",
                             proxy_cpe_state("proxy-0001", "cpe-0002", 1), retain=True) < 0x80
        assert sub.wait_for(lambda s: s.received >= 4, 5)
        assert set(sub.directory.states()) == {"cpe-0001"}
        assert telemetry_cpes(sub) == {"cpe-0001"}
        assert set(sub.directory.proxy_cpe_states()) == {("proxy-0001", "cpe-0002")}
        assert sub.legacy_received == 4 and sub.unheld == 1

        # The agents are upgraded: the sharded topic from then on, a cleared legacy state
        # (not a drop), and a stale legacy message no longer counts for the CPE.
        assert old1.publish(shard_topic("cpe-0001", "state"), state_doc("cpe-0001", 2)) < 0x80
        assert old1.publish("mcw/v1/cpe/cpe-0001/state", b"", retain=True) < 0x80
        assert old1.publish("mcw/v1/cpe/cpe-0001/state", state_doc("cpe-0001", 1)) < 0x80
        sharded = shard_topic("cpe-0002", "state", proxy_id="proxy-0001")
        assert proxy.publish(sharded, proxy_cpe_state("proxy-0001", "cpe-0002", 2),
                             retain=True) < 0x80
        assert proxy.publish(f"{base}/cpe-0002/state", b"", retain=True) < 0x80
        assert sub.wait_for(lambda s: s.received >= 9, 5)
        st = sub.directory.state("cpe-0001")
        assert st is not None and st.applied_version == 2
        down = sub.directory.proxy_cpe_states().get(("proxy-0001", "cpe-0002"))
        assert down is not None and down.applied_version == 2
        assert sub.drops.total() == 0 and sub.legacy_received == 7
        exported = exposition(sub)
        assert "mcw_mqtt_legacy_messages_total 7.0" in exported
        assert "mcw_mqtt_subscriber_shards 2.0" in exported
    finally:
        for c in (old1, old3, proxy):
            c.close()
        sub.stop()


def test_without_legacy_topics_old_agents_are_not_heard(
        proxy_broker: MosquittoBroker, xapp_settings: MqttSettings) -> None:
    sub = ChannelSubscriber(xapp_settings, legacy_topics=False).start()
    old = connect_client(proxy_broker, "cpe-0001", client_id="old")
    try:
        assert sub.wait_subscribed(10)
        assert old.publish("mcw/v1/cpe/cpe-0001/state", state_doc("cpe-0001", 1)) < 0x80
        assert old.publish(shard_topic("cpe-0002", "state"), b"x") == 0x87  # control: ACL
        publish_states(proxy_broker, cpes=("cpe-0002",))
        assert sub.wait_for(lambda s: s.directory.state("cpe-0002") is not None, 5)
        settle(proxy_broker, sub, "cpe-0002")
        assert set(sub.directory.states()) == {"cpe-0002"} and sub.legacy_received == 0
    finally:
        old.close()
        sub.stop()


def test_shards_change_while_messages_flow(proxy_broker: MosquittoBroker,
                                           xapp_settings: MqttSettings) -> None:
    """set_shards from another thread than paho's, over and over, while states arrive: no
    message handling fails, and the end state is the last set's."""
    sub = ChannelSubscriber(xapp_settings).start()
    agents: list[TestClient] = [connect_client(proxy_broker, c, client_id=f"f-{c}")
                                for c in CPES]
    stop = threading.Event()

    def flood() -> None:
        v = 0
        while not stop.is_set():
            v += 1
            for cpe, a in zip(CPES, agents, strict=True):
                a.publish(shard_topic(cpe, "state"), state_doc(cpe, v), qos=0, retain=True)
            time.sleep(0.002)  # a steady flood, not one burst the broker queues

    try:
        assert sub.wait_subscribed(10)
        t = threading.Thread(target=flood)
        t.start()
        sets = [frozenset({SHARD["cpe-0001"]}), None,
                frozenset({SHARD["cpe-0002"], SHARD["cpe-0004"]}), frozenset()]
        for i in range(40):
            sub.set_shards(sets[i % len(sets)])
            time.sleep(0.01)  # the changes spread over the flood, not done before it
        final = frozenset({SHARD["cpe-0003"]})
        sub.set_shards(final)
        stop.set()
        t.join()
        assert sub.wait_subscribed(5) and sub.healthy()
        assert sub.wait_for(lambda s: set(s.directory.states()) == {"cpe-0003"}, 5)
        settle(proxy_broker, sub, "cpe-0003")
        assert set(sub.directory.states()) == {"cpe-0003"}
        assert sub.drops.total() == 0 and sub.callback_errors == 0
    finally:
        stop.set()
        for a in agents:
            a.close()
        sub.stop()


def test_shard_arguments_are_checked(xapp_settings: MqttSettings) -> None:
    with pytest.raises(ValueError, match="shard_count"):
        ChannelSubscriber(xapp_settings, shard_count=0)
    sub = ChannelSubscriber(xapp_settings, shard_count=8)
    with pytest.raises(ValueError, match="shards"):
        sub.set_shards(frozenset({8}))
    sub.set_shards(frozenset({0, 7}))
    assert sub.shards() == frozenset({0, 7})
