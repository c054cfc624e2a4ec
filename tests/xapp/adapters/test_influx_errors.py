"""What InfluxDB refuses, what it loses, and what it reads back: the store against a real influxd.

The store must drop (and count) what InfluxDB refuses for good, retry what fails for a while,
write tag and string values so they read back exactly (or refuse them, counted), and read any
values another writer put in ``wat_kpi`` without raising.
"""

from __future__ import annotations

import itertools
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.influxd import InfluxServer
from xapp.adapters.influx import (
    InfluxConfig,
    InfluxIntake,
    InfluxStore,
    column_lines,
    escape_tag,
)
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.kpis import KPI_FIELDS

# One example per database or time window of the shared server: the fixture's database is
# shared by the examples of one test on purpose.
_SHARED_SERVER = settings(deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _raw_write(server: InfluxServer, body: bytes) -> int:
    """POST line protocol as another writer would (v1 /write); the HTTP status."""
    req = urllib.request.Request(f"{server.url}/write?db={server.database}&precision=ns",
                                 data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10.0) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _kpis(t: float, cpes: list[str], mbps: float = 10.0) -> KpiFrame:
    n = len(cpes)
    return KpiFrame(time_s=t, cpe=np.array(cpes), wat=np.array(["nr"] * n),
                    values={"delivered_mbps": np.full(n, mbps), "rtt_ms": np.full(n, 5.0)})


def _store(server: InfluxServer, **kw: Any) -> InfluxStore:
    return InfluxStore(InfluxConfig(url=server.url, bucket=server.bucket, **kw))


# ------------------------------------------------------------------ permanent refusals
def test_unparsable_line_is_dropped_counted_and_the_next_batch_written(
        influx_db: InfluxServer) -> None:
    """(a) A line influxd cannot parse (a tag ending in a backslash, as a careless writer
    would send it) costs that line only: 1.8 stores the batch's good points and answers 400
    "partial write", which must not be retried."""
    store = _store(influx_db, batch_size=10)
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
    assert _raw_write(influx_db, f"wat_kpi,cpe=other,wat=nr rtt_ms=5i {t}".encode()) == 204
    store = _store(influx_db, batch_size=4)
    store.write_kpis(_kpis(t / 1e9 + 1, ["a", "b", "c"]))  # rtt_ms float: refused
    store.write_forecasts(_kpis(t / 1e9 + 1, ["a", "b", "c"]),
                          CapacityForecast(np.ones(3), np.ones(3)), "v9")
    assert store.flush() and store.buffered == 0
    assert store.counters.rejected_points_type_conflict == 3
    assert store.counters.rejected_points == 3 and store.counters.written_points == 3
    # A string field of the same name from a second writer is refused, and blocks nothing.
    assert _raw_write(influx_db, f'wat_kpi,cpe=str,wat=nr rtt_ms="x" {t + 5}'.encode()) == 400
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
    store = _store(influx_db, batch_size=1000)
    t = time.time_ns() - 60 * 10**9
    lines = [f"wat_kpi,cpe=c{i},wat=nr delivered_mbps={i}.0 {t + i}" for i in range(40)]
    lines[17] = f'wat_kpi,cpe=c17,wat=nr delivered_mbps="oops" {t + 17}'
    store.write_lines(lines)
    assert store.flush()
    assert store.counters.rejected_points_type_conflict == 1
    assert store.counters.written_points == 39
    assert len(store.read_table("-1h")) == 39
    store.close()


# ------------------------------------------------------------------ transient failures
def test_outage_with_a_bad_batch_queued_loses_nothing_good(influx: InfluxServer) -> None:
    """(d) influxd is down while good points and one bad line queue up: every attempt fails
    transiently (nothing dropped), and once it is back the flusher thread writes every good
    point by itself, the bad line dropped and counted."""
    store = _store(influx, batch_size=7, backoff_initial_s=0.05, backoff_max_s=0.5,
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
    deadline = time.monotonic() + 30
    while store.buffered and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.buffered == 0
    assert c.written_points == 17 and c.rejected_points_parse == 1
    assert c.dropped_points == 0
    assert len(store.read_table("-1h")) == 17
    store.close()


# ------------------------------------------------------------------ escaping
_SPECIAL = st.sampled_from(["\\", "\\\\", ",", "=", " ", '"', "'", "\n", "\r", "\t", "é", "☃",
                            "𝄞", "#", "\x00", "a", "Z", "0"])
_AWKWARD = st.lists(_SPECIAL, max_size=8).map("".join)
_VALUES = st.one_of(_AWKWARD, st.text(max_size=12))

# Each example writes into its own time window of the test's database.
_WINDOW = itertools.count()


def test_escaping_examples() -> None:
    assert escape_tag("a\\b") == "a\\b"  # kept as written: 1.8 reads it back as written
    assert escape_tag("a\\,b c=d") == "a\\\\,b\\ c\\=d"
    assert escape_tag("") == ""  # no tag
    assert escape_tag("ends\\") is None and escape_tag("two\nlines") is None
    lines = column_lines("m", {"t": ["ok", "bad\\", "", "x y"]},
                         {"v": np.array([1.0, 2.0, 3.0, np.nan])}, 7)
    assert lines.lines == ["m,t=ok v=1.0 7", "m v=3.0 7"] and lines.refused == 1
    lines = column_lines("m", {"cpe": ["a", ""], "cell": ["", "c"]},
                         {"v": np.array([1.0, 2.0])}, 7, required=("cpe",))
    assert lines.lines == ["m,cpe=a v=1.0 7"] and lines.refused == 1


def test_percent_and_braces_are_text() -> None:
    """Lines are made by %-formatting: a % or a brace in a name, a tag or a string field is
    written as it is."""
    lines = column_lines("m%d{}", {"t%s": ["a%s{}", "b"]},
                         {"v%r": np.array([1.25, np.nan]), "n": np.array([3, 4])},
                         np.array([7, 8]), text={"s%": "x%d{0}"}, decimals=1)
    assert lines.lines == ['m%d{},t%s=a%s{} v%r=1.2,n=3i,s%="x%d{0}" 7',
                           'm%d{},t%s=b n=4i,s%="x%d{0}" 8']


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


@settings(_SHARED_SERVER, max_examples=60)
@given(rows=st.lists(st.tuples(_VALUES.filter(bool), _VALUES), min_size=1, max_size=6,
                     unique_by=lambda r: r[0].rstrip("\x00")),  # one prediction per CPE
       version=_VALUES)
def test_tag_and_string_values_round_trip_through_influxd(
        influx_db: InfluxServer, rows: list[tuple[str, str]], version: str) -> None:
    """(c) Whatever ``cpe``/``cell`` tag and ``model_version`` string the writer accepts
    reads back exactly through the shipped reader; what it refuses is counted, not stored."""
    store = _store(influx_db)
    base = 1_600_000_000.0 + 1000.0 * next(_WINDOW)
    df = pd.DataFrame({"time_s": [base + i for i in range(len(rows))],
                       "cpe": [cpe for cpe, _ in rows], "wat": ["nr"] * len(rows),
                       "cell": [cell for _, cell in rows],
                       "delivered_mbps": [float(i) for i in range(len(rows))]})
    written = store.write_table(df)
    # (numpy str arrays drop trailing NULs: expect what the frame holds)
    frame = KpiFrame(time_s=base, cpe=np.array([cpe for cpe, _ in rows]),
                     wat=np.array(["nr"] * len(rows)), values={})
    store.write_forecasts(frame, CapacityForecast(np.arange(len(rows), dtype=float),
                                                  np.zeros(len(rows))), version)
    assert store.flush()
    assert store.counters.rejected_points == 0  # nothing we send is refused by influxd
    kpi_ok = [escape_tag(cpe) is not None and escape_tag(cell) is not None
              for cpe, cell in rows]
    pred_ok = [bool(escape_tag(cpe)) for cpe in frame.cpe.tolist()]  # ("": no identity)
    assert written == sum(kpi_ok)
    assert store.counters.refused_points == kpi_ok.count(False) + pred_ok.count(False)
    window = {"start": pd.Timestamp(base - 1, unit="s", tz="UTC").isoformat(),
              "stop": pd.Timestamp(base + 999, unit="s", tz="UTC").isoformat()}
    table = store.read_table(**window)
    got = {int(r.delivered_mbps): (r.cpe, r.cell) for r in table.itertuples()}
    assert got == {i: rows[i] for i in range(len(rows)) if kpi_ok[i]}
    pred = store.read_table(measurement="wat_prediction", **window)
    got_pred = {int(r.median_mbps): (r.cpe, r.model_version) for r in pred.itertuples()}
    assert got_pred == {i: (frame.cpe[i], version) for i in range(len(rows)) if pred_ok[i]}
    store.close()


# ------------------------------------------------------------------ reading external input
_FIELD_NAMES = st.sampled_from([*sorted(KPI_FIELDS)[:6], "time_s", "error", "cpe_x", "note"])
_FIELD_VALUES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: f"{i}i"),
    st.booleans().map(str),
    st.sampled_from(['"NaN"', '"inf"', '"-Infinity"', '"1e999"', '"12"', '""', '"x,y"',
                     '"\\"q\\""', "1e308", "-1e308", "5e-324"]),
    st.text(max_size=6).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'))
_TAG_BYTES = st.one_of(st.sampled_from([b"nr", b"wifi", b"lifi", b"\xff\xfe", b"\xc3", b"x\\,y"]),
                       st.text(alphabet="abc ,=\\", min_size=1, max_size=4).map(
                           lambda s: s.replace(" ", "\\ ").replace(",", "\\,")
                           .replace("=", "\\=").rstrip("\\").encode() or b"e"))
_DATABASES = itertools.count()


@st.composite
def _foreign_points(draw: st.DrawFn) -> bytes:
    now = time.time_ns()
    lines = []
    for i in range(draw(st.integers(1, 8))):
        tags = b""
        for key in (b"cpe", b"wat", b"cell"):
            if draw(st.booleans()) or (key != b"cell" and draw(st.integers(0, 9)) > 0):
                tags += b"," + key + b"=" + draw(_TAG_BYTES)
        fields = draw(st.dictionaries(_FIELD_NAMES, _FIELD_VALUES, min_size=1, max_size=4))
        body = ",".join(f"{k}={v}" for k, v in fields.items()).encode()
        lines.append(b"wat_kpi" + tags + b" " + body + f" {now - 10**9 * (i + 1)}".encode())
    return b"\n".join(lines)


@settings(_SHARED_SERVER, max_examples=60)
@given(batches=st.lists(_foreign_points(), min_size=1, max_size=3))
def test_intake_survives_whatever_another_writer_stored(influx_db: InfluxServer,
                                                        batches: list[bytes]) -> None:
    """KPIs read back are external input: strings in numeric fields, huge numbers, booleans,
    undecodable tags, a field named like a column of ours, missing tags.  A poll must skip
    and count what it cannot use and never raise."""
    server = influx_db.with_database(f"foreign{next(_DATABASES)}")
    for body in batches:
        _raw_write(server, body)  # some are refused (type conflicts): that is the point
    store = _store(server)
    intake = LatestKpis()
    reader = InfluxIntake(store, intake, lookback_s=60.0)
    rows = reader.poll_once()
    assert rows >= 0 and store.counters.parse_skipped >= 0
    frame = intake.latest(time.time(), max_age_s=120.0)
    for column in frame.values.values():
        finite = column[np.isfinite(column)]
        assert finite.size == 0 or np.abs(finite).max() < 1e300
    store.close()


def test_intake_reads_good_rows_next_to_garbage(influx_db: InfluxServer) -> None:
    t = time.time_ns() - 5 * 10**9
    for line in [f"wat_kpi,cpe=good,wat=nr delivered_mbps=100,rtt_ms=5 {t}".encode(),
                 # a string in a KPI field, a field named like our time column, one named
                 # like InfluxDB's error column
                 f'wat_kpi,cpe=text,wat=nr loss="high",time_s="later",error="x" {t + 1}'
                 .encode(),
                 f"wat_kpi,cpe=huge,wat=nr delivered_mbps=1e308 {t + 2}".encode(),
                 f"wat_kpi,wat=nr delivered_mbps=1 {t + 3}".encode(),  # no cpe
                 b"wat_kpi,cpe=\xff,wat=nr delivered_mbps=7 " + str(t + 4).encode()]:
        assert _raw_write(influx_db, line) == 204
    store = _store(influx_db)
    intake = LatestKpis()
    assert InfluxIntake(store, intake, lookback_s=60.0).poll_once() == 4
    frame = intake.latest(time.time(), max_age_s=120.0)
    mbps = dict(zip(frame.cpe.tolist(), frame.column("delivered_mbps").tolist(), strict=True))
    assert mbps["good"] == 100.0 and mbps["\ufffd"] == 7.0  # undecodable bytes replaced
    assert np.isnan(mbps.get("huge", np.nan)) and np.isnan(mbps.get("text", np.nan))
    assert store.counters.parse_skipped == 2  # the row without cpe, the text value
    assert store.counters.rejected_values == 1  # 1e308 Mbps
    store.close()


@pytest.mark.parametrize("status", [400, 413, 422, 429, 500, 503, 401, 404])
def test_status_policy(status: int) -> None:
    """Which answers are retried: the batch's fault (400, 413, 422) is not, the server's or
    the destination's is."""
    from xapp.adapters.influx import _transient

    assert _transient(status) is (status not in (400, 413, 422))
