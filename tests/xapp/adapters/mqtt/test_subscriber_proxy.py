"""The xApp's subscriber and the proxy agents' topics, on a real Mosquitto whose ACL is what
``broker/make-acl.sh`` generates: who applies a CPE's downlink, the proxy's own state, its
per-CPE downlink telemetry, and what is dropped."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.mosquitto import (
    BROKER_DIR,
    MosquittoBroker,
    Pki,
    connect_client,
    make_pki,
    mosquitto_binary,
)
from tests.xapp.adapters.mqtt.conftest import decision, xapp_settings_for
from tests.xapp.adapters.mqtt.test_subscriber import state_doc, telemetry_doc
from xapp.adapters.mqtt import ChannelSubscriber, MqttSettings, ProxyState, shard_topic
from xapp.app.endpoints import cpes_document
from xapp.core.forecast import KpiFrame
from xapp.core.ports import CpeRecord, DirectionRecord


def cpes(sub: ChannelSubscriber, records: Mapping[str, CpeRecord] | None = None
         ) -> dict[str, Any]:
    """``/ric/v1/cpes``'s CPEs: ``records`` as published, who applies them as ``sub``'s
    directory knows."""
    agents = sub.directory
    return dict(cpes_document(records or {}, agents.states(), agents.downlinks(),
                              agents.downlink_semantics)["cpes"])


def proxy_state(proxy: str, online: bool = True, **extra: Any) -> bytes:
    doc = {"schema": "mcw.proxy-state.v1", "proxy_id": proxy, "online": online, "time_ms": 5,
           "backend": "mptcp-upstream",
           "capabilities": {"on_off_only": True, "directions_coupled": True},
           "cpes": 2, "cpes_applied": 1, "rules": {"used": 0, "limit": 0, "overflow_cpes": 0},
           "last_error": ""}
    doc.update(extra)
    return json.dumps(doc).encode()


def proxy_cpe_state(proxy: str, cpe: str, version: int, online: bool = True,
                    **extra: Any) -> bytes:
    doc = {"schema": "mcw.state.v2", "cpe_id": cpe, "online": online, "role": "proxy",
           "proxy_id": proxy, "direction": "dl", "time_ms": 6, "applied_version": version,
           "applied_weights": {"nr": 1, "wifi": 1}, "backend": "mptcp-upstream",
           "links": {"nr": "up", "wifi": "up"}, "event": "applied"}
    doc.update(extra)
    return json.dumps(doc).encode()


def proxy_telemetry(proxy: str, cpe: str, mbps: float, saturated: float) -> bytes:
    return json.dumps({
        "schema": "mcw.telemetry.v2", "cpe_id": cpe, "proxy_id": proxy, "time_ms": 7000,
        "interval_ms": 1000,
        "wats": {"wifi": {"up": True, "subflows": 1, "rtt_ms": 4.0,
                          "dl": {"delivered_mbps": mbps, "bytes_acked": 10, "cwnd": 30,
                                 "saturated": saturated, "delivery_rate_mbps": mbps}}},
    }).encode()


def test_downlink_is_known_per_cpe_from_the_proxys_reports(
        proxy_broker: MosquittoBroker, xapp_settings: MqttSettings) -> None:
    proxies: list[ProxyState] = []
    frames: list[KpiFrame] = []
    p1 = connect_client(proxy_broker, "proxy-0001", client_id="p1")
    cpe = connect_client(proxy_broker, "cpe-0001", client_id="cpe1")
    sub = ChannelSubscriber(xapp_settings, on_proxy_state=proxies.append,
                            on_telemetry=frames.append)
    base = "mcw/v1/proxy/proxy-0001"
    try:
        # Retained before the xApp subscribes, as after an xApp restart.
        assert cpe.publish(shard_topic("cpe-0001", "state"), state_doc("cpe-0001", 3),
                           retain=True) < 0x80
        assert p1.publish(f"{base}/state", proxy_state("proxy-0001"), retain=True) < 0x80
        assert p1.publish(shard_topic("cpe-0001", "state", proxy_id="proxy-0001"),
                          proxy_cpe_state("proxy-0001", "cpe-0001", 9), retain=True) < 0x80
        sub.start()
        assert sub.wait_subscribed(10)
        assert sub.wait_for(lambda s: s.directory.downlink("cpe-0001") is not None
                            and s.directory.state("cpe-0001") is not None, 5)
        down = sub.directory.downlink("cpe-0001")
        assert down is not None and down.proxy_id == "proxy-0001"
        assert down.state.applied_version == 9 and down.state.direction == "dl"
        # Served, but no state yet: nobody applies it.
        assert sub.directory.downlink("cpe-0002") is None
        proxy = sub.directory.proxy("proxy-0001")
        assert proxy is not None and proxy.online and proxy.directions_coupled
        assert proxy.cpes == 2 and proxies[-1] == proxy
        up = sub.directory.state("cpe-0001")
        assert up is not None and up.direction == "ul" and up.applied_version == 3

        # /ric/v1/cpes: both directions as published, and who applies each.
        dl = DirectionRecord.from_decision(decision({"nr": 1, "wifi": 3}, "load_balancing"),
                                           mode="load_balancing", policy_source="default")
        ul = DirectionRecord.from_decision(decision({"nr": 2, "wifi": 0}, "hysteresis"),
                                           mode="load_balancing", policy_source="ul-policy")
        doc = cpes(sub, {"cpe-0001": CpeRecord(9, 100.0, dl, ul),
                         "cpe-0004": CpeRecord(1, 100.0, ul, ul)})
        assert set(doc) == {"cpe-0001", "cpe-0004"}
        one = doc["cpe-0001"]
        assert one["published"]["version"] == 9
        assert one["published"]["dl"]["weights"] == {"nr": 1, "wifi": 3}
        assert one["published"]["dl"]["shares"] == {"nr": 0.25, "wifi": 0.75}
        assert one["published"]["ul"] == {
            "weights": {"nr": 2, "wifi": 0}, "shares": {"nr": 1.0, "wifi": 0.0},
            "mode": "load_balancing", "reason": "hysteresis", "policy": "ul-policy",
            "aggregate_mbps": 100.0}
        assert one["applied_by"]["ul"] == {"role": "cpe", "online": True, "applied_version": 3,
                                           "applied_weights": {"nr": 0, "wifi": 3},
                                           "semantics": None, "applied_caps_mbps": {},
                                           "applied_classes": {}}
        assert "caps_mbps" not in one["published"]["dl"]  # none sent: none shown
        assert one["applied_by"]["dl"]["proxy_id"] == "proxy-0001"
        assert one["applied_by"]["dl"]["applied_version"] == 9
        assert one["agent"]["addresses"] == {"nr": "10.1.0.2", "wifi": "10.2.0.2"}
        # No agent has reported, no proxy serves it: nobody applies either direction.
        assert doc["cpe-0004"]["applied_by"] == {"ul": None, "dl": None}
        assert json.loads(json.dumps(doc)) == doc  # what the endpoint serves

        # Downlink telemetry from the sender (the proxy): saturation is known.
        p1.publish(shard_topic("cpe-0001", "telemetry", proxy_id="proxy-0001"),
                   proxy_telemetry("proxy-0001", "cpe-0001", 412.5, 0.97), qos=1)
        assert sub.wait_for(lambda _s: len(frames) == 1, 5)
        f = frames[0]
        assert list(f.cpe) == ["cpe-0001"] and list(f.wat) == ["wifi"]
        assert f.direction is not None and list(f.direction) == ["dl"]
        assert f.column("delivered_mbps")[0] == 412.5 and f.column("saturated")[0] == 0.97
        assert np.isnan(f.column("bytes_acked")).sum() == 0

        # The proxy goes offline (its last will): it applies nothing.
        p1.publish(f"{base}/state", proxy_state("proxy-0001", online=False), retain=True)
        assert sub.wait_for(lambda s: s.directory.downlink("cpe-0001") is None, 5)
        p1.publish(f"{base}/state", proxy_state("proxy-0001"), retain=True)
        assert sub.wait_for(lambda s: s.directory.downlink("cpe-0001") is not None, 5)
        # The per-CPE state says offline (lease ran out, CPE unknown): nobody applies it.
        p1.publish(shard_topic("cpe-0001", "state", proxy_id="proxy-0001"),
                   proxy_cpe_state("proxy-0001", "cpe-0001", 9, online=False), retain=True)
        assert sub.wait_for(lambda s: s.directory.downlink("cpe-0001") is None, 5)
        p1.publish(shard_topic("cpe-0001", "state", proxy_id="proxy-0001"),
                   proxy_cpe_state("proxy-0001", "cpe-0001", 10), retain=True)
        assert sub.wait_for(lambda s: s.directory.downlink("cpe-0001") is not None, 5)
        # An empty retained message: the proxy stopped serving the CPE.
        p1.publish(shard_topic("cpe-0001", "state", proxy_id="proxy-0001"), b"", retain=True)
        assert sub.wait_for(lambda s: s.directory.downlink("cpe-0001") is None
                            and ("proxy-0001", "cpe-0001") not in s.directory.proxy_cpe_states(), 5)
        assert sub.drops.total() == 0
    finally:
        p1.close()
        cpe.close()
        sub.stop()


def test_a_proxy_speaking_for_another_is_dropped_and_counted(
        proxy_broker: MosquittoBroker, xapp_settings: MqttSettings) -> None:
    p1 = connect_client(proxy_broker, "proxy-0001", client_id="p1")
    sub = ChannelSubscriber(xapp_settings).start()
    base = "mcw/v1/proxy/proxy-0001"
    dl_state = shard_topic("cpe-0001", "state", proxy_id="proxy-0001")
    try:
        assert sub.wait_subscribed(10)
        # On its own topics (the ACL lets it), but naming another proxy, another CPE, a CPE
        # role, and a v1 state.
        p1.publish(f"{base}/state", proxy_state("proxy-0002"))
        p1.publish(dl_state, proxy_cpe_state("proxy-0002", "cpe-0001", 1))
        p1.publish(dl_state, proxy_cpe_state("proxy-0001", "cpe-0002", 1))
        p1.publish(dl_state,
                   proxy_cpe_state("proxy-0001", "cpe-0001", 1, role="cpe"))
        p1.publish(dl_state,
                   proxy_cpe_state("proxy-0001", "cpe-0001", 1, schema="mcw.state.v1"))
        p1.publish(shard_topic("cpe-0001", "telemetry", proxy_id="proxy-0001"), b"[" * 5000)
        p1.publish(f"{base}/state", proxy_state("proxy-0001"))  # the valid one, sent last
        assert sub.wait_for(lambda s: s.received == 7, 5)
        assert sub.drops.snapshot() == {
            "proxy-state/proxy-id-mismatch": 1, "state/proxy-id-mismatch": 1,
            "state/cpe-id-mismatch": 1, "state/role-mismatch": 1, "state/schema": 1,
            "telemetry/bad-json": 1,
        }
        assert sub.directory.proxy_cpe_states() == {}
        assert set(sub.directory.proxies()) == {"proxy-0001"}
        # A CPE certificate cannot write proxy topics: the broker never forwards it.
        cpe = connect_client(proxy_broker, "cpe-0001", client_id="cpe1")
        try:
            rc = cpe.publish(dl_state,
                             proxy_cpe_state("proxy-0001", "cpe-0001", 99))
            assert rc >= 0x80
        finally:
            cpe.close()
        p1.publish(f"{base}/state", proxy_state("proxy-0001", cpes=5))
        assert sub.wait_for(lambda s: (p := s.directory.proxy("proxy-0001")) is not None
                            and p.cpes == 5, 5)
        assert sub.received == 8 and sub.directory.proxy_cpe_states() == {}
    finally:
        p1.close()
        sub.stop()


@pytest.fixture
def pre_deny_broker(pki: Pki, tmp_path: Path) -> Iterator[MosquittoBroker]:
    """A broker whose proxy stanza lacks the deny of mcw/v1/cpe/<proxy id>/# (an ACL written
    before it existed): the CPE patterns then let the proxy's certificate write as a CPE."""
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    make_pki(pki.root, n_cpes=1, n_proxies=1)
    text = subprocess.run(["bash", str(BROKER_DIR / "make-acl.sh"), "proxy-0001:cpe-0001"],
                          capture_output=True, text=True, check=True).stdout
    old = "\n".join(ln for ln in text.splitlines()
                    if ln != "topic deny mcw/v1/cpe/proxy-0001/#") + "\n"
    assert old != text
    acl = tmp_path / "acl"
    acl.write_text(old)
    b = MosquittoBroker(pki, tmp_path / "broker", acl=acl).start()
    try:
        yield b
    finally:
        b.stop()


def test_a_proxy_certificate_is_not_taken_for_a_cpe(
        pre_deny_broker: MosquittoBroker, pki: Pki) -> None:
    settings = xapp_settings_for(pre_deny_broker, pki)
    p1 = connect_client(pre_deny_broker, "proxy-0001", client_id="p1")
    sub = ChannelSubscriber(settings).start()
    try:
        assert sub.wait_subscribed(10)
        # Before the xApp knows proxy-0001 is a proxy, its forged CPE state looks like a CPE's.
        assert p1.publish("mcw/v1/cpe/proxy-0001/state", state_doc("proxy-0001", 1)) < 0x80
        assert sub.wait_for(lambda s: "proxy-0001" in s.directory.states(), 5)
        # Its own proxy state tells the xApp what that certificate is: the "CPE" goes...
        assert p1.publish("mcw/v1/proxy/proxy-0001/state", proxy_state("proxy-0001")) < 0x80
        assert sub.wait_for(lambda s: s.directory.proxy("proxy-0001") is not None, 5)
        assert "proxy-0001" not in sub.directory.states()
        # ...and whatever it writes on CPE topics from now on is refused and counted.
        assert p1.publish("mcw/v1/cpe/proxy-0001/state", state_doc("proxy-0001", 2)) < 0x80
        assert p1.publish("mcw/v1/cpe/proxy-0001/telemetry",
                          telemetry_doc("proxy-0001", 5.0)) < 0x80
        assert sub.wait_for(lambda s: s.received == 4, 5)
        assert "proxy-0001" not in sub.directory.states()
        assert sub.drops.snapshot() == {"state/role-mismatch": 1, "telemetry/role-mismatch": 1}
    finally:
        p1.close()
        sub.stop()


def test_an_address_conflict_shows_in_ric_v1_cpes(
        proxy_broker: MosquittoBroker, xapp_settings: MqttSettings) -> None:
    """The proxy reports two CPEs claiming one address with alarm address-conflict in both
    per-CPE states; /ric/v1/cpes shows it on each CPE's downlink, and drops it once cleared."""
    p1 = connect_client(proxy_broker, "proxy-0001", client_id="p1")
    sub = ChannelSubscriber(xapp_settings).start()
    base = "mcw/v1/proxy/proxy-0001"
    error = "address-conflict: address 10.31.2.2 also claimed by {}: downlink not steered"
    try:
        assert sub.wait_subscribed(10)
        assert p1.publish(f"{base}/state", proxy_state("proxy-0001"), retain=True) < 0x80
        for cpe, other in (("cpe-0001", "cpe-0002"), ("cpe-0002", "cpe-0001")):
            assert p1.publish(shard_topic(cpe, "state", proxy_id="proxy-0001"), proxy_cpe_state(
                "proxy-0001", cpe, 0, event="rejected", alarm="address-conflict",
                applied_weights={}, last_error=error.format(other)), retain=True) < 0x80
        assert sub.wait_for(lambda s: all(
            (d := s.directory.downlink(c)) is not None and d.state.alarm == "address-conflict"
            for c in ("cpe-0001", "cpe-0002")), 5)
        doc = cpes(sub)
        for cpe, other in (("cpe-0001", "cpe-0002"), ("cpe-0002", "cpe-0001")):
            dl = doc[cpe]["applied_by"]["dl"]
            assert dl["alarm"] == "address-conflict" and other in dl["last_error"]
            assert dl["applied_weights"] == {}
        # The claim withdrawn: the proxy's next state has no alarm.
        assert p1.publish(shard_topic("cpe-0001", "state", proxy_id="proxy-0001"),
                          proxy_cpe_state("proxy-0001", "cpe-0001", 4), retain=True) < 0x80
        assert sub.wait_for(lambda s: (d := s.directory.downlink("cpe-0001")) is not None
                            and d.state.alarm is None, 5)
        doc = cpes(sub)
        assert doc["cpe-0001"]["applied_by"]["dl"]["alarm"] is None
        assert sub.drops.total() == 0
    finally:
        p1.close()
        sub.stop()


@pytest.mark.parametrize("address", [
    "0.0.0.0", "::", "::ffff:10.2.0.2", "127.0.0.1", "::1", "224.0.0.1", "ff02::1",
    "255.255.255.255"])
def test_a_cpe_claiming_a_wildcard_address_is_dropped(
        proxy_broker: MosquittoBroker, xapp_settings: MqttSettings, address: str) -> None:
    """A CPE state whose WAT address would match traffic that is not the CPE's is dropped and
    counted, as the proxy agent refuses it; the CPE's last good state stays."""
    cpe = connect_client(proxy_broker, "cpe-0001", client_id="cpe1")
    sub = ChannelSubscriber(xapp_settings).start()
    try:
        assert sub.wait_subscribed(10)
        assert cpe.publish(shard_topic("cpe-0001", "state"), state_doc("cpe-0001", 3)) < 0x80
        assert sub.wait_for(lambda s: s.directory.state("cpe-0001") is not None, 5)
        bad = state_doc("cpe-0001", 4, addresses={"nr": "10.1.0.2", "wifi": address})
        assert cpe.publish(shard_topic("cpe-0001", "state"), bad) < 0x80
        assert sub.wait_for(lambda s: s.received == 2, 5)
        assert sub.drops.snapshot() == {"state/bad-address": 1}
        st = sub.directory.state("cpe-0001")
        assert st is not None and st.applied_version == 3
        assert st.addresses == {"nr": "10.1.0.2", "wifi": "10.2.0.2"}
    finally:
        cpe.close()
        sub.stop()
