"""Broker connection settings and the paho-mqtt client both channel ends are built from."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion


@dataclass(frozen=True)
class MqttSettings:
    """Where the broker is and how the xApp proves who it is (mutual TLS, MQTT 5).

    Parameters
    ----------
    host, port : str, int
        The broker's TLS listener (8883 in ``broker/mosquitto.conf``); the broker's certificate
        is verified against ``host`` (a DNS name or IP in its subjectAltName).
    ca_file : str
        CA bundle that signed the broker's certificate.
    cert_file, key_file : str
        The xApp's client certificate (CN ``mcw-xapp``) and key; the broker's ACL keys on the CN.
    client_id : str, default="mcw-xapp"
        Base client id; the publisher and subscriber append ``-pub`` / ``-sub``. Give every
        replica its own (e.g. the pod name), or the broker disconnects the older one.
    keepalive_s : int, default=30
    reconnect_min_s, reconnect_max_s : float, default=0.5, 30.0
        Exponential reconnect backoff bounds (paho doubles the delay per failed attempt and
        resets it after a successful CONNACK).
    """

    host: str
    ca_file: str
    cert_file: str
    key_file: str
    port: int = 8883
    client_id: str = "mcw-xapp"
    keepalive_s: int = 30
    reconnect_min_s: float = 0.5
    reconnect_max_s: float = 30.0

    def tls_context(self) -> ssl.SSLContext:
        """A client TLS context: verify the broker, present our certificate, TLS >= 1.2."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


def new_client(settings: MqttSettings, suffix: str) -> mqtt.Client:
    """A configured but unconnected paho MQTT 5 client with TLS and backoff set."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"{settings.client_id}-{suffix}",
                         protocol=MQTTProtocolVersion.MQTTv5)
    client.tls_set_context(settings.tls_context())
    # paho accepts floats here although its annotation says int.
    client.reconnect_delay_set(settings.reconnect_min_s, settings.reconnect_max_s)  # type: ignore[arg-type]
    return client
