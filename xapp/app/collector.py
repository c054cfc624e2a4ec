"""Prometheus collector over the counters other components keep themselves.

The MQTT publisher (``stats``, ``drops``), the channel subscriber (``drops``, agent states),
the model estimator (``counters``, and the lower bound's calibration per family) and the
InfluxDB store (``counters``, ``buffered``) count in plain attributes and know nothing of
Prometheus.  :class:`ComponentCollector` reads them at scrape time, so their modules stay free
of metrics code and nothing is double counted.  Every source is optional: lab mode has no MQTT
or InfluxDB, the EWMA estimator has no counters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from xapp.core.workers import WorkerStatus

if TYPE_CHECKING:
    from xapp.adapters.influx.store import InfluxStore
    from xapp.adapters.mqtt import ChannelSubscriber, DropCounter, MqttWeightPublisher
    from xapp.model.adaptive import FamilyCalibration

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class E2Counters:
    """What the E2 path counts (xapp.adapters.e2): read at scrape time."""

    #: E2 nodes per subscription state (active, pending, failed, ...).
    states: Callable[[], Mapping[str, int]]
    #: The subscriber's events (requests, callbacks, deletes, errors...).
    subscriber: Callable[[], Mapping[str, int]]
    #: The KPM ingest's outcomes per indication and mapping counts.
    indications: Callable[[], Mapping[str, int]]
    #: Indications that matched no confirmed subscription (the book's misses).
    unmatched: Callable[[], int]
    #: Indications dropped before decoding, by reason (``xapp.adapters.e2.decoder_process``).
    dropped: Callable[[], Mapping[str, int]] = dict


def _drops(counter: DropCounter) -> dict[tuple[str, str], int]:
    """``DropCounter.snapshot()`` (``{"kind/reason": n}``) as ``{(kind, reason): n}``."""
    out: dict[tuple[str, str], int] = {}
    for key, n in counter.snapshot().items():
        kind, _, reason = key.partition("/")
        out[(kind, reason)] = n
    return out


class ComponentCollector(Collector):
    """Exports the components' own counters; register it once on the process's registry.

    Parameters
    ----------
    publisher, subscriber, influx : the running adapters, or None where they do not run
    estimator_counters : callable or None
        The capacity model's input-check counters (None for the EWMA, which keeps none).
    estimator_calibration : callable or None
        The capacity model's lower-bound calibration per family
        (:meth:`xapp.model.online.ModelEstimator.calibration`; None for the EWMA).
    published_version : callable or None
        ``cpe_id -> version`` the xApp last published, to count agents that lag behind.
    workers : callable or None
        The supervisor's check (restarts dead workers, returns every worker's status).
    degraded : callable or None
        Each degradable component -> whether it is degraded
        (:meth:`xapp.core.workers.Supervisor.degradable`).
    """

    def __init__(self, *, publisher: MqttWeightPublisher | None = None,
                 subscriber: ChannelSubscriber | None = None,
                 estimator_counters: Callable[[], Mapping[str, int]] | None = None,
                 estimator_calibration: Callable[[], Mapping[str, FamilyCalibration]] | None
                 = None,
                 influx: InfluxStore | None = None,
                 published_version: Callable[[str], int] | None = None,
                 workers: Callable[[], list[WorkerStatus]] | None = None,
                 e2: E2Counters | None = None,
                 degraded: Callable[[], Mapping[str, bool]] | None = None) -> None:
        self.degraded = degraded
        self.publisher = publisher
        self.e2 = e2
        self.workers = workers
        self.subscriber = subscriber
        self.estimator_counters = estimator_counters
        self.estimator_calibration = estimator_calibration
        self.influx = influx
        self.published_version = published_version

    def describe(self) -> Iterable[Metric]:
        # Collected lazily at scrape time; describing nothing keeps registration cheap.
        return []

    def collect(self) -> Iterable[Metric]:
        try:
            yield from self._publisher()
            yield from self._subscriber()
            yield from self._estimator()
            yield from self._calibration()
            yield from self._influx()
            yield from self._workers()
            yield from self._e2()
        except Exception:  # a scrape must never fail because one component misbehaves
            log.exception("collecting component metrics failed")

    def _workers(self) -> Iterable[Metric]:
        if self.workers is None:
            return
        up = GaugeMetricFamily("mcw_worker_up", "1 while the worker (thread) is running and not "
                               "stuck; 0 when dead or stuck.", labels=["worker", "state"])
        restarts = CounterMetricFamily("mcw_worker_restarts", "Times the supervisor restarted "
                                       "a dead worker.", labels=["worker"])
        failures = CounterMetricFamily("mcw_worker_step_failures", "Steps of the worker that "
                                       "raised (logged; the worker carried on).",
                                       labels=["worker"])
        queued = GaugeMetricFamily("mcw_worker_queue_depth", "Items waiting in front of a "
                                   "queue worker (A1 requests, RIC indications).",
                                   labels=["worker"])
        dropped = CounterMetricFamily("mcw_worker_queue_dropped", "Items a queue worker's full "
                                      "queue refused (dropped, never handled).",
                                      labels=["worker"])
        for st in self.workers():
            up.add_metric([st.name, st.state.value], 1 if st.healthy else 0)
            restarts.add_metric([st.name], st.restarts)
            failures.add_metric([st.name], st.failures)
            queued.add_metric([st.name], st.queued)
            dropped.add_metric([st.name], st.dropped)
        yield from (up, restarts, failures, queued, dropped)
        if self.degraded is not None:
            degraded = GaugeMetricFamily(
                "mcw_component_degraded", "1 while the supervisor has given up restarting a "
                "worker of the component (its restart budget is spent; the rest of the xApp "
                "goes on), else 0.", labels=["component"])
            for component, down in self.degraded().items():
                degraded.add_metric([component], 1 if down else 0)
            yield degraded

    def _e2(self) -> Iterable[Metric]:
        e2 = self.e2
        if e2 is None:
            return
        nodes = GaugeMetricFamily("mcw_e2_nodes", "E2 nodes by the state of their KPM "
                                  "subscription (active, partial, pending, failed, unusable, "
                                  "disconnected, new).", labels=["state"])
        for state, n in sorted(e2.states().items()):
            nodes.add_metric([state], n)
        yield nodes
        yield _events("mcw_e2_subscription_events",
                      "E2 subscriber counters: requests to the Subscription Manager and their "
                      "errors, callbacks (refused, unknown), instances active or failed, "
                      "deletes (stale ones at start), response timeouts, SDL errors.",
                      e2.subscriber())
        yield _events("mcw_e2_indication_events",
                      "RIC indications by outcome of decoding and mapping "
                      "(xapp.adapters.e2.ingest).", e2.indications())
        yield CounterMetricFamily("mcw_e2_indications_unmatched",
                                  "RIC indications that matched no confirmed subscription.",
                                  value=e2.unmatched())
        dropped = CounterMetricFamily("mcw_e2_indications_dropped",
                                      "RIC indications dropped before decoding: the decoder "
                                      "process's queue full, no decoder process running, or "
                                      "sent to one that died.", labels=["reason"])
        for reason, n in e2.dropped().items():
            dropped.add_metric([reason], n)
        yield dropped

    def _publisher(self) -> Iterable[Metric]:
        pub = self.publisher
        if pub is None:
            return
        yield _events("mcw_mqtt_publisher_events",
                      "MQTT weight publisher counters (requested, sent, acked, rejected, "
                      "coalesced, invalid, connects, disconnects).", asdict(pub.stats))
        yield GaugeMetricFamily("mcw_mqtt_publisher_pending",
                                "Weight messages queued or in flight.", value=pub.pending())
        yield from self._drop_family("mcw_mqtt_publisher_dropped_payloads",
                                     "Weights the publisher refused to send, by reason.",
                                     pub.drops)

    def _subscriber(self) -> Iterable[Metric]:
        sub = self.subscriber
        if sub is None:
            return
        yield from self._drop_family("mcw_mqtt_subscriber_dropped_payloads",
                                     "Agent state/telemetry messages dropped, by kind and reason.",
                                     sub.drops)
        yield CounterMetricFamily("mcw_mqtt_subscriber_received",
                                  "Agent messages received (valid or not).", value=sub.received)
        yield CounterMetricFamily("mcw_mqtt_subscriber_callback_errors",
                                  "Agent messages whose handling raised.",
                                  value=sub.callback_errors)
        yield CounterMetricFamily("mcw_mqtt_legacy_messages",
                                  "Agent messages on the deprecated unsharded topics (agents of "
                                  "earlier releases); zero for good: the fleet has moved.",
                                  value=sub.legacy_received)
        held = sub.shards()
        yield GaugeMetricFamily("mcw_mqtt_subscriber_shards",
                                "Shards whose agent topics this replica subscribes to.",
                                value=sub.shard_count if held is None else len(held))
        known = sub.directory.states()
        online = [s for s in known.values() if s.online]
        yield GaugeMetricFamily("mcw_agents_known", "CPE agents that reported a state.",
                                value=len(known))
        yield GaugeMetricFamily("mcw_agents_online", "CPE agents whose last state is online.",
                                value=len(online))
        if self.published_version is not None:
            lagging = sum(1 for s in online
                          if s.applied_version < self.published_version(s.cpe_id))
            yield GaugeMetricFamily("mcw_agents_lagging",
                                    "Online agents whose applied version is older than the "
                                    "last published one.", value=lagging)
        yield GaugeMetricFamily("mcw_agents_with_error",
                                "Online agents reporting a last_error.",
                                value=sum(1 for s in online if s.last_error))
        proxies = sub.directory.proxies()
        yield GaugeMetricFamily("mcw_proxies_known", "Proxy agents that reported a state.",
                                value=len(proxies))
        yield GaugeMetricFamily("mcw_proxies_online", "Proxy agents whose last state is online.",
                                value=sum(1 for p in proxies.values() if p.online))
        yield GaugeMetricFamily("mcw_cpes_downlink_applied",
                                "CPEs whose downlink an online proxy reports applying.",
                                value=len(sub.directory.downlinks()))

    def _estimator(self) -> Iterable[Metric]:
        if self.estimator_counters is None:
            return
        yield _events("mcw_estimator_events",
                      "Capacity model counters: frames and rows seen, values skipped "
                      "(non_finite, out_of_range), rows without KPIs, unknown WATs, missing "
                      "models, prediction errors.", self.estimator_counters())

    def _calibration(self) -> Iterable[Metric]:
        if self.estimator_calibration is None:
            return
        coverage = GaugeMetricFamily(
            "mcw_model_lower_coverage", "Fraction of control periods whose capacity was at or "
            "above the capacity the weights were planned with, among those where it is known "
            "(saturated, or delivered at or above it), exponentially weighted "
            "(xapp.model.adaptive).", labels=["family"])
        target = GaugeMetricFamily(
            "mcw_model_lower_coverage_target", "The coverage aimed at over the same periods: "
            "1 - the planning level, weighted alike (with the level chosen by cost it moves "
            "with the WATs' shares, xapp.core.planning).", labels=["family"])
        multiplier = GaugeMetricFamily(
            "mcw_model_lower_multiplier", "Mean adaptive factor on the model's calibrated "
            "margins over the family's (CPE, WAT) keys in the last tick (1: the model's own "
            "calibration).", labels=["family"])
        for fam, cal in sorted(self.estimator_calibration().items()):
            coverage.add_metric([fam], cal.coverage)
            target.add_metric([fam], cal.target)
            multiplier.add_metric([fam], cal.multiplier)
        yield from (coverage, target, multiplier)

    def _influx(self) -> Iterable[Metric]:
        store = self.influx
        if store is None:
            return
        yield _events("mcw_influx_events",
                      "InfluxDB store counters (xapp.adapters.influx.store.InfluxCounters: "
                      "points written, transient failures retried, points dropped on overflow, "
                      "refused before sending, rejected by InfluxDB per reason).",
                      store.counters.as_dict())
        yield GaugeMetricFamily("mcw_influx_buffered_points",
                                "Points waiting to be written to InfluxDB.", value=store.buffered)

    @staticmethod
    def _drop_family(name: str, doc: str, counter: DropCounter) -> Iterable[Metric]:
        fam = CounterMetricFamily(name, doc, labels=["kind", "reason"])
        for (kind, reason), n in _drops(counter).items():
            fam.add_metric([kind, reason], n)
        yield fam


def _events(name: str, help_text: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    """One counter family with an ``event`` label per entry of ``counts``."""
    fam = CounterMetricFamily(name, help_text, labels=["event"])
    for event, n in counts.items():
        fam.add_metric([event], n)
    return fam


class ShardCollector(Collector):
    """Which shards this replica holds, and what fencing refused (several replicas).

    ``held`` gives the shards whose lease is locally valid now; ``stats`` the lease worker's
    counters (None when sharding is off: every shard is held, nothing is leased)."""

    def __init__(self, replica_id: str, shards: int, held: Callable[[], frozenset[int]],
                 fenced: Callable[[], int],
                 stats: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.replica_id = replica_id
        self.shards = shards
        self.held = held
        self.fenced = fenced
        self.stats = stats

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        try:
            labels = ["replica"]
            held = GaugeMetricFamily("mcw_shards_held", "Shards this replica holds with a "
                                     "locally valid lease (all of them when sharding is off).",
                                     labels=labels)
            held.add_metric([self.replica_id], len(self.held()))
            total = GaugeMetricFamily("mcw_shards", "Shards of the fleet.", labels=labels)
            total.add_metric([self.replica_id], self.shards)
            fenced = CounterMetricFamily("mcw_fenced", "Weights messages not sent because "
                                         "this replica did not hold the CPE's shard with a "
                                         "valid lease at the publisher.", labels=labels)
            fenced.add_metric([self.replica_id], self.fenced())
            yield from (held, total, fenced)
            if self.stats is not None:
                s = self.stats()
                for name, what in (("acquisitions", "Shard leases acquired."),
                                   ("losses", "Shard leases found expired or taken over at "
                                              "renewal.")):
                    c = CounterMetricFamily(f"mcw_shard_{name}", what, labels=labels)
                    c.add_metric([self.replica_id], s.get(name, 0))
                    yield c
                live = GaugeMetricFamily("mcw_live_replicas", "Replicas in the membership at "
                                         "the last lease round.", labels=labels)
                live.add_metric([self.replica_id], s.get("live", 0))
                yield live
        except Exception:
            log.exception("collecting shard metrics failed")
