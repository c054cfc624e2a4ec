"""Path traces of the real-stack bench: built-in scenarios, the operator's CSV, the twin's view."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from twin.path_traces import (
    SCENARIOS,
    TRANSPORT_EFFICIENCY,
    Outage,
    PathTrace,
    TraceError,
    build,
    load_csv,
    parse_csv,
    predict,
    to_csv,
)
from twin.transport import Stack, deliver


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_is_playable_reproducible_and_survives_its_csv(name: str) -> None:
    a, b = build(name, 20, seed=3), build(name, 20, seed=3)
    assert a.periods == 20 and np.array_equal(a.rate_dl, b.rate_dl) and a.outages == b.outages
    # What two cores carry through three namespaces both ways.
    assert a.rate_dl.sum(axis=1).max() <= 100 and a.rate_ul.sum(axis=1).max() <= 100
    again = parse_csv(to_csv(a).splitlines(), name)
    for f in ("rate_dl", "rate_ul", "delay_ms", "loss_pct", "buffer_ms"):
        np.testing.assert_allclose(getattr(again, f), getattr(a, f), rtol=1e-5)
    def key(o: Outage) -> tuple[float, str, str]:
        return round(o.start_s, 3), o.wat, o.mode

    assert sorted(map(key, again.outages)) == sorted(map(key, a.outages))
    np.testing.assert_allclose(again.available(), a.available(), atol=1e-3)
    assert set(again.radio) == set(a.radio)


def test_the_scenarios_the_issue_asks_for() -> None:
    assert {"wifi-walk", "lifi-blockage", "nr-lte-handover", "wifi-backhaul", "lossy",
            "paper-static"} <= set(SCENARIOS)
    blockage = build("lifi-blockage", 60)
    cuts = [o.duration_s for o in blockage.outages]
    assert len(cuts) >= 5 and all(0.5 <= d <= 3.0 for d in cuts)
    assert {o.mode for o in blockage.outages} == {"down"}
    handover = build("nr-lte-handover", 60)
    assert handover.wats == ("nr", "lte")
    assert all(0.05 <= o.duration_s <= 0.1 and o.mode == "drop" for o in handover.outages)
    backhaul = build("wifi-backhaul")
    j = backhaul.wats.index("wifi")
    assert backhaul.rate_dl[:, j].max() == 8 and backhaul.radio["snr_db"][:, j].min() >= 40
    lossy = build("lossy")
    assert 1 <= lossy.loss_pct.max() <= 3


def test_outages_take_their_share_of_each_period() -> None:
    t = PathTrace("t", 1.0, ("nr", "wifi"), np.full((4, 2), 10.0), np.full((4, 2), 10.0),
                  np.zeros((4, 2)), np.zeros((4, 2)), np.full((4, 2), 50.0),
                  (Outage("wifi", 0.5, 2.0), Outage("nr", 3.9, 0.1)))
    np.testing.assert_allclose(t.available(), np.array([[1, 0.5], [1, 0], [1, 0.5], [0.9, 1]]))
    # The twin: the fluid share of each period through the transport layer (a cut costs more
    # than its own time: tests/twin/test_transport.py), as data of the frames.
    ones, uncapped = np.ones((4, 2), np.int64), np.full((4, 2), np.inf)
    per = deliver(t, "dl", ones, uncapped, Stack())
    assert per[1, 1] == 0.0
    assert predict(t, "dl") == pytest.approx(per.sum() * TRANSPORT_EFFICIENCY / (39.0 + 20.0))
    assert predict(t, "dl") < TRANSPORT_EFFICIENCY
    # wifi capped at 2 of its 10 Mbit/s: it carries at most 2 while it is up.
    caps = np.array([[np.inf, 2.0]] * 4)
    capped = deliver(t, "dl", ones, caps, Stack())
    assert capped[:, 1].max() <= 2.0 and capped.sum() < per.sum()


@pytest.mark.parametrize(("text", "says"), [
    ("t_s,rate_mbit\n0,1\n", "lacks the columns ['wat']"),
    ("t_s,wat,rate_mbit\n0,wimax,1\n", "unknown WATs ['wimax']"),
    ("t_s,wat,rate_mbit\n0,nr,fast\n", "rate_mbit='fast' is not a number"),
    ("t_s,wat,rate_mbit\n0,nr,1\n2,nr,1\n1,nr,1\n5,nr,1\n", "step by one period"),
    ("t_s,wat,rate_mbit\n0,nr,1\n0,wifi,2\n1,nr,1\n", "no row for t_s=1.0, wat=wifi"),
    ("t_s,wat,rate_mbit\n0,nr,1\n0,nr,2\n", "a second row"),
    ("t_s,wat,rate_mbit\n0,nr,5000\n", "within [0.1, 1000.0]"),
    ("t_s,wat,rate_mbit,loss_pct\n0,nr,5,101\n", "loss_pct must be"),
    ("t_s,wat,rate_mbit,speed\n0,nr,5\n", "unknown columns ['speed']"),
    ("t_s,wat,rate_mbit,outage_ms,outage_mode\n0,nr,5,100,melt\n", "mode not in"),
    ("t_s,wat,rate_mbit\n", "no rows"),
])
def test_a_bad_csv_is_refused_with_a_clear_error(text: str, says: str) -> None:
    with pytest.raises(TraceError, match=None) as err:
        parse_csv(text.splitlines(), "site")
    assert says in str(err.value)


def test_an_operators_csv_with_defaults_and_radio_kpis(tmp_path: Path) -> None:
    f = tmp_path / "site.csv"
    f.write_text("t_s,wat,rate_mbit,ul_rate_mbit,outage_start_s,outage_ms,sinr_db\n"
                 "0,nr,20,10,,,18\n0,wifi,30,,0.25,500,\n"
                 "1,nr,22,11,,,17\n1,wifi,30,,,,\n")
    t = load_csv(f)
    assert t.name == "site" and t.wats == ("nr", "wifi") and t.period_s == 1.0
    np.testing.assert_allclose(t.rate_ul, [[10, 30], [11, 30]])  # ul defaults to the dl rate
    assert t.outages == (Outage("wifi", 0.25, 0.5, "drop"),)
    assert np.isnan(t.radio["sinr_db"][:, 1]).all() and t.radio["sinr_db"][0, 0] == 18
    np.testing.assert_allclose(t.buffer_ms, 50.0)
    np.testing.assert_allclose(t.capacity("dl").sum(), 20 + 22 + 15 + 30)
