"""The E2 path for ``mcw run`` when ``controls.e2`` is active: where the E2 nodes come from,
who subscribes them at the Subscription Manager, who matches and maps the KPM indications
into the loop's intake, and who decodes them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from xapp.adapters.dbaas import redis_from_env
from xapp.adapters.e2 import kpm_decode
from xapp.adapters.e2.decoder_process import DecoderProcess
from xapp.adapters.e2.ingest import KpmIngest
from xapp.adapters.e2.nodes import (
    CombinedNodes,
    NodeSource,
    OwnedNodes,
    RnibNodes,
    StaticNode,
    StaticNodes,
    ricsdl_rnib_backend,
)
from xapp.adapters.e2.registry import CpeRegistry
from xapp.adapters.e2.subscriber import E2Subscriber
from xapp.adapters.e2.subscription_book import SubscriptionBook
from xapp.adapters.e2.subscription_request import E2SubscribeSettings
from xapp.adapters.e2.subscription_store import (
    IdStore,
    MemoryIdStore,
    NodeRecords,
    SdlIdStore,
    SdlNodeRecords,
)
from xapp.adapters.sdl import ricsdl_backend
from xapp.app.config import POD_IP_ENV, Controls, E2Settings
from xapp.app.run_options import RunOptions
from xapp.app.wiring.telemetry import AgentTelemetry
from xapp.core.intake import LatestKpis
from xapp.core.ownership import ShardFence
from xapp.core.ports import TelemetrySink
from xapp.core.workers import Worker

log = logging.getLogger(__name__)


@dataclass
class E2Parts:
    """The E2 path when ``controls.e2`` is active: who subscribes, who matches, who decodes."""

    book: SubscriptionBook
    subscriber: E2Subscriber
    worker: Worker
    registry: CpeRegistry
    ingest: KpmIngest
    #: Decodes the indications RMR brings, in a process of its own, for ``ingest``.
    decoder: DecoderProcess
    stoppers: list[Callable[[], object]] = field(default_factory=list)


def build_e2(opts: RunOptions, controls: Controls, intake: LatestKpis,
             sink: TelemetrySink | None, fence: ShardFence | None = None,
             replica_id: str = "") -> E2Parts:
    """The E2 path (not started): nodes from the R-NIB and/or ``controls.e2.nodes``, the
    subscriber, the book, the CPE registry and the KPM ingest writing into ``intake`` and
    ``sink`` (InfluxDB) like agent telemetry
    (:class:`~xapp.app.wiring.telemetry.AgentTelemetry`)."""
    e = controls.e2
    redis = opts.sdl == "redis"
    stoppers: list[Callable[[], object]] = []
    nodes = node_source(e, redis, fence, stoppers)
    sharded = fence is not None and not fence.everything
    settings = subscribe_settings(e, sharded)
    book = SubscriptionBook(e.requestor_id, match_requestor=e.match_requestor)
    ids: IdStore = (SdlIdStore(controls.sdl_namespace, ricsdl_backend,
                               key=f"e2/subscriptions/{replica_id}" if sharded
                               else "e2/subscriptions") if redis
                    else MemoryIdStore())
    # Per node, shared: the node's next owner deletes what a dead replica left at submgr.
    records: NodeRecords | None = None
    if redis:
        records = SdlNodeRecords(controls.sdl_namespace,
                                 lambda: redis_from_env(controls.sdl_namespace,
                                                        timeout_s=settings.http_timeout_s))
    subscriber = E2Subscriber(settings, nodes, book, ids=ids, records=records,
                              owner=replica_id)
    # A step reads the nodes and makes a few HTTP calls of at most http_timeout_s each.
    worker = Worker("mcw-e2-subscriptions", subscriber.step, e.poll_period_s,
                    deadline_s=max(60.0, 3 * e.poll_period_s))
    # The registry's own namespace (xapp.adapters.e2.registry), where its CLI provisions CPEs.
    registry = CpeRegistry(backend_factory=ricsdl_backend if redis else None)
    stoppers.append(registry.stop)
    ingest = KpmIngest(book, registry, AgentTelemetry(intake, sink),
                       names=e.measurement_map())
    return E2Parts(book, subscriber, worker, registry, ingest, DecoderProcess(ingest), stoppers)


def node_source(e: E2Settings, redis: bool, fence: ShardFence | None,
                stoppers: list[Callable[[], object]]) -> NodeSource:
    """The E2 nodes to subscribe: ``controls.e2.nodes`` and, on SDL, the R-NIB's; with several
    replicas only those of the shards this one holds."""
    sources: list[NodeSource] = []
    if e.nodes:
        sources.append(StaticNodes([StaticNode(n.inventory_name, n.ran_function_id,
                                               n.kpm_version, n.report_styles,
                                               cell=n.cell or None,
                                               prb_total=n.prb_total or None)
                                    for n in e.nodes]))
    if e.rnib and redis:
        rnib = RnibNodes(ricsdl_rnib_backend, kpm_decode.decode_ran_function_description)
        sources.append(rnib)
        stoppers.append(rnib.close)
    elif e.rnib:
        log.warning("controls.e2.rnib needs SDL (--sdl redis); only controls.e2.nodes are used")
    if not sources:
        log.warning("E2 is on but no node source is configured; nothing will be subscribed")
    nodes: NodeSource = CombinedNodes(sources)
    if fence is not None and not fence.everything:
        # Several replicas: each subscribes the nodes of the shards it holds (OwnedNodes).
        nodes = OwnedNodes(nodes, fence.allows)
    return nodes


def subscribe_settings(e: E2Settings, sharded: bool) -> E2SubscribeSettings:
    """What the subscriber asks submgr for, and where submgr answers (this pod's address with
    several replicas)."""
    client_host = e.effective_client_host(sharded)
    if sharded and client_host == e.client_host:
        log.warning("several replicas but %s is not set: submgr answers %s, which may reach "
                    "another pod (the chart sets it from the pod IP)", POD_IP_ENV, client_host)
    return E2SubscribeSettings(
        submgr_url=e.submgr_url, client_host=client_host, http_port=e.http_port,
        rmr_port=e.rmr_port, requestor_id=e.requestor_id, match_requestor=e.match_requestor,
        measurements=e.measurements, report_styles=e.report_styles,
        report_period_ms=e.report_period_ms, granularity_ms=e.granularity_ms)
