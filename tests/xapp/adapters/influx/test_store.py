"""The InfluxDB store against a real influxd 1.8 through the v2 API: what it writes reads back,
what InfluxDB refuses is dropped and counted without blocking the rest, what fails for a while
is retried, and the bounded buffer drops the oldest."""

from __future__ import annotations

import json
import time
from collections import deque

import numpy as np
import pandas as pd

from tests.support.influxd import InfluxServer
from tests.support.paths import REPO
from tests.support.polling import wait_until
from tests.xapp.adapters.influx.points import kpi_frame, open_store, raw_write
from xapp.adapters.influx.intake import InfluxIntake
from xapp.adapters.influx.store import InfluxConfig, InfluxStore
from xapp.adapters.mqtt.telemetry import telemetry_frame
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.ports import Published, WeightBatch
from xapp.core.weights import WeightDecision

#: The agent's telemetry JSON for one aggregated sample, pinned by the Go test
#: ``TestTelemetryGolden`` (kernel-agent/telemetry).
AGENT_TELEMETRY = REPO / "kernel-agent" / "telemetry" / "testdata" / "telemetry.golden.json"


def _kpis(t: float, cpes: list[str], mbps: float = 10.0) -> KpiFrame:
    n = len(cpes)
    return KpiFrame(time_s=t, cpe=np.array(cpes), wat=np.array(["nr"] * n),
                    values={"delivered_mbps": np.full(n, mbps), "rtt_ms": np.full(n, 5.0)})


def test_round_trip_and_latest(influx_db: InfluxServer) -> None:
    influx = influx_db
    store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket))
    now = time.time()
    store.write_kpis(kpi_frame(now - 30))
    store.write_kpis(kpi_frame(now - 2))
    fc = CapacityForecast(np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5]))
    store.write_forecasts(kpi_frame(now - 2), fc, "v1")
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
    store.write_kpis(kpi_frame(now - 1, n=1))
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


def test_agent_telemetry_lands_per_direction(influx_db: InfluxServer) -> None:
    """What the MQTT intake maps from an agent's telemetry (the Go agent's golden message)
    reads back from ``wat_kpi`` per (CPE, WAT, direction), retransmissions included: the
    sender's direction carries them, the receiver's does not; a percentage above 100 is
    refused and counted."""
    store = open_store(influx_db)
    now = time.time()
    doc = json.loads(AGENT_TELEMETRY.read_text())
    doc["time_ms"] = round((now - 3) * 1000)
    store.write_kpis(telemetry_frame([doc]))
    store.write_kpis(KpiFrame(time_s=now - 2, cpe=np.array(["cpe-0001"]), wat=np.array(["nr"]),
                              values={"rtt_ms": np.array([30.0]),
                                      "retrans_pct": np.array([250.0])},
                              direction=np.array(["ul"])))
    assert store.flush()
    assert store.counters.rejected_values == 1
    table = store.read_table("-1h")
    got = {(r["wat"], r["direction"], r["time_s"] < now - 2.5): r
           for r in table.to_dict("records")}
    for wat, stats in doc["wats"].items():
        for direction in ("dl", "ul"):
            row = got[(wat, direction, True)]
            assert row["rtt_ms"] == stats["rtt_ms"]
            want = stats[direction].get("retrans_pct")
            assert (np.isnan(row["retrans_pct"]) if want is None
                    else row["retrans_pct"] == want), (wat, direction, row)
    assert got[("nr", "ul", True)]["retrans_pct"] > 0  # the golden message has some
    late = got[("nr", "ul", False)]
    assert late["rtt_ms"] == 30.0 and np.isnan(late["retrans_pct"])
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


def test_writes_are_formatted_by_the_flusher_not_the_writer(influx_db: InfluxServer) -> None:
    """The tick hands over references; line protocol is made when the flusher runs."""
    store = InfluxStore(InfluxConfig(url=influx_db.url, bucket=influx_db.bucket))
    now = time.time()
    store.write_kpis(kpi_frame(now - 2))  # sinr 99 dB: refused, counted when formatted
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


# ------------------------------------------------------------------ permanent refusals
def test_unparsable_line_is_dropped_counted_and_the_next_batch_written(
        influx_db: InfluxServer) -> None:
    """(a) A line influxd cannot parse (a tag ending in a backslash, as a careless writer
    would send it) costs that line only: 1.8 stores the batch's good points and answers 400
    "partial write", which must not be retried."""
    store = open_store(influx_db, batch_size=10)
    t = time.time_ns() - 60 * 10**9
    good = [f"wat_kpi,cpe=g{i},wat=nr delivered_mbps={i}.5 {t + i}" for i in range(5)]
    store.write_lines([*good[:2], f"wat_kpi,cpe=bad\\,wat=nr delivered_mbps=1 {t}", *good[2:]])
    assert store.flush()
    c = store.counters
    assert (c.rejected_points_parse, c.rejected_batches, c.written_points) == (1, 1, 5)
    store.write_kpis(_kpis(t / 1e9 + 10, ["next0", "next1"]))
    assert store.flush() and store.buffered == 0
    table = store.read_table("-1h")
    assert sorted(table["cpe"]) == ["g0", "g1", "g2", "g3", "g4", "next0", "next1"]
    store.close()


def test_field_type_conflict_with_another_writer_does_not_block(
        influx_db: InfluxServer) -> None:
    """(b) Another writer made ``rtt_ms`` an integer: our float points conflict (a partial
    write, counted) and every later write still goes through."""
    t = time.time_ns() - 60 * 10**9
    assert raw_write(influx_db, f"wat_kpi,cpe=other,wat=nr rtt_ms=5i {t}".encode()) == 204
    store = open_store(influx_db, batch_size=4)
    store.write_kpis(_kpis(t / 1e9 + 1, ["a", "b", "c"]))  # rtt_ms float: refused
    store.write_forecasts(_kpis(t / 1e9 + 1, ["a", "b", "c"]),
                          CapacityForecast(np.ones(3), np.ones(3)), "v9")
    assert store.flush() and store.buffered == 0
    assert store.counters.rejected_points_type_conflict == 3
    assert store.counters.rejected_points == 3 and store.counters.written_points == 3
    # A string field of the same name from a second writer is refused, and blocks nothing.
    assert raw_write(influx_db, f'wat_kpi,cpe=str,wat=nr rtt_ms="x" {t + 5}'.encode()) == 400
    store.write_kpis(KpiFrame(time_s=t / 1e9 + 2, cpe=np.array(["d"]), wat=np.array(["nr"]),
                              values={"delivered_mbps": np.array([42.0])}))
    assert store.flush()
    table = store.read_table("-1h")
    assert list(table.loc[table["cpe"] == "d", "delivered_mbps"]) == [42.0]
    assert len(store.read_table("-1h", measurement="wat_prediction")) == 3
    store.close()


def test_conflict_inside_one_batch_keeps_the_good_points(influx_db: InfluxServer) -> None:
    """Two points of one batch disagree on a field's type: influxd 1.8 then refuses the
    *whole* request (400 "field type conflict", nothing stored).  Splitting the batch keeps
    every point but the loser."""
    store = open_store(influx_db, batch_size=1000)
    t = time.time_ns() - 60 * 10**9
    lines = [f"wat_kpi,cpe=c{i},wat=nr delivered_mbps={i}.0 {t + i}" for i in range(40)]
    lines[17] = f'wat_kpi,cpe=c17,wat=nr delivered_mbps="oops" {t + 17}'
    store.write_lines(lines)
    assert store.flush()
    assert store.counters.rejected_points_type_conflict == 1
    assert store.counters.written_points == 39
    assert len(store.read_table("-1h")) == 39
    store.close()


# ------------------------------------------------------- transient failures, the bounded buffer
def test_retry_after_outage_loses_nothing(influx: InfluxServer) -> None:
    store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, batch_size=50,
                                     backoff_initial_s=0.2, timeout_ms=2000))
    base = time.time() - 100
    influx.stop()
    for i in range(10):
        store.write_kpis(kpi_frame(base + i))
    assert not store.flush()
    assert store.counters.write_failures >= 1 and store.buffered == 30
    assert store.counters.dropped_points == 0
    influx.start()
    assert store.flush()
    assert store.buffered == 0 and store.counters.written_points == 30
    assert len(store.read_table("-1h")) == 30
    store.close()


def test_outage_with_a_bad_batch_queued_loses_nothing_good(influx: InfluxServer) -> None:
    """(d) influxd is down while good points and one bad line queue up: every attempt fails
    transiently (nothing dropped), and once it is back the flusher thread writes every good
    point by itself, the bad line dropped and counted."""
    store = open_store(influx, batch_size=7, backoff_initial_s=0.05, backoff_max_s=0.5,
                       timeout_ms=2000)
    t0 = time.time() - 100
    influx.stop()
    store.write_kpis(_kpis(t0, [f"a{i}" for i in range(5)]))
    store.write_lines([f"wat_kpi,cpe=bad\\,wat=nr delivered_mbps=1 {int(t0 * 1e9)}"])
    store.write_kpis(_kpis(t0 + 1, [f"b{i}" for i in range(12)]))
    assert not store.flush()
    assert not store.flush()  # (forced: a second transient failure)
    c = store.counters
    assert c.write_failures == 2 and store.buffered == 18
    assert c.dropped_points == 0 and c.rejected_points == 0
    store.start(interval_s=0.05)
    influx.start()
    assert wait_until(lambda: store.buffered == 0, 30)
    assert c.written_points == 17 and c.rejected_points_parse == 1
    assert c.dropped_points == 0
    assert len(store.read_table("-1h")) == 17
    store.close()


def test_bounded_buffer_counts_drops(influx: InfluxServer) -> None:
    influx.stop()
    store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, batch_size=1000,
                                     max_buffer_points=12, timeout_ms=2000))
    base = time.time() - 100
    for i in range(6):
        store.write_kpis(kpi_frame(base + i))
    assert store.buffered == 12 and store.counters.dropped_points == 6
    influx.start()
    assert store.flush()
    table = store.read_table("-1h")
    # The newest points are kept, the oldest dropped.
    assert len(table) == 12 and table["time_s"].min() >= base + 2 - 1e-3
    store.close()


def test_a_write_larger_than_the_buffer_keeps_its_newest_points() -> None:
    store = InfluxStore(InfluxConfig(url="http://127.0.0.1:9", bucket="b",
                                     max_buffer_points=5))
    store.write_lines(["a", "b", "c"])
    store.write_lines([f"n{i}" for i in range(7)])
    assert list(store._buffer) == ["n2", "n3", "n4", "n5", "n6"]
    assert store.counters.dropped_points == 5
    store.write_lines(["z"])
    assert list(store._buffer) == ["n3", "n4", "n5", "n6", "z"]
    assert store.counters.dropped_points == 6
