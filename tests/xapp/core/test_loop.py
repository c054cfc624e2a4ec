"""The control loop against in-memory fakes of its interfaces."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.polling import wait_until
from xapp.adapters.lab import FileKpiSource, MemoryPublisher
from xapp.adapters.mqtt.payloads import check
from xapp.adapters.sdl import SdlStateStore
from xapp.app.metrics import Metrics
from xapp.app.runner import LoopRunner
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.loop import ControlLoop, LoopSettings
from xapp.core.policy import Policy
from xapp.core.policy_book import PolicyBook, PolicyInstance
from xapp.core.ports import Published, PublishResult, WeightBatch
from xapp.core.weights import WatState, decide

DEFAULTS = {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
            "capacity_floor_mbps": 1.0}


class FakeKpis:
    """Capacities per (cpe, wat) set by the test; the frame carries them as delivered_mbps."""

    def __init__(self) -> None:
        self.cap: dict[tuple[str, str], float] = {}
        self.rtt: dict[tuple[str, str], float] = {}

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        keys = sorted(self.cap)
        return KpiFrame(time_s=now_s, cpe=np.array([k[0] for k in keys], dtype=np.str_),
                        wat=np.array([k[1] for k in keys], dtype=np.str_),
                        values={"delivered_mbps": np.array([self.cap[k] for k in keys]),
                                "rtt_ms": np.array([self.rtt.get(k, np.nan) for k in keys])})


class Oracle:
    """Forecasts exactly the delivered throughput; lower bound 90 % of it."""

    def step(self, frame: KpiFrame) -> CapacityForecast:
        d = frame.column("delivered_mbps")
        return CapacityForecast(median_mbps=d, lower_mbps=d * 0.9)


class FakePublisher:
    def __init__(self) -> None:
        #: (cpe_id, ul weights, ul mode, version) per message; sent_dl the same for dl.
        self.sent: list[tuple[str, dict[str, int], str, int]] = []
        self.sent_dl: list[tuple[str, dict[str, int], str, int]] = []
        self.version: dict[str, int] = {}
        self.fail = False

    def publish_many(self, batch: WeightBatch) -> PublishResult:
        if self.fail:
            raise ConnectionError("broker away")
        result = PublishResult()
        for i, cpe_id in enumerate(batch.cpe_ids):
            v = self.version[cpe_id] = self.version.get(cpe_id, 0) + 1
            self.sent.append((cpe_id, dict(batch.decision(i, "ul").weights), batch.ul.modes[i],
                              v))
            self.sent_dl.append((cpe_id, dict(batch.decision(i, "dl").weights),
                                 batch.dl.modes[i], v))
            result.versions[cpe_id] = v
        return result

    def last(self, cpe_id: str) -> dict[str, int]:
        return [s for s in self.sent if s[0] == cpe_id][-1][1]


class FakeSink:
    def __init__(self) -> None:
        self.forecasts: list[str] = []
        self.forecast_rows: list[list[tuple[str, str, str]]] = []
        self.weights: list[dict[str, int]] = []

    def write_kpis(self, frame: KpiFrame) -> None:
        pass

    def write_forecasts(self, frame: KpiFrame, forecast: CapacityForecast,
                        model_version: str) -> None:
        assert len(forecast.median_mbps) == len(forecast.lower_mbps) == len(frame)
        self.forecasts.append(model_version)
        direction = frame.direction if frame.direction is not None else [""] * len(frame)
        self.forecast_rows.append(list(zip(frame.cpe.tolist(), frame.wat.tolist(),
                                           list(direction), strict=True)))

    def write_weights(self, published: Published) -> None:
        self.weights.append(dict(zip(published.batch.cpe_ids, published.versions.tolist(),
                                     strict=True)))


def make(lease_s: float = 30.0) -> tuple[ControlLoop, FakeKpis, FakePublisher, FakeSink,
                                          PolicyBook, SdlStateStore, Metrics]:
    kpis, pub, sink = FakeKpis(), FakePublisher(), FakeSink()
    book, state, metrics = PolicyBook(DEFAULTS), SdlStateStore(), Metrics()
    loop = ControlLoop(kpis, Oracle(), pub, sink, book.resolver, state,
                       model_version=lambda: "m-1", on_tick=metrics.record_tick,
                       settings=LoopSettings(control_period_s=1.0, lease_s=lease_s,
                                             forecast_history_s=0.0))
    return loop, kpis, pub, sink, book, state, metrics


def paper(kpis: FakeKpis, cpe: str = "cpe-1") -> None:
    """The WRR paper's capacities: 5G 342, Wi-Fi 1190, LiFi 12 Mbps."""
    kpis.cap.update({(cpe, "nr"): 342.0, (cpe, "wifi"): 1190.0, (cpe, "lifi"): 12.0})


def test_weights_follow_capacities_and_are_published_once() -> None:
    loop, kpis, pub, sink, _, state, metrics = make()
    paper(kpis)
    r = loop.tick(100.0)
    assert r.cpes == 1 and r.published == {"cpe-1": 1}
    w = pub.last("cpe-1")
    # Exactly the engine's answer for the conservative (lower) forecasts under the defaults.
    expected = decide({"nr": WatState(342.0, 342.0 * 0.9), "wifi": WatState(1190.0, 1071.0),
                       "lifi": WatState(12.0, 12.0 * 0.9)}, Policy.from_dict(DEFAULTS))
    assert w == expected.weights
    assert w["wifi"] > w["nr"] > w["lifi"] >= 1
    assert state.cpe("cpe-1") is not None and state.cpe("cpe-1").version == 1  # type: ignore[union-attr]
    assert sink.forecasts == ["m-1"] and sink.weights == [{"cpe-1": 1}]
    assert state.model_version == "m-1"
    # Nothing changed: no new message until half the lease has passed.
    for t in (101.0, 102.0, 110.0):
        assert loop.tick(t).published == {}
    assert loop.tick(115.0).published == {"cpe-1": 2}
    assert metrics.ticks._value.get() == 5


def test_each_cpes_forecasts_are_written_once_per_forecast_history() -> None:
    loop, kpis, _, sink, _, _, _ = make()
    cpes = [f"cpe-{i:03d}" for i in range(200)]
    for c in cpes:
        paper(kpis, c)
    loop.settings = LoopSettings(control_period_s=1.0, forecast_history_s=5.0)
    for t in range(100, 110):
        loop.tick(float(t))
    rows = [r for tick in sink.forecast_rows for r in tick]
    every_row = {(c, w, d) for c in cpes for w in ("nr", "wifi", "lifi") for d in ("dl", "ul")}
    # Ten ticks at one in five: every (CPE, WAT, direction) twice, a CPE's rows together.
    assert sorted(rows) == sorted(list(every_row) * 2)
    per_tick = [len({c for c, _, _ in tick}) for tick in sink.forecast_rows]
    assert sum(per_tick) == 2 * len(cpes) and max(per_tick) < 0.35 * len(cpes), per_tick
    # At most one period: every tick's, as before.
    sink.forecast_rows.clear()
    loop.settings = LoopSettings(control_period_s=1.0, forecast_history_s=1.0)
    loop.tick(110.0)
    assert sorted(sink.forecast_rows[0]) == sorted(every_row)


def test_hysteresis_holds_small_changes_and_follows_big_ones() -> None:
    loop, kpis, pub, _, _, _, _ = make()
    paper(kpis)
    loop.tick(100.0)
    first = pub.last("cpe-1")
    kpis.cap[("cpe-1", "nr")] = 345.0   # < 2 % better aggregate: held
    r = loop.tick(101.0)
    # Rows without a direction apply to both: one decision per direction.
    assert r.held == 2 and r.published == {}
    kpis.cap[("cpe-1", "nr")] = 1190.0  # much better with new weights
    r = loop.tick(102.0)
    assert r.changed == 2 and pub.last("cpe-1") != first


def test_policy_scope_and_change_apply_at_the_next_tick() -> None:
    loop, kpis, pub, _, book, state, _ = make()
    paper(kpis, "cpe-1")
    paper(kpis, "cpe-2")
    loop.tick(100.0)
    book.put(PolicyInstance("no-wifi", {"excluded_wats": ["wifi"]}, frozenset({"cpe-2"}), 1.0))
    r = loop.tick(101.0)
    assert set(r.published) == {"cpe-2"}
    assert pub.last("cpe-2")["wifi"] == 0 and pub.last("cpe-1")["wifi"] > 0
    assert state.cpe("cpe-2").ul.policy_source == "no-wifi"  # type: ignore[union-attr]
    assert state.cpe("cpe-2").dl.policy_source == "no-wifi"  # type: ignore[union-attr]


def test_update_period_of_the_policy_spaces_decisions() -> None:
    loop, kpis, _, _, book, _, _ = make()
    book.put(PolicyInstance("slow", {"update_period_s": 5.0}, frozenset(), 1.0))
    paper(kpis)
    loop.tick(100.0)
    kpis.cap[("cpe-1", "nr")] = 1190.0
    assert loop.tick(101.0).decided == 0
    assert loop.tick(104.0).decided == 0
    r = loop.tick(104.6)  # within half a control period of 5 s
    assert r.decided == 2 and r.changed == 2


def test_no_usable_wat_keeps_previous_weights_and_counts_it() -> None:
    loop, kpis, pub, _, book, _, metrics = make()
    paper(kpis)
    loop.tick(100.0)
    before = pub.last("cpe-1")
    # Every WAT below the capacity floor: nothing usable.
    book.set_default({**DEFAULTS, "capacity_floor_mbps": 5000.0})
    r = loop.tick(101.0)
    assert r.no_usable == 2 and r.published == {}
    assert metrics.decisions.labels(result="no_usable_wat")._value.get() == 2
    # The previous weights keep their lease.
    r = loop.tick(116.0)
    assert r.published == {"cpe-1": 2} and pub.last("cpe-1") == before


def test_failed_publish_is_retried_next_tick() -> None:
    loop, kpis, pub, _, _, state, metrics = make()
    paper(kpis)
    pub.fail = True
    r = loop.tick(100.0)
    assert r.publish_errors == 1 and state.cpe("cpe-1") is None
    pub.fail = False
    r = loop.tick(101.0)
    assert r.published == {"cpe-1": 1}
    assert metrics.publishes.labels(result="error")._value.get() == 1


def test_bad_rows_are_skipped_and_counted() -> None:
    loop, kpis, pub, _, _, _, metrics = make()
    paper(kpis)
    kpis.cap[("cpe-1", "smoke-signals")] = 1.0
    kpis.cap[("cpe-1", "lte")] = float("nan")
    r = loop.tick(100.0)
    assert r.skipped_rows == {"unknown_wat": 2, "no_forecast": 2}  # a row per direction
    # A WAT with no forecast is tried at the CPE's smallest forecast (LiFi's), so it is
    # measured rather than locked out: a small share, like LiFi's.
    w = pub.last("cpe-1")
    assert 1 <= w["lte"] <= w["lifi"] + 1 and w["wifi"] > w["nr"] > w["lte"]
    assert metrics.kpi_rows_skipped.labels(reason="unknown_wat")._value.get() == 2


def test_restart_restores_hysteresis_from_state() -> None:
    loop, kpis, pub, _, book, state, _ = make()
    paper(kpis)
    loop.tick(100.0)
    # A new loop over the same state (what a restart with SDL looks like).
    loop2 = ControlLoop(kpis, Oracle(), pub, None, book.resolver, state)
    kpis.cap[("cpe-1", "nr")] = 345.0
    r = loop2.tick(101.0)
    assert r.held == 2 and r.published == {}


def test_empty_frame_and_runner_ticks_until_stopped() -> None:
    loop, kpis, pub, _, _, _, _ = make()
    assert loop.tick(1.0).rows == 0
    loop.settings = replace(loop.settings, control_period_s=0.02)
    paper(kpis)
    runner = LoopRunner(loop)
    runner.start()
    try:
        assert wait_until(lambda: len(pub.sent) > 0, 5, 0.01)
    finally:
        assert runner.stop(timeout_s=5)
    assert loop.last_tick_monotonic is not None


def test_misaligned_estimator_is_an_error() -> None:
    class Broken:
        def step(self, frame: KpiFrame) -> CapacityForecast:
            return CapacityForecast(np.zeros(1), np.zeros(1))

    kpis = FakeKpis()
    paper(kpis)
    loop = ControlLoop(kpis, Broken(), FakePublisher(), None, PolicyBook().resolver,
                       SdlStateStore())
    with pytest.raises(ValueError, match="aligned"):
        loop.tick(1.0)


# --- both directions -------------------------------------------------------------------------

def directed(rows: dict[tuple[str, str, str], float], t: float = 100.0,
             **extra: dict[tuple[str, str, str], float]) -> KpiFrame:
    """A frame of rows keyed (cpe, wat, direction); "" applies to both directions."""
    keys = sorted(rows)
    values = {"delivered_mbps": np.array([rows[k] for k in keys])}
    for name, col in extra.items():
        values[name] = np.array([col.get(k, np.nan) for k in keys])
    return KpiFrame(time_s=t, cpe=np.array([k[0] for k in keys], dtype=np.str_),
                    wat=np.array([k[1] for k in keys], dtype=np.str_), values=values,
                    direction=np.array([k[2] for k in keys], dtype="<U2"))


def directed_loop(defaults: dict[str, object] | None = None
                  ) -> tuple[ControlLoop, LatestKpis, MemoryPublisher, PolicyBook, SdlStateStore]:
    intake, pub = LatestKpis(), MemoryPublisher(clock=lambda: 100.0)
    book, state = PolicyBook(defaults or DEFAULTS), SdlStateStore()
    loop = ControlLoop(intake, Oracle(), pub, None, book.resolver, state,
                       settings=LoopSettings(control_period_s=1.0, kpi_max_age_s=5.0))
    return loop, intake, pub, book, state


def valid(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for doc in docs:
        check("weights", doc)
    return docs


def test_intake_expands_rows_without_a_direction() -> None:
    intake = LatestKpis()
    radio = KpiFrame(time_s=10.0, cpe=np.array(["c1", "c1"]), wat=np.array(["nr", "wifi"]),
                     values={"sinr_db": np.array([12.0, np.nan]),
                             "rssi_dbm": np.array([np.nan, -60.0])})
    intake.update(radio)
    intake.update(directed({("c1", "nr", "dl"): 300.0, ("c1", "nr", "ul"): 80.0,
                            ("c1", "wifi", "ul"): 20.0}, t=11.0))
    f = intake.latest(11.0, 5.0)
    rows = {(c, w, d): i for i, (c, w, d) in enumerate(
        zip(f.cpe.tolist(), f.wat.tolist(), f.direction.tolist(), strict=True))}  # type: ignore[union-attr]
    assert set(rows) == {("c1", w, d) for w in ("nr", "wifi") for d in ("dl", "ul")}
    sinr, mbps = f.column("sinr_db"), f.column("delivered_mbps")
    # The radio KPI is the link's: in both directions' rows; throughput only in its own.
    assert sinr[rows["c1", "nr", "dl"]] == sinr[rows["c1", "nr", "ul"]] == 12.0
    assert f.column("rssi_dbm")[rows["c1", "wifi", "dl"]] == -60.0
    assert mbps[rows["c1", "nr", "dl"]] == 300.0 and mbps[rows["c1", "nr", "ul"]] == 80.0
    assert np.isnan(mbps[rows["c1", "wifi", "dl"]])
    assert list(f.series[[rows["c1", "nr", "dl"]]]) == ["c1/dl"]
    # While the rows stay, a snapshot reuses the same key arrays (per-row state downstream).
    g = intake.latest(12.0, 5.0)
    assert g.cpe is f.cpe and g.direction is f.direction and g.series is f.series
    # Rows age out per (cpe, wat, direction): only the one refreshed stays.
    intake.update(directed({("c1", "nr", "ul"): 81.0}, t=16.5))
    h = intake.latest(16.5, 5.0)
    assert (h.cpe.tolist(), h.wat.tolist(), h.direction.tolist()) == (  # type: ignore[union-attr]
        ["c1"], ["nr"], ["ul"])


def test_the_loop_decides_each_direction_on_its_own() -> None:
    loop, intake, pub, _, state = directed_loop()
    # Downlink: Wi-Fi is the big pipe; uplink: 5G is (a TDD pattern, Wi-Fi airtime).
    intake.update(directed({("c1", "nr", "dl"): 300.0, ("c1", "wifi", "dl"): 900.0,
                            ("c1", "nr", "ul"): 120.0, ("c1", "wifi", "ul"): 30.0}))
    r = loop.tick(100.0)
    assert r.decided_by_direction == {"dl": 1, "ul": 1} and r.published == {"c1": 1}
    (doc,) = valid(pub.take())
    dl, ul = doc["dl"]["weights"], doc["ul"]["weights"]
    assert dl["wifi"] > dl["nr"] > 0 and ul["nr"] > ul["wifi"] > 0
    assert dl["wifi"] / dl["nr"] == pytest.approx(3.0, rel=0.05)
    assert ul["nr"] / ul["wifi"] == pytest.approx(4.0, rel=0.05)
    record = state.cpe("c1")
    assert record is not None and record.version == 1
    assert record.dl.weights == dl and record.ul.weights == ul
    # Only the uplink changes: one message, the downlink's set as it is in force.
    intake.update(directed({("c1", "nr", "ul"): 30.0, ("c1", "wifi", "ul"): 120.0}, t=101.0))
    r = loop.tick(101.0)
    assert r.changed == 1 and r.held == 1 and r.published == {"c1": 2}
    (doc2,) = valid(pub.take())
    assert doc2["dl"] == doc["dl"] and doc2["ul"]["weights"]["wifi"] > doc2["ul"]["weights"]["nr"]


def test_a_policy_may_differ_per_direction() -> None:
    loop, intake, pub, book, _ = directed_loop()
    intake.update(directed({("c1", "nr", ""): 300.0, ("c1", "wifi", ""): 900.0}))
    loop.tick(100.0)
    (first,) = valid(pub.take())
    assert first["dl"] == first["ul"]  # rows for both, one policy: the same sets
    book.put(PolicyInstance("ul-no-wifi", {"directions": {"ul": {"excluded_wats": ["wifi"]}}},
                            frozenset({"c1"}), 1.0))
    r = loop.tick(101.0)
    assert r.published == {"c1": 2}
    (doc,) = valid(pub.take())
    assert doc["ul"]["weights"] == {"nr": 100, "wifi": 0}
    assert doc["dl"]["weights"] == first["dl"]["weights"]
    assert loop.fleets["ul"].source[loop.fleet.index["c1"]] == "ul-no-wifi"


def test_a_direction_without_rows_follows_the_other() -> None:
    loop, intake, pub, _, state = directed_loop()
    # An agent that reports the uplink only: the message still needs a downlink set.
    intake.update(directed({("c1", "nr", "ul"): 100.0, ("c1", "wifi", "ul"): 300.0}))
    r = loop.tick(100.0)
    assert r.decided_by_direction == {"ul": 1} and r.followed == 1
    (doc,) = valid(pub.take())
    assert doc["dl"]["weights"] == doc["ul"]["weights"]
    assert doc["dl"]["reason"] == "follows ul: load_balancing"
    # The uplink changes: the downlink follows it in the same message.
    intake.update(directed({("c1", "nr", "ul"): 300.0, ("c1", "wifi", "ul"): 100.0}, t=101.0))
    loop.tick(101.0)
    (doc,) = valid(pub.take())
    assert doc["dl"]["weights"] == doc["ul"]["weights"]
    # Downlink rows appear: it decides on its own at once, against nothing held.
    intake.update(directed({("c1", "nr", "dl"): 50.0, ("c1", "wifi", "dl"): 500.0}, t=102.0))
    r = loop.tick(102.0)
    assert r.decided_by_direction == {"dl": 1, "ul": 1} and r.followed == 0
    (doc,) = valid(pub.take())
    dl = doc["dl"]["weights"]
    assert dl["wifi"] > dl["nr"] and doc["dl"]["reason"] == "load_balancing"
    record = state.cpe("c1")
    assert record is not None and record.dl.weights == dl and not loop.fleets["dl"].follows[0]


def test_restart_holds_each_direction_against_its_own_record() -> None:
    loop, intake, pub, book, state = directed_loop()
    intake.update(directed({("c1", "nr", "dl"): 300.0, ("c1", "wifi", "dl"): 900.0,
                            ("c1", "nr", "ul"): 120.0, ("c1", "wifi", "ul"): 30.0}))
    loop.tick(100.0)
    pub.take()
    again = ControlLoop(intake, Oracle(), pub, None, book.resolver, state)
    # Within the hysteresis in both directions: nothing to publish after the restart.
    intake.update(directed({("c1", "nr", "dl"): 301.0, ("c1", "nr", "ul"): 121.0}, t=101.0))
    r = again.tick(101.0)
    assert r.held == 2 and r.published == {} and pub.take() == []


def test_lab_kpi_file_rows_per_direction(tmp_path: Path) -> None:
    path = tmp_path / "kpis.json"
    path.write_text(json.dumps({"cpes": {
        "c1": {"nr": {"rtt_ms": 20, "dl": {"delivered_mbps": 300}, "ul": {"delivered_mbps": 60}},
               "wifi": {"delivered_mbps": 500}}}}))
    frame = FileKpiSource(path).latest(1.0, 5.0)
    assert frame.direction is not None
    rows = sorted(zip(frame.wat.tolist(), frame.direction.tolist(),
                      frame.column("delivered_mbps").tolist(), frame.column("rtt_ms").tolist(),
                      strict=True))
    assert rows[0] == ("nr", "dl", 300.0, 20.0) and rows[1] == ("nr", "ul", 60.0, 20.0)
    assert rows[2][:3] == ("wifi", "", 500.0)  # no direction: both
    loop = ControlLoop(FileKpiSource(path), Oracle(), pub := MemoryPublisher(), None,
                       PolicyBook(DEFAULTS).resolver, SdlStateStore())
    assert loop.tick(1.0).decided_by_direction == {"dl": 1, "ul": 1}
    (doc,) = valid(pub.take())
    assert doc["dl"]["weights"]["nr"] > doc["ul"]["weights"]["nr"]


# --- issue 22: a direction that follows the other obeys its own effective policy --------------

#: The other direction's rows: capacity (Mbps) and RTT (ms) per WAT.
FOLLOWED = {"nr": (300.0, 5.0), "wifi": (900.0, 40.0), "lifi": (20.0, 2.0)}
#: Per override field: the instance's own keys, the override of the following direction, and
#: what its set must then satisfy (weights, mode).
OVERRIDES: dict[str, tuple[dict[str, object], dict[str, object],
                           Callable[[dict[str, int], str], bool]]] = {
    "mode": ({}, {"mode": "active_standby", "priority": ["lifi", "nr"]},
             lambda w, m: m == "active_standby" and w["lifi"] > 0 == w["wifi"] == w["nr"]),
    "max_weight": ({}, {"max_weight": 7}, lambda w, m: max(w.values()) <= 7),
    "wats": ({}, {"wats": {"wifi": {"max_share": 0.2}}},
             lambda w, m: w["wifi"] <= 0.2 * sum(w.values()) + 1),
    "excluded_wats": ({}, {"excluded_wats": ["wifi"]}, lambda w, m: w["wifi"] == 0),
    "priority": ({"mode": "active_standby", "priority": ["wifi", "nr"]}, {"priority": ["nr"]},
                 lambda w, m: w["nr"] > 0 == w["wifi"] == w["lifi"]),
    "rtt_bound_ms": ({"mode": "latency_bound", "rtt_bound_ms": 100.0}, {"rtt_bound_ms": 10.0},
                     lambda w, m: w["wifi"] == 0 < w["nr"]),
    "demand_mbps": ({"mode": "latency_bound", "rtt_bound_ms": 10.0},
                    {"demand_mbps": 1000.0}, lambda w, m: w["wifi"] > 0),
    "capacity_floor_mbps": ({}, {"capacity_floor_mbps": 100.0},
                            lambda w, m: w["lifi"] == 0 < w["nr"]),
}


def _one_direction_tick(rows_in: tuple[str, ...], policy: dict[str, Any],
                        t: float = 100.0, scale: dict[str, float] | None = None,
                        loop: tuple[ControlLoop, LatestKpis, MemoryPublisher, PolicyBook,
                                    SdlStateStore] | None = None
                        ) -> tuple[dict[str, Any], tuple[ControlLoop, LatestKpis,
                                                          MemoryPublisher, PolicyBook,
                                                          SdlStateStore]]:
    rig = loop or directed_loop()
    lp, intake, pub, book, _ = rig
    if loop is None:
        book.put(PolicyInstance("p", policy, frozenset(), 1.0))
    scale = scale or {}
    cap = {("c1", w, d): c * scale.get(w, 1.0) for w, (c, _) in FOLLOWED.items() for d in rows_in}
    rtt = {("c1", w, d): r for w, (_, r) in FOLLOWED.items() for d in rows_in}
    intake.update(directed(cap, t=t, rtt_ms=rtt))
    lp.tick(t)
    docs = valid(pub.take())
    return (docs[-1] if docs else {}), rig


@pytest.mark.parametrize("direction", ["dl", "ul"])
@pytest.mark.parametrize("field", sorted(OVERRIDES))
def test_a_following_direction_obeys_its_own_override(field: str, direction: str) -> None:
    """Issue 22: with ``directions.dl.excluded_wats = [wifi]`` and only ul rows, the dl set was
    ul's, wifi included.  Now it is what dl's own policy makes of ul's forecasts: the same set
    as if dl had reported ul's rows itself."""
    other = "ul" if direction == "dl" else "dl"
    own, override, holds = OVERRIDES[field]
    policy = {**own, "directions": {direction: override}}
    doc, _ = _one_direction_tick((other,), policy)
    mine, theirs = doc[direction], doc[other]
    assert mine["reason"].startswith(f"follows {other}: ")
    assert holds(mine["weights"], mine["mode"]), mine
    assert mine["weights"] != theirs["weights"]  # the override mattered
    alone, _ = _one_direction_tick((other, direction), policy)
    assert mine["weights"] == alone[direction]["weights"]
    assert mine["mode"] == alone[direction]["mode"]


@pytest.mark.parametrize("direction", ["dl", "ul"])
def test_a_following_direction_holds_with_its_own_hysteresis(direction: str) -> None:
    other = "ul" if direction == "dl" else "dl"
    policy = {"hysteresis_pct": 0.0, "directions": {direction: {"hysteresis_pct": 50.0}}}
    first, rig = _one_direction_tick((other,), policy)
    # wifi 20 % up: the other direction (no hysteresis) moves, this one (50 %) holds.
    doc, _ = _one_direction_tick((other,), policy, t=101.0, scale={"wifi": 1.2}, loop=rig)
    assert doc[other]["weights"] != first[other]["weights"]
    assert doc[direction]["weights"] == first[direction]["weights"]


@pytest.mark.parametrize("direction", ["dl", "ul"])
def test_the_issue_22_override_with_only_the_other_directions_rows(direction: str) -> None:
    other = "ul" if direction == "dl" else "dl"
    policy = {"directions": {direction: {"excluded_wats": ["wifi"],
                                         "capacity_floor_mbps": 400}}}
    doc, _ = _one_direction_tick((other,), policy)
    # nr 300 and lifi 20 under the floor, wifi excluded: nothing usable for this direction.
    # The floor cannot be met by any set; the exclusion can, and holds.
    mine = doc[direction]
    assert mine["weights"]["wifi"] == 0 < mine["weights"]["nr"]
    assert mine["reason"] == f"follows {other}: load_balancing (without excluded wifi)"


@pytest.mark.parametrize("rows_in", [("ul",), ("dl", "ul"), ("",)],
                         ids=["ul rows only", "rows of both", "rows without a direction"])
def test_a_direction_with_no_usable_wat_leaves_the_other_steered(rows_in: tuple[str, ...]
                                                                 ) -> None:
    """Issue 33: the CPE has only WATs the downlink excludes.  The message used to wait, so
    the uplink was not steered either and the agent fell back when its lease ended.  Now the
    uplink is steered, and the downlink goes as the uplink's set, its reason saying so."""
    policy = {"directions": {"dl": {"excluded_wats": ["nr", "wifi", "lifi"]}}}
    doc, rig = _one_direction_tick(rows_in, policy)
    loop = rig[0]
    assert doc["ul"]["weights"]["wifi"] > doc["ul"]["weights"]["nr"] > 0
    assert doc["dl"]["weights"] == doc["ul"]["weights"]
    assert doc["dl"]["reason"] == ("follows ul: load_balancing (as it is: its own policy "
                                   "excludes all of it, nr, wifi, lifi)")
    assert loop.fleets["ul"].has[0] and loop.fleets["dl"].has[0]
    # The uplink keeps following its capacities.
    doc, _ = _one_direction_tick(rows_in, policy, t=101.0, scale={"nr": 10.0}, loop=rig)
    assert doc["ul"]["weights"]["nr"] > doc["ul"]["weights"]["wifi"] > 0
    assert doc["dl"]["weights"]["nr"] > 0


def test_a_following_direction_decides_on_its_own_rows_at_once() -> None:
    """Even when its update period has not elapsed since it last followed."""
    policy = {"update_period_s": 5.0, "directions": {"dl": {"excluded_wats": ["lifi"]}}}
    first, rig = _one_direction_tick(("ul",), policy)
    assert first["dl"]["reason"].startswith("follows ul")
    loop, intake, pub, _, _ = rig
    intake.update(directed({("c1", "nr", "dl"): 900.0, ("c1", "wifi", "dl"): 100.0,
                            ("c1", "lifi", "dl"): 50.0}, t=101.0))
    report = loop.tick(101.0)
    assert report.decided_by_direction.get("dl") == 1
    (doc,) = valid(pub.take())
    dl = doc["dl"]
    assert dl["reason"] == "load_balancing" and dl["weights"]["nr"] > dl["weights"]["wifi"]
    assert dl["weights"]["lifi"] == 0


def test_intake_keeps_each_rows_own_time() -> None:
    """A batch of telemetry carries each message's time: an older message in a later batch
    changes nothing, and a row ages out on its own time, not the batch's newest."""
    intake = LatestKpis()
    batch = KpiFrame(time_s=20.0, cpe=np.array(["c1", "c2"]), wat=np.array(["nr", "nr"]),
                     direction=np.array(["ul", "ul"]),
                     values={"delivered_mbps": np.array([50.0, 60.0])},
                     row_time_s=np.array([20.0, 12.0]))
    intake.update(batch)
    late = KpiFrame(time_s=21.0, cpe=np.array(["c1"]), wat=np.array(["nr"]),
                    direction=np.array(["ul"]), values={"delivered_mbps": np.array([1.0])},
                    row_time_s=np.array([19.0]))
    intake.update(late)
    f = intake.latest(21.0, 5.0)
    got = dict(zip(f.cpe.tolist(), f.column("delivered_mbps").tolist(), strict=True))
    assert got["c1"] == 50.0  # the older message did not replace the newer one
    assert "c2" not in got  # 9 s old by its own time: aged out
    with pytest.raises(ValueError, match="row_time_s"):
        KpiFrame(time_s=1.0, cpe=np.array(["c1"]), wat=np.array(["nr"]),
                 row_time_s=np.array([1.0, 2.0]))
