"""InfluxDB for ``mcw run``: the store (the telemetry sink, with its flusher and readiness
probe) and the intake that polls the RAN KPIs only InfluxDB has into the loop's intake."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from xapp.adapters.influx.intake import InfluxIntake
from xapp.adapters.influx.store import InfluxConfig, InfluxStore
from xapp.app.config import Controls
from xapp.app.endpoints import PeriodicCheck
from xapp.core.intake import LatestKpis
from xapp.core.ownership import ShardFence
from xapp.core.timings import Timings
from xapp.core.workers import Worker

log = logging.getLogger(__name__)

#: How often InfluxDB is probed for /ric/v1/health/ready.
INFLUX_CHECK_S = 2.0


def build_influx(controls: Controls, timings: Timings, fence: ShardFence | None,
                 checks: dict[str, Callable[[], bool]], stoppers: list[Callable[[], object]],
                 workers: list[Worker]) -> InfluxStore:
    """The store, its flusher started and its readiness probed (``checks["influxdb"]``)."""
    i = controls.influxdb
    # Reads and writes run on their own threads, never on the tick.
    timeout_ms = timings.influx_timeout_ms
    # Points this replica writes carry its id, and its InfluxDB intake skips them (they are in
    # its intake already).
    writer = controls.sharding.effective_replica_id()
    store = InfluxStore(InfluxConfig(url=i.url, bucket=i.bucket, org=i.org,
                                     token=read_token(i.token_file), timeout_ms=timeout_ms,
                                     writer=writer))
    workers.append(store.start(timings.influx_flush_s))
    stoppers.append(store.close)
    check = PeriodicCheck("influxdb", store.ping, interval_s=INFLUX_CHECK_S)
    check.run_once()  # ready reflects InfluxDB from the first probe, not after one interval
    check.start()
    stoppers.append(check.stop)
    workers.append(check.worker)
    checks["influxdb"] = check
    if fence is not None and not fence.everything:
        store.shard_of = fence.shard
    return store


def start_intake(store: InfluxStore, intake: LatestKpis, timings: Timings,
                 fence: ShardFence | None, stoppers: list[Callable[[], object]],
                 workers: list[Worker]) -> InfluxIntake:
    """The InfluxDB intake, polling into ``intake``; stopped before the store."""
    # Other writers (RAN KPI exporters) do not tag a shard, so the intake filters the rows
    # it read rather than the query.
    held = None if fence is None or fence.everything else fence
    influx_intake = InfluxIntake(store, intake, interval_s=timings.intake_poll_s,
                                 overlap_s=timings.intake_overlap_s,
                                 accept=None if held is None else held.mask)
    workers.append(influx_intake.start())
    stoppers.insert(0, influx_intake.stop)
    return influx_intake


def read_token(path: str) -> str:
    """The InfluxDB token from its Secret file; empty (no auth, InfluxDB 1.8) if absent."""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        log.warning("InfluxDB token file %s not found; connecting without a token", path)
        return ""
