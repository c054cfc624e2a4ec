"""The MQTT 5 / mutual-TLS channel between the xApp and the agents (CPE and proxy roles).

``mcw/v1/cpe/{cpe_id}/weights`` (xApp to agents, retained, QoS 1: the CPE agent applies ``ul``,
the proxy serving the CPE ``dl``); ``mcw/v1/s/{shard}/cpe/{cpe_id}/state`` (CPE agent to xApp,
retained, last will) and ``.../telemetry``; ``mcw/v1/proxy/{proxy_id}/state`` and
``mcw/v1/s/{shard}/proxy/{proxy_id}/cpe/{cpe_id}/state|telemetry`` (proxy agent to xApp), the
shard being :func:`xapp.core.shards.shard_of` of the CPE.  The unsharded state and telemetry
topics of earlier agents are still read (deprecated).  Contracts in ``schemas/mqtt-*.json``,
broker configuration and ACL in ``broker/``.
"""

from xapp.adapters.mqtt.agent_directory import AgentDirectory, CpeState, Downlink, ProxyState
from xapp.adapters.mqtt.connection import MqttSettings
from xapp.adapters.mqtt.decoder import decode
from xapp.adapters.mqtt.drops import DropCounter
from xapp.adapters.mqtt.payloads import PayloadError
from xapp.adapters.mqtt.publisher import MqttWeightPublisher, PublisherStats
from xapp.adapters.mqtt.subscriber import ChannelSubscriber
from xapp.adapters.mqtt.telemetry import telemetry_frame
from xapp.adapters.mqtt.topics import (
    parse_channel_topic,
    parse_topic,
    proxy_topic,
    shard_filter,
    shard_topic,
    topic,
)
from xapp.adapters.mqtt.versions import (
    FileVersionStore,
    MemoryVersionStore,
    VersionAllocator,
)
from xapp.adapters.mqtt.weights_encoder import build_weights
from xapp.core.ports import PublishResult

__all__ = [
    "AgentDirectory",
    "ChannelSubscriber",
    "CpeState",
    "Downlink",
    "DropCounter",
    "FileVersionStore",
    "MemoryVersionStore",
    "MqttSettings",
    "MqttWeightPublisher",
    "PayloadError",
    "ProxyState",
    "PublishResult",
    "PublisherStats",
    "VersionAllocator",
    "build_weights",
    "decode",
    "parse_channel_topic",
    "parse_topic",
    "proxy_topic",
    "shard_filter",
    "shard_topic",
    "telemetry_frame",
    "topic",
]
