"""The InfluxDB store against a real influxd 1.8 through the v2 API."""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pandas as pd

from tests.support.influxd import InfluxServer
from xapp.adapters.influx import InfluxConfig, InfluxIntake, InfluxStore
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.ports import Published, WeightBatch
from xapp.core.weights import WeightDecision


def _frame(t: float, n: int = 3) -> KpiFrame:
    return KpiFrame(time_s=t, cpe=np.array([f"cpe{i}" for i in range(n)]),
                    wat=np.array(["nr", "wifi", "lifi"][:n]),
                    values={"delivered_mbps": np.arange(1.0, n + 1) * 10,
                            "sinr_db": np.array([20.0, np.nan, 99.0][:n]),
                            "rtt_ms": np.full(n, 5.0)})


def test_round_trip_and_latest(influx_db: InfluxServer) -> None:
    influx = influx_db
    store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket))
    now = time.time()
    store.write_kpis(_frame(now - 30))
    store.write_kpis(_frame(now - 2))
    fc = CapacityForecast(np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5]))
    store.write_forecasts(_frame(now - 2), fc, "v1")
    dec = WeightDecision(weights={"nr": 3, "wifi": 10}, shares={"nr": 0.23, "wifi": 0.77},
                         aggregate_mbps=100.0, usable=frozenset({"nr", "wifi"}), changed=True,
                         reason="test")
    batch = WeightBatch.same([("cpe0", dec, "load_balancing")], lease_s=30.0)
    store.write_weights(Published(batch, np.array([7]), now - 2))
    assert store.flush()
    assert store.counters.rejected_values == 2  # sinr 99 dB twice
    table = store.read_table("-1h")
    assert len(table) == 6 and set(table["wat"]) == {"nr", "wifi", "lifi"}
    intake = LatestKpis()
    reader = InfluxIntake(store, intake, fields=("delivered_mbps", "sinr_db"), lookback_s=60.0)
    assert reader.poll_once() == 6
    frame = intake.latest(now, max_age_s=10.0)
    # Points without a direction tag are both directions' (history written before v2).
    assert list(frame.cpe) == ["cpe0", "cpe0", "cpe1", "cpe1", "cpe2", "cpe2"]
    assert list(frame.direction) == ["dl", "ul"] * 3  # type: ignore[arg-type]
    np.testing.assert_allclose(frame.column("delivered_mbps"), [10.0, 10, 20, 20, 30, 30])
    assert "rtt_ms" not in frame.values  # only the fields asked for
    # The next poll reads only what is new, and reading a point again changes nothing.
    store.write_kpis(_frame(now - 1, n=1))
    assert store.flush()
    assert reader.poll_once() == 4  # the new point and those of the 2 s overlap
    frame = intake.latest(now, max_age_s=10.0)
    np.testing.assert_allclose(frame.column("delivered_mbps"), [10.0, 10, 20, 20, 30, 30])
    pred = store.read_table("-1h", measurement="wat_prediction")
    assert set(pred["model_version"]) == {"v1"} and len(pred) == 3
    weights = store.read_table("-1h", measurement="wat_weight")
    # One point per (CPE, WAT, direction) of the message.
    assert sorted(weights["weight"]) == [3.0, 3.0, 10.0, 10.0]
    assert set(weights["version"]) == {7.0} and sorted(weights["direction"]) == [
        "dl", "dl", "ul", "ul"]
    np.testing.assert_allclose(sorted(weights["share"]), [3 / 13] * 2 + [10 / 13] * 2,
                               atol=5e-5)
    store.close()


def test_intake_takes_each_field_from_its_newest_point(influx_db: InfluxServer) -> None:
    """RAN KPIs and the agent's subflow telemetry arrive as separate points: the newer agent
    point must not hide the radio KPIs of the older one."""
    store = InfluxStore(InfluxConfig(url=influx_db.url, bucket=influx_db.bucket))
    now = time.time()
    one = np.array(["cpe0"])
    nr = np.array(["nr"])
    store.write_kpis(KpiFrame(time_s=now - 3, cpe=one, wat=nr,
                              values={"sinr_db": np.array([21.0]), "cqi": np.array([12.0])}))
    store.write_kpis(KpiFrame(time_s=now - 1, cpe=one, wat=nr,
                              values={"delivered_mbps": np.array([300.0]),
                                      "saturated": np.array([0.9])}))
    assert store.flush()
    intake = LatestKpis()
    InfluxIntake(store, intake, fields=("sinr_db", "cqi", "delivered_mbps", "saturated")
                 ).poll_once()
    frame = intake.latest(now, max_age_s=10.0)
    assert list(frame.cpe) == ["cpe0", "cpe0"]
    for i in range(2):
        assert frame.column("sinr_db")[i] == 21.0 and frame.column("cqi")[i] == 12.0
        assert frame.column("delivered_mbps")[i] == 300.0
        assert frame.column("saturated")[i] == 0.9
    store.close()


def test_direction_tag_round_trips_and_old_points_read_as_both(influx_db: InfluxServer) -> None:
    store = InfluxStore(InfluxConfig(url=influx_db.url, bucket=influx_db.bucket))
    now = time.time()
    two = np.array(["cpe0", "cpe0"])
    nr = np.array(["nr", "nr"])
    # The link's radio KPIs (no direction), then each direction's throughput.
    store.write_kpis(KpiFrame(time_s=now - 3, cpe=two[:1], wat=nr[:1],
                              values={"sinr_db": np.array([18.0])}))
    store.write_kpis(KpiFrame(time_s=now - 2, cpe=two, wat=nr,
                              values={"delivered_mbps": np.array([400.0, 90.0]),
                                      "saturated": np.array([1.0, 0.3])},
                              direction=np.array(["dl", "ul"])))
    # Another writer's point with a direction this schema does not know.
    store.write_lines([f"wat_kpi,cpe=cpe0,wat=nr,direction=sideways delivered_mbps=1 "
                       f"{round((now - 2) * 1e9)}"])
    fc = CapacityForecast(np.array([410.0, 95.0]), np.array([380.0, 80.0]))
    store.write_forecasts(KpiFrame(time_s=now - 2, cpe=two, wat=nr, direction=np.array(
        ["dl", "ul"])), fc, "v2")
    dl = WeightDecision(weights={"nr": 1, "wifi": 9}, shares={"nr": 0.1, "wifi": 0.9},
                        aggregate_mbps=1.0, usable=frozenset({"nr", "wifi"}), changed=True,
                        reason="t")
    ul = WeightDecision(weights={"nr": 4, "wifi": 1}, shares={"nr": 0.8, "wifi": 0.2},
                        aggregate_mbps=1.0, usable=frozenset({"nr", "wifi"}), changed=True,
                        reason="t")
    batch = WeightBatch.of([("cpe0", (dl, "load_balancing"), (ul, "load_balancing"))], 30.0)
    store.write_weights(Published(batch, np.array([3]), now - 2))
    assert store.flush()
    skipped = store.counters.parse_skipped
    table = store.read_table("-1h")
    assert store.counters.parse_skipped == skipped + 1  # the unknown direction
    assert sorted(table["direction"]) == ["", "dl", "ul"]
    by = {d: r for d, r in zip(table["direction"], table.to_dict("records"), strict=True)}
    assert by["dl"]["delivered_mbps"] == 400.0 and by["ul"]["saturated"] == 0.3
    assert by[""]["sinr_db"] == 18.0
    pred = store.read_table("-1h", measurement="wat_prediction")
    assert dict(zip(pred["direction"], pred["median_mbps"], strict=True)) == {
        "dl": 410.0, "ul": 95.0}
    weights = store.read_table("-1h", measurement="wat_weight")
    got = {(d, w): v for d, w, v in zip(weights["direction"], weights["wat"], weights["weight"],
                                        strict=True)}
    assert got == {("dl", "nr"): 1, ("dl", "wifi"): 9, ("ul", "nr"): 4, ("ul", "wifi"): 1}
    # Into the intake: each direction's row has its own throughput and the link's SINR.
    intake = LatestKpis()
    InfluxIntake(store, intake, fields=("sinr_db", "delivered_mbps", "saturated"),
                 lookback_s=60.0).poll_once()
    frame = intake.latest(now, max_age_s=10.0)
    assert list(frame.direction) == ["dl", "ul"]  # type: ignore[arg-type]
    np.testing.assert_allclose(frame.column("delivered_mbps"), [400.0, 90.0])
    np.testing.assert_allclose(frame.column("sinr_db"), [18.0, 18.0])
    store.close()


def test_retry_after_outage_loses_nothing(influx: InfluxServer) -> None:
    store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, batch_size=50,
                                     backoff_initial_s=0.2, timeout_ms=2000))
    base = time.time() - 100
    influx.stop()
    for i in range(10):
        store.write_kpis(_frame(base + i))
    assert not store.flush()
    assert store.counters.write_failures >= 1 and store.buffered == 30
    assert store.counters.dropped_points == 0
    influx.start()
    assert store.flush()
    assert store.buffered == 0 and store.counters.written_points == 30
    assert len(store.read_table("-1h")) == 30
    store.close()


def test_bounded_buffer_counts_drops(influx: InfluxServer) -> None:
    influx.stop()
    store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, batch_size=1000,
                                     max_buffer_points=12, timeout_ms=2000))
    base = time.time() - 100
    for i in range(6):
        store.write_kpis(_frame(base + i))
    assert store.buffered == 12 and store.counters.dropped_points == 6
    influx.start()
    assert store.flush()
    table = store.read_table("-1h")
    # The newest points are kept, the oldest dropped.
    assert len(table) == 12 and table["time_s"].min() >= base + 2 - 1e-3
    store.close()


def test_table_import_skips_bad_rows(influx_db: InfluxServer) -> None:
    influx = influx_db
    store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket))
    now = time.time()
    df = pd.DataFrame({"time_s": [now - 5, np.nan, now - 4], "cpe": ["a", "a", "a"],
                       "wat": ["wifi"] * 3, "cell": ["ap1"] * 3,
                       "snr_db": [30.0, 31.0, 1e9], "delivered_mbps": [100.0, 1.0, 200.0]})
    assert store.write_table(df) == 2
    assert store.flush()
    assert store.counters.parse_skipped == 1 and store.counters.rejected_values == 1
    table = store.read_table("-1h")
    assert list(table["delivered_mbps"]) == [100.0, 200.0]
    assert set(table["cell"]) == {"ap1"}
    store.close()


def test_ping(influx_db: InfluxServer) -> None:
    from tests.support.polling import free_port

    up = InfluxStore(InfluxConfig(url=influx_db.url, bucket=influx_db.bucket))
    down = InfluxStore(InfluxConfig(url=f"http://127.0.0.1:{free_port()}", bucket="mcw/autogen",
                                    timeout_ms=500))
    assert up.ping() is True and down.ping() is False
    up.close()
    down.close()


def test_the_intake_skips_what_its_own_replica_wrote(influx_db: InfluxServer) -> None:
    """Points a replica wrote reached its intake in-process; its InfluxDB intake reads only the
    others' (another replica's, or a writer that tags nothing)."""
    influx = influx_db
    now = time.time()
    mine = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, writer="xapp-0"))
    theirs = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, writer="xapp-1"))
    untagged = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket))
    mine.write_kpis(_frame(now - 3, n=3))
    theirs.write_kpis(_frame(now - 2, n=2))
    untagged.write_kpis(_frame(now - 1, n=1))
    assert mine.flush() and theirs.flush() and untagged.flush()
    assert set(mine.read_table("-1h")["time_s"].round()) == {round(now - 3), round(now - 2),
                                                             round(now - 1)}
    intake = LatestKpis()
    assert InfluxIntake(mine, intake, lookback_s=60.0).poll_once() == 3
    frame = intake.latest(now, max_age_s=10.0)
    assert sorted(set(frame.cpe.tolist())) == ["cpe0", "cpe1"]
    # A reader with no writer of its own reads everything.
    assert InfluxIntake(untagged, LatestKpis(), lookback_s=60.0).poll_once() == 6
    # A writer id with a quote cannot break out of the query's string.
    odd = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, writer="a' OR 'b"))
    assert InfluxIntake(odd, LatestKpis(), lookback_s=60.0).poll_once() == 6


def test_the_intake_for_a_period_polls_and_rereads_with_it(influx_db: InfluxServer) -> None:
    store = InfluxStore(InfluxConfig(url=influx_db.url, bucket=influx_db.bucket))
    fast = InfluxIntake.for_period(store, LatestKpis(), 0.2)
    assert (fast.interval_s, fast.overlap_s) == (0.2, 0.4)
    slow = InfluxIntake.for_period(store, LatestKpis(), 5.0)
    assert (slow.interval_s, slow.overlap_s) == (1.0, 2.0)


def test_writes_are_formatted_by_the_flusher_not_the_writer(influx_db: InfluxServer) -> None:
    """The tick hands over references; line protocol is made when the flusher runs."""
    store = InfluxStore(InfluxConfig(url=influx_db.url, bucket=influx_db.bucket))
    now = time.time()
    store.write_kpis(_frame(now - 2))  # sinr 99 dB: refused, counted when formatted
    assert store.buffered == 3 and store.counters.rejected_values == 0
    assert store._buffer == deque()  # nothing formatted yet
    assert store.flush()
    assert store.counters.rejected_values == 1 and store.buffered == 0
    assert len(store.read_table("-1h")) == 3


def test_replicas_tag_kpis_with_a_shard_and_read_only_their_own(influx_db: InfluxServer) -> None:
    """Several replicas: KPI points the xApp writes carry a ``shard`` tag; the intake keeps the
    rows of the shards this replica holds, by CPE id, because another writer's points (a RAN
    KPI exporter's) carry no shard tag and must not be lost to a WHERE on it."""
    from xapp.core.ownership import ShardFence
    from xapp.core.shards import shard_of

    store = InfluxStore(InfluxConfig(url=influx_db.url, bucket=influx_db.bucket))
    store.shard_of = shard_of
    now = time.time()
    ids = [f"cpe-{i}" for i in range(8)]
    mine = {c for c in ids if shard_of(c) % 2 == 0}
    store.write_kpis(KpiFrame(time_s=now - 2, cpe=np.array(ids), wat=np.array(["nr"] * 8),
                              values={"delivered_mbps": np.arange(8.0)}))
    other = next(c for c in sorted(mine))
    store.write_lines([f"wat_kpi,cpe={other},wat=wifi sinr_db=30 {round((now - 2) * 1e9)}"])
    assert store.flush()
    table = store.read_table("-1h")
    tagged = table[table["wat"] == "nr"]
    assert sorted(tagged["shard"].astype(int)) == sorted(shard_of(c) for c in ids)
    fence = ShardFence(64)
    for s in {shard_of(c) for c in mine}:
        fence.grant(s, float("inf"))
    intake = LatestKpis()
    InfluxIntake(store, intake, accept=fence.mask).poll_once()
    frame = intake.latest(now, max_age_s=10.0)
    assert set(frame.cpe.tolist()) == mine
    assert (other, "wifi") in set(zip(frame.cpe.tolist(), frame.wat.tolist(), strict=True))
    store.close()
