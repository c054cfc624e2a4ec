"""The shipped ACL and mTLS settings, enforced by a real Mosquitto."""

from __future__ import annotations

import itertools
import signal
import ssl
import subprocess
from pathlib import Path
from typing import Literal

import pytest

from tests.support.mosquitto import (
    BROKER_DIR,
    MosquittoBroker,
    Pki,
    Received,
    TestClient,
    connect_client,
    make_acl,
    make_pki,
    mosquitto_binary,
)
from tests.support.polling import wait_until
from tests.xapp.adapters.mqtt.conftest import SERVED
from xapp.adapters.mqtt import shard_filter, shard_topic
from xapp.core.shards import shard_of

NOT_AUTHORISED = 0x87
_MARKS = itertools.count()


def settle(reader: TestClient, writer: TestClient, topic: str) -> list[Received]:
    """What ``reader`` received before a marker ``writer`` publishes to ``topic`` now.

    Mosquitto handles one packet at a time and queues each subscriber's messages in that order:
    a publish before it sends the PUBACK, retained messages before it sends the SUBACK.  So
    once the marker has arrived, whatever an acknowledged publish or subscribe before it was
    going to deliver to ``reader`` has arrived too, and "nothing else came" is a fact rather
    than a quiet period waited out."""
    mark = f"mark-{next(_MARKS)}".encode()
    assert writer.publish(topic, mark) < 0x80
    assert reader.wait_for(lambda: any(m.payload == mark for m in reader.messages))
    with reader.cond:
        received = list(reader.messages)
    return received[:next(i for i, m in enumerate(received) if m.payload == mark)]


def test_cpe_reads_its_own_weights_only(broker: MosquittoBroker) -> None:
    xapp = connect_client(broker, "mcw-xapp")
    spy = connect_client(broker, "cpe-0002")
    try:
        spy.subscribe("mcw/v1/cpe/cpe-0001/weights")
        spy.subscribe("mcw/v1/cpe/#")
        spy.subscribe("mcw/v1/cpe/+/state")
        assert xapp.publish("mcw/v1/cpe/cpe-0001/weights", b"for-0001", retain=True) < 0x80
        assert xapp.publish("mcw/v1/cpe/cpe-0002/weights", b"for-0002", retain=True) < 0x80
        # Positive control: its own weights do arrive, through the wildcard subscription.
        got = settle(spy, xapp, "mcw/v1/cpe/cpe-0002/weights")
        assert {m.topic for m in got} == {"mcw/v1/cpe/cpe-0002/weights"}
        # Retained weights of another CPE are refused to a late subscriber too.
        late = connect_client(broker, "cpe-0003")
        try:
            late.subscribe("mcw/v1/cpe/cpe-0001/weights")
            late.subscribe("mcw/v1/cpe/cpe-0003/weights")
            assert xapp.publish("mcw/v1/cpe/cpe-0003/weights", b"for-0003") < 0x80
            got = settle(late, xapp, "mcw/v1/cpe/cpe-0003/weights")
            assert [(m.topic, m.payload) for m in got] == [
                ("mcw/v1/cpe/cpe-0003/weights", b"for-0003")]
        finally:
            late.close()
    finally:
        spy.close()
        xapp.close()


@pytest.mark.parametrize("topic", [
    "mcw/v1/cpe/cpe-0001/weights",   # another CPE's weights
    "mcw/v1/cpe/cpe-0002/weights",   # its own weights: only the xApp writes weights
    "mcw/v1/cpe/cpe-0001/state",     # another CPE's state
    "mcw/v1/cpe/cpe-0001/telemetry",
])
def test_cpe_cannot_publish_outside_its_grant(broker: MosquittoBroker, topic: str) -> None:
    victim = connect_client(broker, "cpe-0001")
    xapp = connect_client(broker, "mcw-xapp")
    evil = connect_client(broker, "cpe-0002")
    try:
        victim.subscribe("mcw/v1/cpe/cpe-0001/weights")
        xapp.subscribe("mcw/v1/cpe/+/state")
        xapp.subscribe("mcw/v1/cpe/+/telemetry")
        assert evil.publish(topic, b"forged", retain=True) == NOT_AUTHORISED
        # Positive control on the same connections: legitimate traffic flows.
        assert evil.publish("mcw/v1/cpe/cpe-0002/state", b"legit") < 0x80
        assert xapp.publish("mcw/v1/cpe/cpe-0001/weights", b"legit") < 0x80
        to_victim = settle(victim, xapp, "mcw/v1/cpe/cpe-0001/weights")
        to_xapp = settle(xapp, evil, "mcw/v1/cpe/cpe-0002/state")
        assert [m.payload for m in to_victim] == [b"legit"]
        assert [(m.topic, m.payload) for m in to_xapp] == [("mcw/v1/cpe/cpe-0002/state", b"legit")]
        # And nothing forged was retained for a later reader either.
        reader = connect_client(broker, "mcw-xapp", client_id="late-reader")
        try:
            reader.subscribe("mcw/v1/cpe/+/state")
            assert settle(reader, evil, "mcw/v1/cpe/cpe-0002/state") == []
        finally:
            reader.close()
    finally:
        for c in (victim, xapp, evil):
            c.close()


def test_xapp_cannot_impersonate_an_agent(broker: MosquittoBroker) -> None:
    xapp = connect_client(broker, "mcw-xapp")
    try:
        assert xapp.publish("mcw/v1/cpe/cpe-0001/state", b"{}") == NOT_AUTHORISED
        assert xapp.publish("elsewhere", b"{}") == NOT_AUTHORISED
        # The CPE patterns would grant its own CN's CPE topics without the stanza's deny.
        assert xapp.publish("mcw/v1/cpe/mcw-xapp/state", b"{}") == NOT_AUTHORISED
        assert xapp.publish("mcw/v1/cpe/mcw-xapp/telemetry", b"{}") == NOT_AUTHORISED
        assert xapp.publish("mcw/v1/cpe/cpe-0001/weights", b"{}") < 0x80
    finally:
        xapp.close()


@pytest.mark.parametrize("name", [None, "rogue"])
def test_client_without_a_trusted_certificate_is_refused(broker: MosquittoBroker,
                                                         name: str | None) -> None:
    # With TLS 1.3 the client may finish its side of the handshake before the server
    # rejects the certificate, so refusal shows as an SSL error or as a connection that
    # never gets a CONNACK.
    try:
        client = connect_client(broker, name, wait=False)
    except (ssl.SSLError, OSError):
        return
    try:
        assert not client.wait_for(lambda: client.connect_rc is not None, timeout_s=2.0)
    finally:
        client.close()
    assert "certificate" in broker.log()


# --- the proxy role: grants generated by broker/make-acl.sh -------------------------------------
# proxy-0001 serves cpe-0001 and cpe-0002, proxy-0002 serves cpe-0003; cpe-0004 has no proxy.
def cpe_traffic(broker: MosquittoBroker) -> None:
    """Retained weights (from the xApp) and states (from each CPE) for cpe-0001..cpe-0004."""
    xapp = connect_client(broker, "mcw-xapp", client_id="traffic-xapp")
    try:
        for i in range(1, 5):
            cpe = f"cpe-{i:04d}"
            assert xapp.publish(f"mcw/v1/cpe/{cpe}/weights", f"w-{cpe}", retain=True) < 0x80
            agent = connect_client(broker, cpe, client_id=f"traffic-{cpe}")
            try:
                assert agent.publish(f"mcw/v1/cpe/{cpe}/state", f"s-{cpe}", retain=True) < 0x80
                # QoS 1, acknowledged: handled before what follows (see settle).
                assert agent.publish(f"mcw/v1/cpe/{cpe}/telemetry", f"t-{cpe}") < 0x80
            finally:
                agent.close()
    finally:
        xapp.close()


def expected_for(proxy: str) -> set[str]:
    return {f"mcw/v1/cpe/{cpe}/{kind}" for cpe in SERVED[proxy] for kind in ("weights", "state")}


PROXY_SPY_FILTERS = (
    "mcw/v1/cpe/#",                      # everything of every CPE
    "mcw/v1/cpe/cpe-0003/weights",       # another proxy's CPE, by name
    "mcw/v1/cpe/cpe-0003/state",
    "mcw/v1/cpe/cpe-0004/state",         # a CPE no proxy serves
    "mcw/v1/cpe/+/telemetry",
    "mcw/v1/proxy/#",                    # other proxies' reports
    "#",
)


def test_proxy_reads_the_weights_and_state_of_its_cpes_only(
        proxy_broker: MosquittoBroker) -> None:
    live = connect_client(proxy_broker, "proxy-0001", client_id="proxy-live")
    other = connect_client(proxy_broker, "proxy-0002", client_id="proxy-other")
    marker = connect_client(proxy_broker, "mcw-xapp", client_id="marker")
    try:
        for f in PROXY_SPY_FILTERS:
            live.subscribe(f)
        # Delivered while connected.
        cpe_traffic(proxy_broker)
        assert other.publish("mcw/v1/proxy/proxy-0002/cpe/cpe-0003/state", b"p2") < 0x80
        got = settle(live, marker, "mcw/v1/cpe/cpe-0001/weights")
        assert {m.topic for m in got} == expected_for("proxy-0001")
        # Retained, to a proxy that subscribes after the fact (a proxy agent's restart).
        late = connect_client(proxy_broker, "proxy-0001", client_id="proxy-late")
        try:
            for f in PROXY_SPY_FILTERS:
                late.subscribe(f)
            got = settle(late, marker, "mcw/v1/cpe/cpe-0001/weights")
            assert {m.topic for m in got} == expected_for("proxy-0001")
            assert all(m.retain for m in got)
        finally:
            late.close()
        # The other proxy gets its own CPE and nothing of proxy-0001's.
        other.subscribe("mcw/v1/cpe/#")
        got = settle(other, marker, "mcw/v1/cpe/cpe-0003/weights")
        assert {m.topic for m in got} == expected_for("proxy-0002")
    finally:
        for c in (live, other, marker):
            c.close()


def test_proxy_writes_its_own_topics_and_the_xapp_reads_them(
        proxy_broker: MosquittoBroker) -> None:
    xapp = connect_client(proxy_broker, "mcw-xapp")
    proxy = connect_client(proxy_broker, "proxy-0001")
    try:
        xapp.subscribe("mcw/v1/proxy/#")
        own = ["mcw/v1/proxy/proxy-0001/state",
               "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state",
               "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry",
               "mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state",
               "mcw/v1/proxy/proxy-0001/cpe/cpe-0002/telemetry"]
        for topic in own:
            assert proxy.publish(topic, b"ok", retain=topic.endswith("state")) < 0x80, topic
        # Clearing a served CPE's state (empty retained message) is a write like any other.
        assert proxy.publish("mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state", b"", retain=True) < 0x80
        assert xapp.wait_for(lambda: {m.topic for m in xapp.messages} == set(own))
        # A late xApp replica gets the retained proxy reports; the cleared one is gone.
        replica = connect_client(proxy_broker, "mcw-xapp", client_id="xapp-replica")
        try:
            replica.subscribe("mcw/v1/proxy/+/state")
            replica.subscribe("mcw/v1/proxy/+/cpe/+/state")
            got = settle(replica, proxy, "mcw/v1/proxy/proxy-0001/state")
            assert {m.topic for m in got} == {
                "mcw/v1/proxy/proxy-0001/state", "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state"}
        finally:
            replica.close()
    finally:
        proxy.close()
        xapp.close()


@pytest.mark.parametrize("topic", [
    "mcw/v1/proxy/proxy-0002/state",                   # another proxy's state
    "mcw/v1/proxy/proxy-0002/cpe/cpe-0003/state",      # another proxy's CPE report
    "mcw/v1/proxy/proxy-0002/cpe/cpe-0003/telemetry",
    "mcw/v1/proxy/proxy-0001/cpe/cpe-0003/state",      # a CPE it does not serve
    "mcw/v1/proxy/proxy-0001/cpe/cpe-0004/telemetry",
    "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/weights",    # not a proxy topic
    "mcw/v1/proxy/proxy-0001",
    "mcw/v1/cpe/cpe-0001/weights",                     # a served CPE's weights
    "mcw/v1/cpe/cpe-0001/state",                       # a served CPE's state
    "mcw/v1/cpe/cpe-0001/telemetry",
    "mcw/v1/cpe/cpe-0003/weights",
])
def test_proxy_cannot_publish_outside_its_grant(proxy_broker: MosquittoBroker,
                                                topic: str) -> None:
    xapp = connect_client(proxy_broker, "mcw-xapp")
    victim = connect_client(proxy_broker, "cpe-0001")
    proxy = connect_client(proxy_broker, "proxy-0001")
    try:
        xapp.subscribe("mcw/v1/proxy/#")
        xapp.subscribe("mcw/v1/cpe/+/state")
        xapp.subscribe("mcw/v1/cpe/+/telemetry")
        victim.subscribe("mcw/v1/cpe/cpe-0001/weights")
        assert proxy.publish(topic, b"forged", retain=True) == NOT_AUTHORISED
        # Positive control on the same connections.
        assert proxy.publish("mcw/v1/proxy/proxy-0001/state", b"legit") < 0x80
        assert xapp.publish("mcw/v1/cpe/cpe-0001/weights", b"legit") < 0x80
        assert [(m.topic, m.payload) for m in settle(xapp, proxy, "mcw/v1/proxy/proxy-0001/state")
                ] == [("mcw/v1/proxy/proxy-0001/state", b"legit")]
        assert [m.payload for m in settle(victim, xapp, "mcw/v1/cpe/cpe-0001/weights")] == [
            b"legit"]
    finally:
        for c in (xapp, victim, proxy):
            c.close()


@pytest.mark.parametrize("topic", [
    "mcw/v1/cpe/proxy-0001/state",
    "mcw/v1/cpe/proxy-0001/telemetry",
    "mcw/v1/cpe/cpe-0001/state",
])
def test_proxy_cannot_publish_as_a_cpe(proxy_broker: MosquittoBroker, topic: str) -> None:
    """The CPE patterns name %u, so without a deny the proxy's certificate could report as a
    CPE called after itself; the xApp subscribes to mcw/v1/cpe/+/state and would take it."""
    xapp = connect_client(proxy_broker, "mcw-xapp")
    proxy = connect_client(proxy_broker, "proxy-0001")
    try:
        xapp.subscribe("mcw/v1/cpe/#")
        xapp.subscribe("mcw/v1/proxy/#")
        assert proxy.publish(topic, b"as-a-cpe") == NOT_AUTHORISED
        # Positive control on the same connections.
        assert proxy.publish("mcw/v1/proxy/proxy-0001/state", b"legit") < 0x80
        assert [(m.topic, m.payload) for m in settle(xapp, proxy, "mcw/v1/proxy/proxy-0001/state")
                ] == [("mcw/v1/proxy/proxy-0001/state", b"legit")]
    finally:
        proxy.close()
        xapp.close()


@pytest.mark.parametrize("topic", [
    "mcw/v1/proxy/proxy-0001/state",
    "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state",
    "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry",
    "mcw/v1/proxy/cpe-0001/state",                     # a "proxy" named after itself
    "mcw/v1/proxy/cpe-0001/cpe/cpe-0001/state",
    "mcw/v1/proxy/cpe-0001/cpe/cpe-0001/telemetry",
])
def test_cpe_cannot_act_as_a_proxy(proxy_broker: MosquittoBroker, topic: str) -> None:
    xapp = connect_client(proxy_broker, "mcw-xapp")
    cpe = connect_client(proxy_broker, "cpe-0001")
    try:
        xapp.subscribe("mcw/v1/proxy/#")
        xapp.subscribe("mcw/v1/cpe/+/state")
        assert cpe.publish(topic, b"forged", retain=True) == NOT_AUTHORISED
        assert cpe.publish("mcw/v1/cpe/cpe-0001/state", b"legit") < 0x80
        assert [(m.topic, m.payload) for m in settle(xapp, cpe, "mcw/v1/cpe/cpe-0001/state")] == [
            ("mcw/v1/cpe/cpe-0001/state", b"legit")]
    finally:
        cpe.close()
        xapp.close()


def test_cpe_reads_no_proxy_topic_and_no_other_cpe_state(proxy_broker: MosquittoBroker) -> None:
    spy = connect_client(proxy_broker, "cpe-0002")
    proxy = connect_client(proxy_broker, "proxy-0001")
    marker = connect_client(proxy_broker, "mcw-xapp", client_id="marker")
    try:
        for f in ("mcw/v1/proxy/#", "mcw/v1/cpe/+/state", "mcw/v1/cpe/cpe-0001/state", "#"):
            spy.subscribe(f)
        cpe_traffic(proxy_broker)
        for topic in ("mcw/v1/proxy/proxy-0001/state",
                      "mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state",
                      "mcw/v1/proxy/proxy-0001/cpe/cpe-0002/telemetry"):
            assert proxy.publish(topic, b"report", retain=topic.endswith("state")) < 0x80
        # Positive control: its own weights arrive; nothing else does, not even the reports
        # of the proxy that serves it.
        got = settle(spy, marker, "mcw/v1/cpe/cpe-0002/weights")
        assert {m.topic for m in got} == {"mcw/v1/cpe/cpe-0002/weights"}
    finally:
        for c in (spy, proxy, marker):
            c.close()


def test_changed_proxy_grants_apply_on_reload(pki: Pki, tmp_path: Path) -> None:
    """A CPE moving to another proxy: rewrite the ACL, SIGHUP, the old grant is gone for
    connected and new clients alike, the new one works; no broker restart."""
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")

    def write_acl(*args: str) -> None:
        acl.write_text(subprocess.run(["bash", str(BROKER_DIR / "make-acl.sh"), *args],
                                      capture_output=True, text=True, check=True).stdout)

    make_pki(pki.root, n_cpes=4, n_proxies=1)
    acl = tmp_path / "acl"
    write_acl("proxy-0001:cpe-0001")
    with MosquittoBroker(pki, tmp_path / "broker", acl=acl) as b:
        xapp = connect_client(b, "mcw-xapp")
        proxy = connect_client(b, "proxy-0001")
        try:
            proxy.subscribe("mcw/v1/cpe/#")
            assert xapp.publish("mcw/v1/cpe/cpe-0001/weights", b"1-before") < 0x80
            assert xapp.publish("mcw/v1/cpe/cpe-0002/weights", b"2-before", retain=True) < 0x80
            assert proxy.wait_for(lambda: bool(proxy.messages))
            assert proxy.publish("mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state", b"x") == \
                NOT_AUTHORISED

            write_acl("proxy-0001:cpe-0002")
            assert b.proc is not None
            b.proc.send_signal(signal.SIGHUP)
            # Logged as the reload starts; the broker handles no packet until it has ended.
            assert wait_until(lambda: "Reloading config" in b.log(), 5)

            # The connected proxy: cpe-0001 is no longer delivered, cpe-0002 now is.
            assert xapp.publish("mcw/v1/cpe/cpe-0001/weights", b"1-after") < 0x80
            assert xapp.publish("mcw/v1/cpe/cpe-0002/weights", b"2-after", retain=True) < 0x80
            got = settle(proxy, xapp, "mcw/v1/cpe/cpe-0002/weights")
            assert [m.payload for m in got] == [b"1-before", b"2-after"]
            assert proxy.publish("mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state", b"x") < 0x80
            assert proxy.publish("mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state", b"x") == \
                NOT_AUTHORISED
            # A new connection gets the new grant's retained weights only.
            late = connect_client(b, "proxy-0001", client_id="proxy-after-reload")
            try:
                late.subscribe("mcw/v1/cpe/#")
                got = settle(late, xapp, "mcw/v1/cpe/cpe-0002/weights")
                assert [(m.topic, m.payload) for m in got] == [
                    ("mcw/v1/cpe/cpe-0002/weights", b"2-after")]
            finally:
                late.close()
        finally:
            proxy.close()
            xapp.close()


# --- the sharded topics: mcw/v1/s/{shard}/... -----------------------------------------------
# make-acl.sh grants each CPE its own topics under its own shard (a user stanza per CPE), and a
# proxy its served CPEs' under theirs; these check that mosquitto does with them what
# broker/acl and make-acl.sh say.


def sharded(cpe: str, kind: Literal["state", "telemetry"] = "state",
            proxy: str | None = None) -> str:
    return shard_topic(cpe, kind, proxy_id=proxy)


@pytest.mark.parametrize(("topic", "allowed"), [
    (sharded("cpe-0001"), True),                         # its own, in its shard
    (sharded("cpe-0001", "telemetry"), True),
    ("mcw/v1/s/3/cpe/cpe-0001/state", False),            # its own id, another shard
    ("mcw/v1/s/invented/cpe/cpe-0001/state", False),     # ... or no shard at all
    ("mcw/v1/s/48/cpe/cpe-0001/telemetry", False),
    (sharded("cpe-0002"), False),                        # another CPE's, in that CPE's shard
    ("mcw/v1/s/47/cpe/cpe-0002/state", False),           # another CPE's, in its own shard
    ("mcw/v1/s/1/2/cpe/cpe-0001/state", False),          # '+' is one level, not two
    ("mcw/v1/s/cpe/cpe-0001/state", False),
    (sharded("cpe-0001", proxy="cpe-0001"), False),      # a "proxy" named after itself
    (sharded("cpe-0001", proxy="proxy-0001"), False),    # its proxy's topic
])
def test_cpe_writes_its_own_sharded_topics_only(proxy_broker: MosquittoBroker, topic: str,
                                                allowed: bool) -> None:
    xapp = connect_client(proxy_broker, "mcw-xapp")
    cpe = connect_client(proxy_broker, "cpe-0001")
    try:
        xapp.subscribe("mcw/v1/s/#")
        rc = cpe.publish(topic, b"x")
        assert (rc < 0x80) if allowed else rc == NOT_AUTHORISED
        assert cpe.publish(sharded("cpe-0001"), b"legit") < 0x80  # positive control
        got = [(m.topic, m.payload) for m in settle(xapp, cpe, sharded("cpe-0001"))]
        assert (sharded("cpe-0001"), b"legit") in got
        assert ((topic, b"x") in got) == allowed
    finally:
        cpe.close()
        xapp.close()


def test_one_shard_subscription_gets_that_shard_only(proxy_broker: MosquittoBroker) -> None:
    shards = {cpe: shard_of(cpe) for cpe in ("cpe-0001", "cpe-0002", "cpe-0003", "cpe-0004")}
    assert len(set(shards.values())) == 4
    replica = connect_client(proxy_broker, "mcw-xapp")
    marker = connect_client(proxy_broker, "cpe-0001", client_id="marker")
    try:
        mine = shards["cpe-0001"]
        replica.subscribe(shard_filter(mine, "state"))
        replica.subscribe(shard_filter(mine, "telemetry"))
        replica.subscribe(shard_filter(mine, "state", proxy=True))
        proxy = connect_client(proxy_broker, "proxy-0001", client_id="p1")
        try:
            for cpe in ("cpe-0001", "cpe-0002"):
                assert proxy.publish(sharded(cpe, proxy="proxy-0001"), b"dl") < 0x80
        finally:
            proxy.close()
        for cpe in shards:
            agent = connect_client(proxy_broker, cpe, client_id=f"a-{cpe}")
            try:
                assert agent.publish(sharded(cpe), b"s", retain=True) < 0x80
                assert agent.publish(sharded(cpe, "telemetry"), b"t") < 0x80
            finally:
                agent.close()
        want = {sharded("cpe-0001"), sharded("cpe-0001", "telemetry"),
                sharded("cpe-0001", proxy="proxy-0001")}
        got = settle(replica, marker, sharded("cpe-0001", "telemetry"))
        assert {m.topic for m in got} == want
    finally:
        replica.close()
        marker.close()
    # Retained states of the shard arrive to a replica that takes it later.
    late = connect_client(proxy_broker, "mcw-xapp", client_id="late-replica")
    marker = connect_client(proxy_broker, "cpe-0003", client_id="marker")
    try:
        late.subscribe(shard_filter(shards["cpe-0003"], "state"))
        got = settle(late, marker, sharded("cpe-0003"))
        assert [(m.topic, m.retain) for m in got] == [(sharded("cpe-0003"), True)]
    finally:
        late.close()
        marker.close()


@pytest.mark.parametrize(("who", "topic"), [
    ("proxy-0001", sharded("cpe-0003", proxy="proxy-0001")),   # a CPE it does not serve
    ("proxy-0001", sharded("cpe-0001", proxy="proxy-0002")),   # as another proxy
    ("proxy-0001", "mcw/v1/s/5/cpe/proxy-0001/state"),         # as a CPE named after itself
    ("proxy-0001", sharded("cpe-0001")),                        # as a CPE it serves
    ("proxy-0001", "mcw/v1/s/3/proxy/proxy-0001/cpe/cpe-0001/state"),  # its CPE, foreign shard
    ("mcw-xapp", "mcw/v1/s/5/cpe/mcw-xapp/state"),             # the xApp as a CPE
    ("mcw-xapp", sharded("cpe-0001")),
    ("mcw-xapp", sharded("cpe-0001", proxy="proxy-0001")),
])
def test_sharded_topics_refuse_impersonation(proxy_broker: MosquittoBroker, who: str,
                                             topic: str) -> None:
    reader = connect_client(proxy_broker, "mcw-xapp", client_id="reader")
    speaker = connect_client(proxy_broker, who)
    try:
        reader.subscribe("mcw/v1/s/#")
        assert speaker.publish(topic, b"forged", retain=True) == NOT_AUTHORISED
        proxy = connect_client(proxy_broker, "proxy-0001", client_id="control")
        try:  # positive control: the proxy's own per-CPE report flows
            assert proxy.publish(sharded("cpe-0002", proxy="proxy-0001"), b"legit") < 0x80
            got = settle(reader, proxy, sharded("cpe-0002", proxy="proxy-0001"))
        finally:
            proxy.close()
        assert [(m.topic, m.payload) for m in got] == [
            (sharded("cpe-0002", proxy="proxy-0001"), b"legit")]
    finally:
        speaker.close()
        reader.close()


def test_sharded_states_reach_the_proxy_of_the_cpe_only(proxy_broker: MosquittoBroker) -> None:
    p1 = connect_client(proxy_broker, "proxy-0001", client_id="p1")
    spy = connect_client(proxy_broker, "cpe-0002", client_id="spy")
    marker = connect_client(proxy_broker, "cpe-0001", client_id="marker")
    xapp = connect_client(proxy_broker, "mcw-xapp", client_id="weights")
    try:
        for f in ("mcw/v1/s/+/cpe/+/state", "mcw/v1/s/#", "#", sharded("cpe-0003")):
            p1.subscribe(f)
            spy.subscribe(f)
        p1.subscribe(sharded("cpe-0001"))  # what the agent subscribes to
        for cpe in ("cpe-0001", "cpe-0003"):
            agent = connect_client(proxy_broker, cpe, client_id=f"a-{cpe}")
            try:
                assert agent.publish(sharded(cpe), b"s", retain=True) < 0x80
            finally:
                agent.close()
        assert {m.topic for m in settle(p1, marker, sharded("cpe-0001"))} == {sharded("cpe-0001")}
        assert settle(spy, xapp, "mcw/v1/cpe/cpe-0002/weights") == []
    finally:
        for c in (p1, spy, marker, xapp):
            c.close()


def test_cpe_cannot_fill_the_broker_under_invented_shards(broker: MosquittoBroker) -> None:
    """Issue 33: with ``mcw/v1/s/+/cpe/%u/state`` granted, one CPE certificate kept 3,000 retained
    8 KiB states under invented shards in the broker, re-delivered to every new subscriber. Each
    CPE now writes under its own shard only: a foreign shard is refused and nothing is kept."""
    own = sharded("cpe-0001")
    assert own.startswith(f"mcw/v1/s/{shard_of('cpe-0001')}/")
    foreign = [f"mcw/v1/s/{n}/cpe/cpe-0001/{kind}" for n in (0, 3, 63, 64, 999, 4095)
               for kind in ("state", "telemetry")] + ["mcw/v1/s/x/cpe/cpe-0001/state"]
    assert own not in foreign
    cpe = connect_client(broker, "cpe-0001")
    try:
        for topic in foreign:
            assert cpe.publish(topic, b"x" * 8192, retain=True) == NOT_AUTHORISED, topic
        assert cpe.publish(own, b"legit", retain=True) < 0x80
    finally:
        cpe.close()
    late = connect_client(broker, "mcw-xapp", client_id="late-subscriber")
    cpe = connect_client(broker, "cpe-0001", client_id="marker")
    try:
        late.subscribe("mcw/v1/s/#")
        assert [(m.topic, m.payload, m.retain) for m in settle(late, cpe, own)] == [
            (own, b"legit", True)]
    finally:
        late.close()
        cpe.close()


def test_cpe_without_a_grant_reports_nothing(pki: Pki, tmp_path: Path) -> None:
    """The broker refuses the sharded state of a CPE make-acl.sh was not given: the operator
    adds a CPE to the ACL (and sends SIGHUP) before it reports."""
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    acl = tmp_path / "acl"
    acl.write_text(make_acl(cpes=["cpe-0001"]))
    with MosquittoBroker(pki, tmp_path / "broker", acl=acl) as b:
        listed, unlisted = connect_client(b, "cpe-0001"), connect_client(b, "cpe-0002")
        try:
            assert listed.publish(sharded("cpe-0001"), b"s", retain=True) < 0x80
            assert unlisted.publish(sharded("cpe-0002"), b"s", retain=True) == NOT_AUTHORISED
        finally:
            listed.close()
            unlisted.close()
