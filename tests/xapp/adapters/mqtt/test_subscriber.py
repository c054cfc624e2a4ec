"""ChannelSubscriber against a real Mosquitto: state, last will, telemetry, dropped payloads,
and the proxy agents' topics under the ACL make-acl.sh generates."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import numpy as np
import pytest

from tests.support.mosquitto import MosquittoBroker, connect_client
from tests.support.paths import REPO
from xapp.adapters.mqtt import ChannelSubscriber, CpeState, MqttSettings, shard_topic
from xapp.core.forecast import KpiFrame


def state_doc(cpe_id: str, version: int, **extra: Any) -> bytes:
    doc = {"schema": "mcw.state.v2", "cpe_id": cpe_id, "online": True, "time_ms": 1,
           "role": "cpe", "direction": "ul",
           "applied_version": version, "applied_weights": {"nr": 0, "wifi": 3},
           "addresses": {"nr": "10.1.0.2", "wifi": "10.2.0.2"},
           "backend": "mptcp-upstream",
           "capabilities": {"max_weight": 1, "on_off_only": True, "directions_coupled": True},
           "links": {"nr": "down", "wifi": "up"}, "event": "applied", "last_error": ""}
    doc.update(extra)
    return json.dumps(doc).encode()


def telemetry_doc(cpe_id: str, mbps: float, **extra: Any) -> bytes:
    """A CPE agent's telemetry: ``mbps`` sent on nr (ul), nothing known of wifi."""
    doc = {"schema": "mcw.telemetry.v2", "cpe_id": cpe_id, "time_ms": 1763800000000,
           "interval_ms": 1000,
           "wats": {"nr": {"rtt_ms": 21.0, "subflows": 1, "up": True,
                           "ul": {"delivered_mbps": mbps, "cwnd": 10, "bytes_acked": 1000}},
                    "wifi": {"up": False, "ul": {"delivered_mbps": 0.0}}}}
    doc.update(extra)
    return json.dumps(doc).encode()


def joined(frames: list[KpiFrame]) -> KpiFrame:
    """The rows of the batches the callback got, in order, as one frame."""
    assert frames and all(f.direction is not None and f.row_time_s is not None for f in frames)
    return KpiFrame(time_s=max(f.time_s for f in frames),
                    cpe=np.concatenate([f.cpe for f in frames]),
                    wat=np.concatenate([f.wat for f in frames]),
                    direction=np.concatenate([f.direction for f in frames]),
                    values={k: np.concatenate([f.column(k) for f in frames])
                            for k in frames[0].values},
                    row_time_s=np.concatenate([f.row_time_s for f in frames]))


def test_state_and_telemetry_reach_the_xapp(broker: MosquittoBroker,
                                            settings: MqttSettings) -> None:
    frames: list[KpiFrame] = []
    states: list[CpeState] = []
    sub = ChannelSubscriber(settings, on_telemetry=frames.append, on_state=states.append)
    cpe = connect_client(broker, "cpe-0001")
    try:
        # Retained before the xApp subscribes: it must still get it.
        assert cpe.publish(shard_topic("cpe-0001", "state"), state_doc("cpe-0001", 7),
                           retain=True) < 0x80
        sub.start()
        assert sub.wait_subscribed(10)
        assert sub.wait_for(lambda s: s.directory.state("cpe-0001") is not None, 5)
        st = sub.directory.state("cpe-0001")
        assert st is not None and st.online and st.applied_version == 7
        assert st.on_off_only and st.max_weight == 1 and st.backend == "mptcp-upstream"
        assert st.links == {"nr": "down", "wifi": "up"} and st.event == "applied"
        assert st.role == "cpe" and st.direction == "ul" and st.directions_coupled
        assert st.addresses == {"nr": "10.1.0.2", "wifi": "10.2.0.2"}
        assert sub.directory.online() == ["cpe-0001"] and states[-1] == st

        cpe.publish(shard_topic("cpe-0001", "telemetry"), telemetry_doc("cpe-0001", 250.5), qos=0)
        cpe.publish(shard_topic("cpe-0001", "telemetry"), telemetry_doc("cpe-0001", 99.0), qos=0)
        # Telemetry reaches the callback in batches (one frame for one or both messages).
        assert sub.wait_for(lambda _s: sum(map(len, frames)) == 4, 5)
        batch = joined(frames)
        assert list(batch.cpe) == ["cpe-0001"] * 4
        assert list(batch.wat) == ["nr", "wifi", "nr", "wifi"]
        assert batch.direction is not None and list(batch.direction) == ["ul"] * 4
        assert list(batch.column("delivered_mbps")[::2]) == [250.5, 99.0]
        assert batch.column("up")[1] == 0.0
        assert batch.row_time_s is not None and len(set(batch.row_time_s)) == 1
        # What the callback took is not kept for the drain as well.
        assert len(sub.drain_telemetry()) == 0
        assert sub.drops.total() == 0
    finally:
        cpe.close()
        sub.stop()


def test_invalid_payloads_are_dropped_and_counted(broker: MosquittoBroker,
                                                  settings: MqttSettings) -> None:
    states: list[CpeState] = []
    sub = ChannelSubscriber(settings, on_state=states.append).start()
    cpe = connect_client(broker, "cpe-0001")
    try:
        assert sub.wait_subscribed(10)
        st, tm = shard_topic("cpe-0001", "state"), shard_topic("cpe-0001", "telemetry")
        cpe.publish(st, b"not json")
        cpe.publish(st, state_doc("cpe-0001", 1, backend="ebpf"))
        cpe.publish(st, state_doc("cpe-0002", 1))  # speaks for another CPE
        cpe.publish(tm, telemetry_doc("cpe-0001", -5.0))
        cpe.publish(st, state_doc("cpe-0001", 3))  # the valid one, sent last
        assert sub.wait_for(lambda s: s.received == 5, 5)
        assert sub.drops.snapshot() == {
            "state/bad-json": 1, "state/schema": 1, "state/cpe-id-mismatch": 1,
            "telemetry/schema": 1,
        }
        assert [s.applied_version for s in states] == [3]
        assert sub.directory.state("cpe-0002") is None
        assert len(sub.drain_telemetry()) == 0
    finally:
        cpe.close()
        sub.stop()


AGENT = textwrap.dedent("""
    import json, ssl, sys
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
    port, ca, cert, key, cpe, topic = sys.argv[1:7]
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="agent-" + cpe,
                    protocol=MQTTProtocolVersion.MQTTv5)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    c.tls_set_context(ctx)
    c.will_set(topic, json.dumps({"schema": "mcw.state.v2", "cpe_id": cpe, "online": False}),
               qos=1, retain=True)
    c.connect("127.0.0.1", int(port), keepalive=30)
    c.loop_start()
    info = c.publish(topic, sys.stdin.readline().strip(), qos=1, retain=True)
    info.wait_for_publish(5)
    print("ready", flush=True)
    sys.stdin.read()  # connected until the test kills it (or its end closes the pipe)
""")


def test_last_will_marks_a_dropped_cpe_offline(broker: MosquittoBroker,
                                               settings: MqttSettings) -> None:
    sub = ChannelSubscriber(settings).start()
    cert, key = broker.pki.cert("cpe-0002")
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(broker.port), str(broker.pki.ca), str(cert), str(key),
         "cpe-0002", shard_topic("cpe-0002", "state")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert sub.wait_subscribed(10)
        assert agent.stdin is not None and agent.stdout is not None
        agent.stdin.write(state_doc("cpe-0002", 12).decode() + "\n")
        agent.stdin.flush()
        assert agent.stdout.readline().strip() == "ready"
        assert sub.wait_for(lambda s: (st := s.directory.state("cpe-0002")) is not None
                            and st.online, 5)
        agent.send_signal(signal.SIGKILL)  # no DISCONNECT: the broker must send the will
        agent.wait()
        assert sub.wait_for(lambda s: (st := s.directory.state("cpe-0002")) is not None
                            and not st.online, 10)
        st = sub.directory.state("cpe-0002")
        assert st is not None and st.applied_version == 12 and st.event is None
        assert sub.directory.online() == []
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        for pipe in (agent.stdin, agent.stdout):
            if pipe is not None:
                pipe.close()
        sub.stop()


def test_a_failing_callback_is_counted_and_does_not_stop_delivery(
        broker: MosquittoBroker, settings: MqttSettings) -> None:
    calls: list[int] = []

    def explode(state: CpeState) -> None:
        calls.append(state.applied_version)
        raise RuntimeError("boom")

    sub = ChannelSubscriber(settings, on_state=explode).start()
    cpe = connect_client(broker, "cpe-0003")
    try:
        assert sub.wait_subscribed(10)
        for v in (1, 2):
            cpe.publish(shard_topic("cpe-0003", "state"), state_doc("cpe-0003", v))
        assert sub.wait_for(lambda s: s.callback_errors == 2, 5)
        assert calls == [1, 2]
        assert threading.active_count() >= 1
    finally:
        cpe.close()
        sub.stop()


@pytest.mark.parametrize("group", [None, "mcw-xapp"])
def test_subscription_topics(settings: MqttSettings, group: str | None) -> None:
    share = f"$share/{group}/" if group else ""
    sub = ChannelSubscriber(settings, share_group=group)
    assert sub.topics == [
        "mcw/v1/proxy/#",
        "mcw/v1/s/+/cpe/+/state", f"{share}mcw/v1/s/+/cpe/+/telemetry",
        "mcw/v1/s/+/proxy/+/cpe/+/state", "mcw/v1/s/+/proxy/+/cpe/+/telemetry",
        # Deprecated: the agents of earlier releases.
        "mcw/v1/cpe/+/state", f"{share}mcw/v1/cpe/+/telemetry"]
    sub.set_shards(frozenset({7, 3}))
    assert sub.topics[:9] == [
        "mcw/v1/proxy/#",
        "mcw/v1/s/3/cpe/+/state", f"{share}mcw/v1/s/3/cpe/+/telemetry",
        "mcw/v1/s/3/proxy/+/cpe/+/state", "mcw/v1/s/3/proxy/+/cpe/+/telemetry",
        "mcw/v1/s/7/cpe/+/state", f"{share}mcw/v1/s/7/cpe/+/telemetry",
        "mcw/v1/s/7/proxy/+/cpe/+/state", "mcw/v1/s/7/proxy/+/cpe/+/telemetry"]
    assert sub.shards() == frozenset({3, 7})
    modern = ChannelSubscriber(settings, share_group=group, legacy_topics=False)
    assert modern.topics == [
        "mcw/v1/proxy/+/state",
        "mcw/v1/s/+/cpe/+/state", f"{share}mcw/v1/s/+/cpe/+/telemetry",
        "mcw/v1/s/+/proxy/+/cpe/+/state", "mcw/v1/s/+/proxy/+/cpe/+/telemetry"]


def test_saturation_and_delivery_rate_reach_the_kpi_frame(broker: MosquittoBroker,
                                                          settings: MqttSettings) -> None:
    """``saturated`` (0..1) and ``delivery_rate_mbps`` become KpiFrame columns; absent is NaN."""
    frames: list[KpiFrame] = []
    sub = ChannelSubscriber(settings, on_telemetry=frames.append).start()
    cpe = connect_client(broker, "cpe-0001")
    topic = shard_topic("cpe-0001", "telemetry")

    def doc(nr_extra: dict[str, Any]) -> bytes:
        d = json.loads(telemetry_doc("cpe-0001", 250.5))
        d["wats"]["nr"]["ul"].update(nr_extra)
        return json.dumps(d).encode()

    try:
        assert sub.wait_subscribed(10)
        cpe.publish(topic, doc({"saturated": 0.25, "delivery_rate_mbps": 912.125}), qos=1)
        cpe.publish(topic, doc({"saturated": 1.5}), qos=1)  # out of range: dropped
        cpe.publish(topic, doc({"saturated": 1}), qos=1)
        assert sub.wait_for(lambda s: s.received == 3 and sum(map(len, frames)) == 4, 5)
        assert sub.drops.snapshot() == {"telemetry/schema": 1}
        batch = joined(frames)
        assert list(batch.wat) == ["nr", "wifi", "nr", "wifi"]
        assert batch.column("saturated")[0] == 0.25
        assert batch.column("delivery_rate_mbps")[0] == 912.125
        # wifi reported neither: unknown, not 0 (0 would mean "censored" to the model).
        assert np.isnan(batch.column("saturated")[1])
        assert np.isnan(batch.column("delivery_rate_mbps")[1])
        assert batch.column("saturated")[2] == 1.0
        assert np.isnan(batch.column("delivery_rate_mbps")[2])
    finally:
        cpe.close()
        sub.stop()


#: The agent's telemetry JSON for one aggregated sample, pinned by the Go test
#: ``TestTelemetryGolden`` (kernel-agent/telemetry): both sides test the same bytes.
AGENT_TELEMETRY = (REPO / "kernel-agent" / "telemetry"
                   / "testdata" / "telemetry.golden.json")


def test_the_agents_telemetry_validates_and_maps(broker: MosquittoBroker,
                                                 settings: MqttSettings) -> None:
    frames: list[KpiFrame] = []
    sub = ChannelSubscriber(settings, on_telemetry=frames.append).start()
    cpe = connect_client(broker, "cpe-0001")
    try:
        assert sub.wait_subscribed(10)
        cpe.publish(shard_topic("cpe-0001", "telemetry"), AGENT_TELEMETRY.read_bytes(), qos=1)
        assert sub.wait_for(lambda s: s.received == 1 and len(frames) == 1, 5)
        assert sub.drops.total() == 0
        doc = json.loads(AGENT_TELEMETRY.read_bytes())
        frame = frames[0]
        assert frame.direction is not None
        assert len(frame) == 2 * len(doc["wats"])
        for i, (wat, direction) in enumerate(zip(frame.wat, frame.direction, strict=True)):
            for f in ("saturated", "delivery_rate_mbps", "delivered_mbps", "retrans_pct"):
                want = doc["wats"][str(wat)][str(direction)].get(f)
                got = frame.column(f)[i]
                assert (np.isnan(got) if want is None else got == want), (wat, f, got, want)
            assert frame.column("rtt_ms")[i] == doc["wats"][str(wat)]["rtt_ms"]
        # The fixture covers both sides of the censoring flag (the CPE sends ul).
        sat = {str(w): v for w, d, v in zip(frame.wat, frame.direction,
                                            frame.column("saturated"), strict=True)
               if d == "ul"}
        assert sat["nr"] == 1.0 and 0.0 < sat["wifi"] < 0.5
        # ... and a WAT that retransmitted beside one that did not (0, not unknown).
        retrans = {str(w): v for w, d, v in zip(frame.wat, frame.direction,
                                                frame.column("retrans_pct"), strict=True)
                   if d == "ul"}
        assert retrans["nr"] > 0.0 and retrans["wifi"] == 0.0 and np.isnan(retrans["lifi"])
    finally:
        cpe.close()
        sub.stop()
