"""The loop's I/O in lab mode (files instead of InfluxDB and MQTT), and the KPIs of the held
shards only when replicas share the fleet."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from xapp.adapters.lab import FileKpiSource, JsonlPublisher, NullSink
from xapp.adapters.mqtt import MemoryVersionStore, MqttWeightPublisher
from xapp.app.config import parse_controls
from xapp.app.run_options import RunOptions
from xapp.app.wiring.components import build_components
from xapp.core.ewma import EwmaEstimator
from xapp.core.ownership import ShardedKpis, ShardFence
from xapp.core.timings import derive_timings


def lab(tmp_path: Path) -> RunOptions:
    kpis = tmp_path / "kpis.json"
    kpis.write_text(json.dumps({"cpes": {}}))
    return RunOptions(estimator="ewma", kpi_file=kpis, publish_file=tmp_path / "w.jsonl")


def test_lab_mode_reads_and_writes_files_and_holds_no_server(tmp_path: Path) -> None:
    comp = build_components(lab(tmp_path), parse_controls({}), derive_timings(1.0),
                            MemoryVersionStore())
    assert isinstance(comp.kpis, FileKpiSource) and isinstance(comp.sink, NullSink)
    assert isinstance(comp.publisher, JsonlPublisher)
    assert isinstance(comp.estimator, EwmaEstimator) and comp.model_version() == "ewma-baseline"
    assert comp.checks == {} and comp.probes == {} and comp.workers == []
    assert comp.mqtt_publisher is None and comp.subscriber is None
    assert comp.influx is None and comp.influx_intake is None
    assert comp.publisher_connects() is None  # no broker to reconnect to


def test_sharing_the_fleet_the_loop_reads_the_held_shards_kpis(tmp_path: Path) -> None:
    fence = ShardFence(4)
    comp = build_components(lab(tmp_path), parse_controls({}), derive_timings(1.0),
                            MemoryVersionStore(), fence, "r1")
    assert isinstance(comp.kpis, ShardedKpis)
    one = build_components(lab(tmp_path), parse_controls({}), derive_timings(1.0),
                           MemoryVersionStore(), ShardFence(4, everything=True), "r1")
    assert isinstance(one.kpis, FileKpiSource)


def test_with_mqtt_the_loop_counts_the_publisher_s_connections(tmp_path: Path) -> None:
    comp = build_components(lab(tmp_path), parse_controls({}), derive_timings(1.0),
                            MemoryVersionStore())
    stats = SimpleNamespace(connects=0)
    comp.mqtt_publisher = cast(MqttWeightPublisher, SimpleNamespace(stats=stats))
    connects = comp.publisher_connects()
    assert connects is not None and connects() == 0
    stats.connects = 2
    assert connects() == 2
