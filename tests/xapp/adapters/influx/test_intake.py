"""The KPI intake from InfluxDB against a real influxd: each field from its newest point, only
other writers' points, polling with the control period, and whatever another writer stored read
without raising."""

from __future__ import annotations

import itertools
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.influxd import InfluxServer
from tests.xapp.adapters.influx.points import SHARED_SERVER, kpi_frame, open_store, raw_write
from xapp.adapters.influx.intake import InfluxIntake
from xapp.adapters.influx.store import InfluxConfig, InfluxStore
from xapp.core.forecast import KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.kpis import KPI_FIELDS


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


def test_the_intake_skips_what_its_own_replica_wrote(influx_db: InfluxServer) -> None:
    """Points a replica wrote reached its intake in-process; its InfluxDB intake reads only the
    others' (another replica's, or a writer that tags nothing)."""
    influx = influx_db
    now = time.time()
    mine = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, writer="xapp-0"))
    theirs = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, writer="xapp-1"))
    untagged = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket))
    mine.write_kpis(kpi_frame(now - 3, n=3))
    theirs.write_kpis(kpi_frame(now - 2, n=2))
    untagged.write_kpis(kpi_frame(now - 1, n=1))
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


@settings(SHARED_SERVER, max_examples=60)
@given(batches=st.lists(_foreign_points(), min_size=1, max_size=3))
def test_intake_survives_whatever_another_writer_stored(influx_db: InfluxServer,
                                                        batches: list[bytes]) -> None:
    """KPIs read back are external input: strings in numeric fields, huge numbers, booleans,
    undecodable tags, a field named like a column of ours, missing tags.  A poll must skip
    and count what it cannot use and never raise."""
    server = influx_db.with_database(f"foreign{next(_DATABASES)}")
    for body in batches:
        raw_write(server, body)  # some are refused (type conflicts): that is the point
    store = open_store(server)
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
        assert raw_write(influx_db, line) == 204
    store = open_store(influx_db)
    intake = LatestKpis()
    assert InfluxIntake(store, intake, lookback_s=60.0).poll_once() == 4
    frame = intake.latest(time.time(), max_age_s=120.0)
    mbps = dict(zip(frame.cpe.tolist(), frame.column("delivered_mbps").tolist(), strict=True))
    assert mbps["good"] == 100.0 and mbps["\ufffd"] == 7.0  # undecodable bytes replaced
    assert np.isnan(mbps.get("huge", np.nan)) and np.isnan(mbps.get("text", np.nan))
    assert store.counters.parse_skipped == 2  # the row without cpe, the text value
    assert store.counters.rejected_values == 1  # 1e308 Mbps
    store.close()
