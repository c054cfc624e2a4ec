"""Prometheus collector over the counters other components keep themselves.

The MQTT publisher (``stats``, ``drops``), the channel subscriber (``drops``, agent states),
the model estimator (``counters``) and the InfluxDB store (``counters``, ``buffered``) count in
plain attributes and know nothing of Prometheus.  :class:`ComponentCollector` reads them at
scrape time, so their modules stay free of metrics code and nothing is double counted.
Every source is optional (lab mode has no MQTT, the EWMA estimator has no counters) and read
with ``getattr``: a component that lacks an attribute simply exports nothing for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


def _fields(obj: Any) -> dict[str, int]:
    """Integer fields of a counters record (``as_dict()``, a dataclass, or nothing)."""
    if obj is None:
        return {}
    as_dict = getattr(obj, "as_dict", None)
    raw: Mapping[str, Any]
    if callable(as_dict):
        raw = as_dict()
    elif is_dataclass(obj) and not isinstance(obj, type):
        raw = asdict(obj)
    else:
        return {}
    return {k: int(v) for k, v in raw.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def _drops(counter: Any) -> dict[tuple[str, str], int]:
    """``DropCounter.snapshot()`` (``{"kind/reason": n}``) as ``{(kind, reason): n}``."""
    snapshot = getattr(counter, "snapshot", None)
    if not callable(snapshot):
        return {}
    out: dict[tuple[str, str], int] = {}
    for key, n in snapshot().items():
        kind, _, reason = str(key).partition("/")
        out[(kind, reason)] = int(n)
    return out


class ComponentCollector(Collector):
    """Exports the components' own counters; register it once on the process's registry.

    Parameters
    ----------
    publisher, subscriber, estimator, influx : object or None
        The running components; any may be None or lack the attributes read.
    published_version : callable or None
        ``cpe_id -> version`` the xApp last published, to count agents that lag behind.
    """

    def __init__(self, *, publisher: Any = None, subscriber: Any = None, estimator: Any = None,
                 influx: Any = None,
                 published_version: Callable[[str], int] | None = None) -> None:
        self.publisher = publisher
        self.subscriber = subscriber
        self.estimator = estimator
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
            yield from self._influx()
        except Exception:  # a scrape must never fail because one component misbehaves
            log.exception("collecting component metrics failed")

    def _publisher(self) -> Iterable[Metric]:
        pub = self.publisher
        if pub is None:
            return
        stats = _fields(getattr(pub, "stats", None))
        if stats:
            yield _events("mcw_mqtt_publisher_events",
                          "MQTT weight publisher counters (requested, sent, acked, rejected, "
                          "coalesced, invalid, connects, disconnects).", stats)
        pending = getattr(pub, "pending", None)
        if callable(pending):
            yield GaugeMetricFamily("mcw_mqtt_publisher_pending",
                                    "Weight messages queued or in flight.", value=pending())
        yield from self._drop_family("mcw_mqtt_publisher_dropped_payloads",
                                     "Weights the publisher refused to send, by reason.",
                                     getattr(pub, "drops", None))

    def _subscriber(self) -> Iterable[Metric]:
        sub = self.subscriber
        if sub is None:
            return
        yield from self._drop_family("mcw_mqtt_subscriber_dropped_payloads",
                                     "Agent state/telemetry messages dropped, by kind and reason.",
                                     getattr(sub, "drops", None))
        received = getattr(sub, "received", None)
        if isinstance(received, int):
            yield CounterMetricFamily("mcw_mqtt_subscriber_received",
                                      "Agent messages received (valid or not).", value=received)
        errors = getattr(sub, "callback_errors", None)
        if isinstance(errors, int):
            yield CounterMetricFamily("mcw_mqtt_subscriber_callback_errors",
                                      "Agent messages whose handling raised.", value=errors)
        states = getattr(sub, "states", None)
        if not callable(states):
            return
        known = states()
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

    def _estimator(self) -> Iterable[Metric]:
        counts = _fields(getattr(self.estimator, "counters", None))
        if not counts:
            return
        yield _events("mcw_estimator_events",
                      "Capacity model counters: frames and rows seen, values skipped "
                      "(non_finite, out_of_range), rows without KPIs, unknown WATs, missing "
                      "models, prediction errors.", counts)

    def _influx(self) -> Iterable[Metric]:
        store = self.influx
        if store is None:
            return
        counts = _fields(getattr(store, "counters", None))
        if counts:
            yield _events("mcw_influx_events",
                          "InfluxDB store counters (written_points, write_batches, "
                          "write_failures, dropped_points, rejected_values, parse_skipped).",
                          counts)
        buffered = getattr(store, "buffered", None)
        if isinstance(buffered, int):
            yield GaugeMetricFamily("mcw_influx_buffered_points",
                                    "Points waiting to be written to InfluxDB.", value=buffered)

    @staticmethod
    def _drop_family(name: str, doc: str, counter: Any) -> Iterable[Metric]:
        fam = CounterMetricFamily(name, doc, labels=["kind", "reason"])
        for (kind, reason), n in _drops(counter).items():
            fam.add_metric([kind, reason], n)
        yield fam


def _events(name: str, help_text: str, counts: dict[str, int]) -> CounterMetricFamily:
    """One counter family with an ``event`` label per entry of ``counts``."""
    fam = CounterMetricFamily(name, help_text, labels=["event"])
    for event, n in counts.items():
        fam.add_metric([event], n)
    return fam
