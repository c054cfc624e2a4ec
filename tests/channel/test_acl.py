"""The shipped ACL and mTLS settings, enforced by a real Mosquitto."""

from __future__ import annotations

import ssl
import time

import pytest

from tests.support.mosquitto import MosquittoBroker, connect_client

NOT_AUTHORISED = 0x87
QUIET_S = 0.5  # how long "nothing arrives" is watched, after a positive control arrived


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
        assert spy.wait_for(lambda: bool(spy.on("mcw/v1/cpe/cpe-0002/weights")))
        time.sleep(QUIET_S)
        assert {m.topic for m in spy.messages} == {"mcw/v1/cpe/cpe-0002/weights"}
        # Retained weights of another CPE are refused to a late subscriber too.
        late = connect_client(broker, "cpe-0003")
        try:
            late.subscribe("mcw/v1/cpe/cpe-0001/weights")
            late.subscribe("mcw/v1/cpe/cpe-0003/weights")
            assert xapp.publish("mcw/v1/cpe/cpe-0003/weights", b"for-0003") < 0x80
            assert late.wait_for(lambda: bool(late.on("mcw/v1/cpe/cpe-0003/weights")))
            time.sleep(QUIET_S)
            assert [m.topic for m in late.messages] == ["mcw/v1/cpe/cpe-0003/weights"]
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
        assert xapp.wait_for(lambda: bool(xapp.on("mcw/v1/cpe/cpe-0002/state")))
        assert victim.wait_for(lambda: bool(victim.messages))
        time.sleep(QUIET_S)
        everything = victim.messages + xapp.messages
        assert all(m.payload != b"forged" for m in everything)
        # And nothing forged was retained for a later reader either.
        reader = connect_client(broker, "mcw-xapp", client_id="late-reader")
        try:
            reader.subscribe("mcw/v1/cpe/+/state")
            time.sleep(QUIET_S)
            assert all(m.payload != b"forged" for m in reader.messages)
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
