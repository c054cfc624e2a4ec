"""The MQTT adapter's settings for the real broker (tests/support/servers.py) and a decision
to publish."""

from __future__ import annotations

import pytest

from tests.support.mosquitto import MosquittoBroker, Pki
from xapp.adapters.mqtt import MqttSettings
from xapp.core.weights import WeightDecision


@pytest.fixture
def settings(broker: MosquittoBroker, pki: Pki) -> MqttSettings:
    cert, key = pki.cert("mcw-xapp")
    return MqttSettings(host="127.0.0.1", port=broker.port, ca_file=str(pki.ca),
                        cert_file=str(cert), key_file=str(key), client_id="test-xapp",
                        reconnect_min_s=0.1, reconnect_max_s=1.0)


def decision(weights: dict[str, int], reason: str = "test") -> WeightDecision:
    total = sum(weights.values()) or 1
    return WeightDecision(weights=dict(weights),
                          shares={w: v / total for w, v in weights.items()},
                          aggregate_mbps=100.0,
                          usable=frozenset(w for w, v in weights.items() if v > 0),
                          changed=True, reason=reason)
