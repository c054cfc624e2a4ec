"""Line protocol: tag and string values written so that InfluxDB reads back exactly what was
written (or refused, counted), checked against a real influxd; names and values that look like
format directives are text."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.influxd import InfluxServer
from tests.xapp.adapters.influx.points import SHARED_SERVER, open_store
from xapp.adapters.influx.line_protocol import column_lines, escape_tag
from xapp.core.forecast import CapacityForecast, KpiFrame

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


@settings(SHARED_SERVER, max_examples=60)
@given(rows=st.lists(st.tuples(_VALUES.filter(bool), _VALUES), min_size=1, max_size=6,
                     unique_by=lambda r: r[0].rstrip("\x00")),  # one prediction per CPE
       version=_VALUES)
def test_tag_and_string_values_round_trip_through_influxd(
        influx_db: InfluxServer, rows: list[tuple[str, str]], version: str) -> None:
    """(c) Whatever ``cpe``/``cell`` tag and ``model_version`` string the writer accepts
    reads back exactly through the shipped reader; what it refuses is counted, not stored."""
    store = open_store(influx_db)
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
