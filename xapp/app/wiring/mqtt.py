"""MQTT for ``mcw run``: the weights publisher and the channel subscriber (agent and proxy
states, agent telemetry), and the log of the agents' states."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from xapp.adapters.mqtt import (
    ChannelSubscriber,
    CpeState,
    MqttSettings,
    MqttWeightPublisher,
    ProxyState,
)
from xapp.app.config import Controls
from xapp.app.wiring.telemetry import AgentTelemetry
from xapp.core.intake import LatestKpis
from xapp.core.issue_clock import IssueClock
from xapp.core.ownership import ShardFence
from xapp.core.ports import TelemetrySink, VersionStore
from xapp.core.workers import Worker

log = logging.getLogger(__name__)


def build_mqtt(controls: Controls, versions: VersionStore, intake: LatestKpis,
               sink: TelemetrySink | None, checks: dict[str, Callable[[], bool]],
               stoppers: list[Callable[[], object]], workers: list[Worker],
               fence: ShardFence | None = None, replica_id: str = "",
               issue_clock: IssueClock | None = None
               ) -> tuple[MqttWeightPublisher, ChannelSubscriber]:
    """The publisher and the subscriber, started; their readiness check, stops and workers go
    into ``checks``, ``stoppers`` and ``workers``."""
    m = controls.mqtt
    client_id = m.client_id
    if controls.sharding.enabled:
        # A broker drops the older of two sessions with one client id: each replica its own.
        client_id = f"{m.client_id}-{replica_id}"
    settings = MqttSettings(host=m.host, port=m.port, client_id=client_id, ca_file=m.ca_file,
                            cert_file=m.cert_file, key_file=m.key_file)
    try:
        publisher = MqttWeightPublisher(
            settings, versions, fence=fence,
            issue_ms=None if issue_clock is None else issue_clock.now_ms).start()
    except OSError as exc:  # the TLS files come from a Secret; say which one is missing
        raise RuntimeError(f"MQTT TLS material not usable: {exc.strerror or exc} "
                           f"({exc.filename or m.ca_file}); see controls.mqtt.*_file") from exc
    # Connected is not enough: a stopped broker keeps the connection open (issue 22).
    checks["broker"] = publisher.answering
    stoppers.append(publisher.stop)
    # Agent telemetry (subflow throughput, RTT, cwnd) goes into InfluxDB with the radio KPIs,
    # one point per message and WAT so each keeps its own time; agent states are logged when they
    # change and served on /ric/v1/cpes.
    states = AgentStateLog()
    subscriber = ChannelSubscriber(
        settings, on_telemetry=AgentTelemetry(intake, sink), on_state=states,
        on_proxy_state=states.proxy, shard_count=controls.sharding.shards)
    if controls.sharding.enabled:
        # Nothing until the first lease round says which shards are this replica's: each
        # replica receives its own shards' telemetry and states only.
        subscriber.set_shards(frozenset())
    subscriber.start()
    stoppers.append(subscriber.stop)
    # Telemetry reaches the callback in batches, on the subscriber's own worker: supervised
    # with the others (a dead or stuck batcher fails /ric/v1/health/alive).
    workers.append(subscriber.telemetry_worker)
    return publisher, subscriber


class AgentStateLog:
    """Logs agent states as they change: online/offline transitions at INFO, errors at
    WARNING, every applied version at DEBUG (a fleet applies thousands per second)."""

    def __init__(self) -> None:
        self._online: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()

    def __call__(self, state: CpeState) -> None:
        key = (state.proxy_id or "", state.cpe_id)
        with self._lock:
            was = self._online.get(key)
            self._online[key] = bool(state.online)
        who = (f"agent of CPE {state.cpe_id}" if state.proxy_id is None
               else f"proxy {state.proxy_id} for CPE {state.cpe_id} (downlink)")
        if not state.online:
            if was is not False:
                log.warning("%s is offline", who)
        elif state.last_error:
            log.warning("%s applied version %d with error: %s", who, state.applied_version,
                        state.last_error)
        elif was is not True:
            log.info("%s is online (%s backend, applied version %d)", who,
                     state.backend or "unknown", state.applied_version)
        else:
            log.debug("%s applied version %d", who, state.applied_version)

    def proxy(self, state: ProxyState) -> None:
        """A proxy's own state: online/offline transitions and errors."""
        key = (state.proxy_id, "")
        with self._lock:
            was = self._online.get(key)
            self._online[key] = bool(state.online)
        if not state.online:
            if was is not False:
                log.warning("proxy %s is offline", state.proxy_id)
        elif state.last_error:
            log.warning("proxy %s reports an error: %s", state.proxy_id, state.last_error)
        elif was is not True:
            log.info("proxy %s is online (%s backend, %d CPEs, %d applied)", state.proxy_id,
                     state.backend or "unknown", state.cpes, state.cpes_applied)
