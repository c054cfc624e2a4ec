"""The loop's I/O for ``mcw run``: the KPI source, the capacity estimator, the weights
publisher and the telemetry sink (InfluxDB and MQTT, or files in lab mode), each with its
readiness check, its workers and its stop."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xapp.adapters.lab import FileKpiSource, JsonlPublisher, NullSink
from xapp.adapters.mqtt import ChannelSubscriber, MqttWeightPublisher
from xapp.app.config import Controls
from xapp.app.run_options import RunOptions
from xapp.app.wiring.estimator import build_estimator
from xapp.app.wiring.mqtt import build_mqtt
from xapp.core.forecast import CapacityEstimator
from xapp.core.intake import LatestKpis
from xapp.core.issue_clock import IssueClock
from xapp.core.ownership import ShardedKpis, ShardFence
from xapp.core.ports import KpiSource, TelemetrySink, VersionStore, WeightPublisher
from xapp.core.timings import Timings
from xapp.core.workers import Worker

if TYPE_CHECKING:  # heavy: imported where they start (build_components, build_estimator)
    from xapp.adapters.influx.intake import InfluxIntake
    from xapp.adapters.influx.store import InfluxStore
    from xapp.model.adaptive import FamilyCalibration


@dataclass
class Components:
    """The loop's I/O, each with a readiness check and a stop function."""

    kpis: KpiSource
    estimator: CapacityEstimator
    model_version: Callable[[], str]
    publisher: WeightPublisher
    sink: TelemetrySink | None
    checks: dict[str, Callable[[], bool]] = field(default_factory=dict)
    stoppers: list[Callable[[], object]] = field(default_factory=list)
    #: Threads the components own (supervised), and probes of the threads that are not
    #: workers (the MQTT network loops): name -> (healthy, restart).
    workers: list[Worker] = field(default_factory=list)
    probes: dict[str, tuple[Callable[[], bool], Callable[[], object]]] = field(
        default_factory=dict)
    #: The MQTT publisher, channel subscriber and InfluxDB store and intake when they run (for
    #: metrics and ``/ric/v1/cpes``); None in lab mode.
    mqtt_publisher: MqttWeightPublisher | None = None
    subscriber: ChannelSubscriber | None = None
    influx: InfluxStore | None = None
    influx_intake: InfluxIntake | None = None
    #: The capacity model's input-check counters (None for the EWMA baseline).
    estimator_counters: Callable[[], Mapping[str, int]] | None = None
    #: The capacity model's lower-bound coverage and multiplier per family (None for the EWMA).
    estimator_calibration: Callable[[], Mapping[str, FamilyCalibration]] | None = None
    #: The in-memory intake every live source writes (the loop reads it unless in lab mode).
    intake: LatestKpis = field(default_factory=LatestKpis)

    def publisher_connects(self) -> Callable[[], int] | None:
        """The MQTT publisher's count of broker connections (the loop re-sends every CPE's
        weights after a reconnect); None in lab mode."""
        publisher = self.mqtt_publisher
        if publisher is None:
            return None
        return lambda: publisher.stats.connects


def build_components(opts: RunOptions, controls: Controls, timings: Timings,
                     versions: VersionStore, fence: ShardFence | None = None,
                     replica_id: str = "", issue_clock: IssueClock | None = None
                     ) -> Components:
    """KPI intake, estimator, publisher and sink from the controls (or lab files).

    The loop reads KPIs from the in-memory intake (:class:`~xapp.core.intake.LatestKpis`):
    MQTT telemetry lands there as it arrives, and the InfluxDB intake adds, once a second, the
    RAN KPIs that only InfluxDB has.  In lab mode a JSON file stands in for both.
    """
    stoppers: list[Callable[[], object]] = []
    checks: dict[str, Callable[[], bool]] = {}
    workers: list[Worker] = []
    probes: dict[str, tuple[Callable[[], bool], Callable[[], object]]] = {}
    estimator = build_estimator(opts.estimator, controls, stoppers, workers)
    sink: TelemetrySink | None
    kpis: KpiSource
    influx: InfluxStore | None = None
    influx_intake: InfluxIntake | None = None
    intake = LatestKpis()
    if opts.kpi_file is not None:
        kpis, sink = FileKpiSource(opts.kpi_file), NullSink()
    else:
        # pandas and the InfluxDB client (some 900 modules, two seconds to import): lab mode
        # does without them.
        from xapp.app.wiring.influx import build_influx, start_intake

        influx = build_influx(controls, timings, fence, checks, stoppers, workers)
        influx_intake = start_intake(influx, intake, timings, fence, stoppers, workers)
        kpis, sink = intake, influx
    if fence is not None and not fence.everything:
        # The loop decides only CPEs of the shards held now.
        kpis = ShardedKpis(kpis, fence)
    publisher: WeightPublisher
    mqtt_publisher: MqttWeightPublisher | None = None
    subscriber: ChannelSubscriber | None = None
    if opts.publish_file is not None:
        publisher = JsonlPublisher(opts.publish_file, versions)
    else:
        mqtt_publisher, subscriber = build_mqtt(controls, versions, intake, sink, checks,
                                                stoppers, workers, fence, replica_id,
                                                issue_clock)
        # paho's network thread and the publisher's own select loop are not Workers: the
        # supervisor probes them and restarts a dead one within its budget.
        probes["mqtt-publisher"] = (mqtt_publisher.healthy, mqtt_publisher.restart)
        probes["mqtt-subscriber"] = (subscriber.healthy, subscriber.restart)
        publisher = mqtt_publisher
    return Components(kpis, estimator.estimator, estimator.version, publisher, sink, checks,
                      stoppers, workers, probes, mqtt_publisher=mqtt_publisher,
                      subscriber=subscriber, influx=influx, influx_intake=influx_intake,
                      estimator_counters=estimator.counters,
                      estimator_calibration=estimator.calibration, intake=intake)
