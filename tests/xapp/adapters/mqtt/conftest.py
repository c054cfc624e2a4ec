"""The MQTT adapter's settings for the real broker (tests/support/servers.py) and a decision
to publish."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.mosquitto import (
    MosquittoBroker,
    Pki,
    make_acl,
    make_pki,
    mosquitto_binary,
    pki_cpes,
)
from xapp.adapters.mqtt import MqttSettings
from xapp.core.weights import WeightDecision


def xapp_settings_for(broker: MosquittoBroker, pki: Pki) -> MqttSettings:
    """The xApp's settings for ``broker``: its certificate, quick reconnects."""
    cert, key = pki.cert("mcw-xapp")
    return MqttSettings(host="127.0.0.1", port=broker.port, ca_file=str(pki.ca),
                        cert_file=str(cert), key_file=str(key), client_id="test-xapp",
                        reconnect_min_s=0.1, reconnect_max_s=1.0)


@pytest.fixture
def settings(broker: MosquittoBroker, pki: Pki) -> MqttSettings:
    return xapp_settings_for(broker, pki)


def decision(weights: dict[str, int], reason: str = "test") -> WeightDecision:
    total = sum(weights.values()) or 1
    return WeightDecision(weights=dict(weights),
                          shares={w: v / total for w, v in weights.items()},
                          aggregate_mbps=100.0,
                          usable=frozenset(w for w, v in weights.items() if v > 0),
                          changed=True, reason=reason)


# --- a broker with the proxies' grants ----------------------------------------------------------
SERVED = {"proxy-0001": ("cpe-0001", "cpe-0002"), "proxy-0002": ("cpe-0003",)}


@pytest.fixture
def proxy_broker(pki: Pki, tmp_path: Path) -> Iterator[MosquittoBroker]:
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    make_pki(pki.root, n_cpes=4, n_proxies=len(SERVED))
    acl = tmp_path / "acl"
    acl.write_text(make_acl(*(f"{proxy}:{','.join(cpes)}" for proxy, cpes in SERVED.items()),
                            cpes=pki_cpes(pki)))
    b = MosquittoBroker(pki, tmp_path / "broker", acl=acl).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def xapp_settings(proxy_broker: MosquittoBroker, pki: Pki) -> MqttSettings:
    return xapp_settings_for(proxy_broker, pki)
