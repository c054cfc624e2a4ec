"""The MQTT 5 / mutual-TLS channel between the xApp and the CPE agents.

``mcw/v1/cpe/{cpe_id}/weights`` (xApp to agent, retained, QoS 1), ``.../state`` (agent to xApp,
retained, last will) and ``.../telemetry`` (agent to xApp). Contracts in ``schemas/mqtt-*.json``,
broker configuration and ACL in ``broker/``.
"""

from xapp.adapters.mqtt.connection import MqttSettings
from xapp.adapters.mqtt.payloads import (
    DropCounter,
    PayloadError,
    build_weights,
    decode,
    parse_topic,
    topic,
)
from xapp.adapters.mqtt.publisher import MqttWeightPublisher, PublisherStats
from xapp.adapters.mqtt.subscriber import ChannelSubscriber, CpeState, telemetry_frame
from xapp.adapters.mqtt.versions import (
    FileVersionStore,
    MemoryVersionStore,
    VersionAllocator,
    VersionStore,
)
from xapp.core.ports import PublishResult

__all__ = [
    "ChannelSubscriber",
    "CpeState",
    "DropCounter",
    "FileVersionStore",
    "MemoryVersionStore",
    "MqttSettings",
    "MqttWeightPublisher",
    "PayloadError",
    "PublishResult",
    "PublisherStats",
    "VersionAllocator",
    "VersionStore",
    "build_weights",
    "decode",
    "parse_topic",
    "telemetry_frame",
    "topic",
]
