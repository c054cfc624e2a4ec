"""KPM measurements -> wat_kpi fields per direction, per-UE and cell-level, against the registry."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xapp.adapters.e2.mapping import (
    CELL_COLUMN,
    DEFAULT_MAP,
    MeasurementMapError,
    map_indication,
    report_values,
    rules_table,
)
from xapp.adapters.e2.records import KpmIndication, KpmReport, UeId
from xapp.adapters.e2.registry import CpeRegistry
from xapp.core.forecast import KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.kpis import KPI_FIELDS, cell_code

CELL = "00f110-00000000a"
OTHER = "00f110-00000000b"


def registry() -> CpeRegistry:
    reg = CpeRegistry()
    reg.add("cpe-1", ["crnti:1"], CELL)
    reg.add("cpe-2", ["ranue:00000000000000a2"], CELL)
    reg.add("cpe-3", ["f1ap:3"], CELL)  # in the cell, never reported per UE below
    reg.add("cpe-9", ["crnti:9"], OTHER)
    return reg


def indication(*reports: KpmReport, fmt: int = 3) -> KpmIndication:
    return KpmIndication(kpm_version=3, format=fmt, collect_start_ms=None, granularity_ms=1000,
                         sender_name=None, reports=reports)


def rows(frame: KpiFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(cpe, direction) -> the finite values of that row."""
    assert frame.direction is not None
    out: dict[tuple[str, str], dict[str, float]] = {}
    for i in range(len(frame)):
        out[(str(frame.cpe[i]), str(frame.direction[i]))] = {
            k: round(float(v[i]), 9) for k, v in frame.values.items()
            if k != CELL_COLUMN and math.isfinite(v[i])}
    return out


@pytest.mark.parametrize(("values", "expected"), [
    ({"DRB.UEThpDl": 250_000.0}, {("delivered_mbps", "dl"): 250.0}),
    ({"DRB.UEThpUl": 1_500.0}, {("delivered_mbps", "ul"): 1.5}),
    ({"RRU.PrbUsedDl": 50.0, "RRU.PrbAvailDl": 200.0}, {("prb_util", "dl"): 0.25}),
    ({"RRU.PrbUsedUl": 10.0, "RRU.PrbAvailUl": 40.0}, {("prb_util", "ul"): 0.25}),
    ({"RRU.PrbTotDl": 40.0}, {("prb_util", "dl"): 0.4}),
    # The PRB ratio wins over the node's own percentage.
    ({"RRU.PrbTotDl": 40.0, "RRU.PrbUsedDl": 1.0, "RRU.PrbAvailDl": 4.0},
     {("prb_util", "dl"): 0.25}),
    ({"RRU.PrbUsedDl": 5.0, "RRU.PrbAvailDl": 0.0}, {}),  # no available PRBs: no ratio
    ({"RRU.PrbUsedDl": 5.0}, {}),
    ({"TB.ErrTotalNbrDl": 3.0, "TB.TotNbrDl": 300.0}, {("bler", "dl"): 0.01}),
    ({"TB.ErrTotalNbrUl": 1.0, "TB.TotNbrUl": 10.0}, {("bler", "ul"): 0.1}),
    ({"L1M.SS-RSRP": -95.0, "L1M.SS-SINR": 12.5, "L1M.SS-RSRQ": -11.0},
     {("rsrp_dbm", ""): -95.0, ("sinr_db", ""): 12.5, ("rsrq_db", ""): -11.0}),
    ({"CARR.WBCQIDist.Bin10": 1.0, "CARR.WBCQIDist.Bin12.Bin1.Bin0": 3.0},
     {("cqi", ""): 11.5}),
    ({"CARR.PDSCHMCSDist.Bin20": 2.0, "CARR.PDSCHMCSDist.Bin26": 2.0,
      "CARR.PUSCHMCSDist.Bin5": 1.0}, {("mcs", "dl"): 23.0, ("mcs", "ul"): 5.0}),
    ({"CARR.WBCQI": 9.0, "CARR.PDSCHMCS": 17.0}, {("cqi", ""): 9.0, ("mcs", "dl"): 17.0}),
    ({"DRB.UEThpDl": float("nan")}, {}),
])
def test_table_per_ue(values: dict[str, float], expected: dict[tuple[str, str], float]) -> None:
    got, unknown = report_values(values, DEFAULT_MAP, cell_level=False)
    assert unknown == 0
    assert got == pytest.approx(expected)


def test_cell_level_gives_load_only() -> None:
    values = {"DRB.UEThpDl": 900_000.0, "L1M.SS-SINR": 20.0, "RRU.PrbTotUl": 30.0,
              "RRU.PrbUsedDl": 50.0, "RRU.PrbAvailDl": 100.0, "TB.ErrTotalNbrDl": 1.0,
              "TB.TotNbrDl": 10.0, "CARR.WBCQIDist.Bin7": 4.0}
    got, _ = report_values(values, DEFAULT_MAP, cell_level=True)
    assert got == pytest.approx({("prb_util", "dl"): 0.5, ("prb_util", "ul"): 0.3})


def test_unknown_names_are_counted() -> None:
    got, unknown = report_values({"id:3": 1.0, "Vendor.Thing": 2.0, "DRB.UEThpDl": 1000.0},
                                 DEFAULT_MAP, cell_level=False)
    assert unknown == 2 and got == {("delivered_mbps", "dl"): 1.0}


def test_per_ue_and_cell_level_in_one_indication() -> None:
    ind = indication(
        KpmReport({"DRB.UEThpDl": 120_000.0, "DRB.UEThpUl": 8_000.0, "L1M.SS-SINR": 14.0,
                   "RRU.PrbTotDl": 10.0}, ue=UeId(c_rnti=1)),
        KpmReport({"DRB.UEThpDl": 30_000.0}, ue=UeId(ran_ue_id="00000000000000A2")),
        KpmReport({"DRB.UEThpDl": 1.0}, ue=UeId(c_rnti=77)),  # no registry entry
        KpmReport({"DRB.UEThpDl": 1.0}, ue=UeId()),  # no id at all
        KpmReport({"RRU.PrbTotDl": 60.0, "DRB.UEThpDl": 5e6}, cell=CELL),
        KpmReport({"RRU.PrbTotDl": 60.0}, cell="00f110-00000000f"),  # nobody there
    )
    frame, counts = map_indication(ind, registry(), time_s=100.0)
    assert frame is not None
    assert rows(frame) == {
        ("cpe-1", "dl"): {"delivered_mbps": 120.0, "prb_util": 0.1},
        ("cpe-1", "ul"): {"delivered_mbps": 8.0},
        ("cpe-1", ""): {"sinr_db": 14.0},
        ("cpe-2", "dl"): {"delivered_mbps": 30.0},
        # Only cpe-3 had no per-UE report: it gets the cell's load, never its throughput.
        ("cpe-3", "dl"): {"prb_util": 0.6},
    }
    assert set(frame.wat.tolist()) == {"nr"} and frame.time_s == 100.0
    assert np.all(frame.values[CELL_COLUMN] == cell_code(CELL))
    assert counts.as_dict() == {
        "ue_reports": 4, "ue_mapped": 2, "ue_unmapped": 1, "ue_without_id": 1,
        "cell_reports": 2, "cell_unknown": 1, "cell_without_cell": 0, "cell_cpes": 1,
        "unknown_names": 0, "values_out_of_range": 0, "rows": 5}


def test_cell_report_without_a_cell_uses_the_subscription_cell() -> None:
    ind = indication(KpmReport({"RRU.PrbTotDl": 20.0}), fmt=1)
    frame, counts = map_indication(ind, registry(), time_s=1.0)
    assert frame is None and counts.cell_without_cell == 1
    frame, counts = map_indication(ind, registry(), time_s=1.0, default_cell=OTHER)
    assert frame is not None and rows(frame) == {("cpe-9", "dl"): {"prb_util": 0.2}}


def test_out_of_range_values_are_dropped_and_counted() -> None:
    ind = indication(KpmReport({"DRB.UEThpDl": -5.0, "L1M.SS-SINR": 99.0, "DRB.UEThpUl": 1e3},
                               ue=UeId(c_rnti=1)))
    frame, counts = map_indication(ind, registry(), time_s=1.0)
    assert frame is not None and counts.values_out_of_range == 2
    assert rows(frame) == {("cpe-1", "ul"): {"delivered_mbps": 1.0}, ("cpe-1", "dl"): {},
                           ("cpe-1", ""): {}}


def test_nothing_mapped_is_none() -> None:
    frame, counts = map_indication(indication(KpmReport({"DRB.UEThpDl": 1.0},
                                                        ue=UeId(c_rnti=5))),
                                   registry(), time_s=1.0)
    assert frame is None and counts.ue_unmapped == 1


def test_frame_goes_into_the_intake_per_direction() -> None:
    ind = indication(KpmReport({"DRB.UEThpDl": 50_000.0, "L1M.SS-RSRP": -90.0},
                               ue=UeId(c_rnti=1)))
    frame, _ = map_indication(ind, registry(), time_s=10.0)
    assert frame is not None
    intake = LatestKpis()
    intake.update(frame)
    snap = intake.latest(10.0, 60.0)
    assert snap.direction is not None
    got = {(str(c), str(d)): (float(snap.column("delivered_mbps")[i]),
                              float(snap.column("rsrp_dbm")[i]))
           for i, (c, d) in enumerate(zip(snap.cpe, snap.direction, strict=True))}
    # The link's RSRP reaches both directions' rows; the throughput only the downlink's.
    assert got[("cpe-1", "dl")] == (50.0, -90.0)
    assert math.isnan(got[("cpe-1", "ul")][0]) and got[("cpe-1", "ul")][1] == -90.0


def test_vendor_table_extends_and_is_validated() -> None:
    names = DEFAULT_MAP.extended({"ACME.DlThpMbps": {"field": "delivered_mbps",
                                                     "direction": "dl"},
                                  "ACME.Load": {"field": "prb_util", "direction": "ul",
                                                "scale": 0.001, "cell_level": True}})
    got, unknown = report_values({"ACME.DlThpMbps": 42.0, "ACME.Load": 500.0}, names,
                                 cell_level=False)
    assert unknown == 0 and got == pytest.approx({("delivered_mbps", "dl"): 42.0,
                                                  ("prb_util", "ul"): 0.5})
    assert "ACME.Load" in names.names() and "DRB.UEThpDl" in names.names()
    assert DEFAULT_MAP.known("RRU.PrbAvailDl") and not DEFAULT_MAP.known("ACME.Load")
    assert any(r["measurement"] == "DRB.UEThpDl" for r in rules_table(names))


@pytest.mark.parametrize(("vendor", "message"), [
    ({"X": {"field": "throughput", "direction": "dl"}}, "not a wat_kpi field"),
    ({"X": {"field": "prb_util", "direction": "down"}}, "direction"),
    ({"X": {"field": "prb_util", "scale": "1"}}, "scale"),
    ({"X": {"field": "prb_util", "scale": 0}}, "non-zero"),
    ({"X": {"field": "prb_util", "cell_level": 1}}, "cell_level"),
    ({"X": {"field": "prb_util", "extra": 1}}, "unknown keys"),
    ({"bad name": {"field": "prb_util"}}, "measurement name"),
    ({"X": 3}, "object"),
])
def test_vendor_table_errors(vendor: dict[str, object], message: str) -> None:
    with pytest.raises(MeasurementMapError, match=message):
        DEFAULT_MAP.extended(vendor)


_names = st.sampled_from([*sorted(DEFAULT_MAP.names()), "CARR.WBCQIDist.Bin3",
                          "CARR.PDSCHMCSDist.Bin999x", "id:7", "Vendor.X"])
_value = st.floats(allow_nan=True, allow_infinity=True)
_ue = st.builds(UeId, c_rnti=st.sampled_from([1, 9, 77, None]),
                ran_ue_id=st.sampled_from(["00000000000000a2", None]))
_report = st.builds(KpmReport, values=st.dictionaries(_names, _value, max_size=8),
                    ue=st.one_of(st.none(), _ue),
                    cell=st.sampled_from([None, CELL, OTHER, "00F110-00000000A"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_report, max_size=12), st.sampled_from([None, CELL]))
def test_mapping_never_raises_and_keeps_units_and_directions(
        reports: list[KpmReport], default_cell: str | None) -> None:
    reg = registry()
    frame, counts = map_indication(indication(*reports), reg, time_s=5.0,
                                   default_cell=default_cell)
    assert counts.ue_reports + counts.cell_reports == len(reports)
    if frame is None:
        return
    assert set(frame.wat.tolist()) == {"nr"} and frame.direction is not None
    assert set(frame.direction.tolist()) <= {"dl", "ul", ""}
    assert len(set(zip(frame.cpe.tolist(), frame.direction.tolist(), strict=True))) == len(frame)
    for name, col in frame.values.items():
        assert name in KPI_FIELDS or name == CELL_COLUMN
        assert not np.isinf(col).any()
    for i in range(len(frame)):
        if frame.direction[i] == "":  # link rows carry only link fields
            assert all(math.isnan(frame.values[f][i]) for f in ("delivered_mbps", "prb_util")
                       if f in frame.values)
    # A CPE reported per UE never takes a cell's value; a cell-only CPE only takes load.
    per_ue = {reg.cpe_for_keys(r.ue.keys()) for r in reports if r.ue is not None}
    for i in range(len(frame)):
        if str(frame.cpe[i]) not in per_ue:
            got = {k for k, v in frame.values.items()
                   if k != CELL_COLUMN and math.isfinite(v[i])}
            assert got <= {"prb_util"}
