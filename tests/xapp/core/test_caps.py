"""Rate caps (xapp.core.caps) and the loop that sends them to rate-caps appliers only."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from xapp.adapters.lab import MemoryPublisher, NullSink
from xapp.adapters.mqtt.payloads import check
from xapp.adapters.sdl import SdlStateStore
from xapp.core.caps import (
    CAP_MAX_MBPS,
    CAP_MIN_MBPS,
    DEFAULT_HEADROOM,
    balancing_caps,
    caps_in_force,
    caps_moved,
    check_headroom,
    rate_caps,
)
from xapp.core.ewma import CAPPED_COLUMN
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.loop import ControlLoop, LoopSettings
from xapp.core.policy_book import PolicyBook

NAN = math.nan


@pytest.mark.parametrize(("weights", "forecast", "want"), [
    # fixed_split 70/30 on two equal paths: T = min(20/0.7, 20/0.3) = 28.57; nr sets T
    # (uncapped), wifi 1.15 x 8.571.
    ([70, 30, 0, 0], [20, 20, 0, 0], [NAN, 9.857, NAN, NAN]),
    # Weights in proportion to the forecasts: every WAT sets T, none is capped.
    ([24, 16, 8, 0], [24, 16, 8, 0], [NAN, NAN, NAN, NAN]),
    # Equal weights, 24/16/8: T = 24 (lifi binds), the others 1.15 x 8.
    ([1, 1, 1, 0], [24, 16, 8, 0], [9.2, 9.2, NAN, NAN]),
    # Weight 0 has no cap, whatever its forecast.
    ([3, 0, 1, 0], [24, 16, 8, 0], [NAN, NAN, NAN, NAN]),
    ([1, 0, 1, 0], [24, 16, 8, 0], [9.2, NAN, NAN, NAN]),
    # A weighted WAT without a usable forecast: no total, no caps (the agent's link rates).
    ([1, 1, 0, 0], [24, NAN, 0, 0], [NAN, NAN, NAN, NAN]),
    ([1, 1, 0, 0], [24, 0, 0, 0], [NAN, NAN, NAN, NAN]),
    # Nothing weighted.
    ([0, 0, 0, 0], [24, 16, 8, 0], [NAN, NAN, NAN, NAN]),
    # A slow WAT sets a small total: T = 0.001 x 255, nr 1.15 x 0.254.
    ([254, 1, 0, 0], [10, 0.001, 0, 0], [0.292, NAN, NAN, NAN]),
    # A tiny share is floored at the agent's HTB resolution.
    ([254, 1, 0, 0], [0.01, 1000, 0, 0], [NAN, CAP_MIN_MBPS, NAN, NAN]),
    # And the schema's maximum bounds a huge one.
    ([1, 1, 0, 0], [1e6, 2e6, 0, 0], [NAN, CAP_MAX_MBPS, NAN, NAN]),
])
def test_rate_caps_table(weights: list[int], forecast: list[float], want: list[float]) -> None:
    got = rate_caps(np.array([weights]), np.ones((1, 4), dtype=bool), np.array([forecast]))
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-3, equal_nan=True)


def test_rate_caps_absent_wat_and_headroom() -> None:
    w = np.array([[1, 1, 5, 0]])
    present = np.array([[True, True, False, False]])  # lifi's weight is not in the set
    got = rate_caps(w, present, np.array([[24.0, 16.0, 8.0, 0.0]]), headroom=1.0)
    np.testing.assert_allclose(got[0], [16.0, NAN, NAN, NAN], equal_nan=True)
    with pytest.raises(ValueError, match="headroom"):
        rate_caps(w, present, np.ones((1, 4)), headroom=0.9)
    with pytest.raises(ValueError, match="shape"):
        rate_caps(w, present, np.ones((1, 3)))
    for bad in (True, "1.1", 2.5, 0.99):
        with pytest.raises(ValueError):
            check_headroom(bad)  # type: ignore[arg-type]


def test_headroom_bounds_the_split_error() -> None:
    """The module's argument: with headroom h, a capped WAT of share s carries at most
    h s / (h s + 1 - s) of the bytes; for 1.15 that is at most 3.5 points more than s."""
    h = DEFAULT_HEADROOM
    s = np.linspace(0.001, 0.999, 9999)
    err = h * s / (h * s + 1 - s) - s
    assert err.max() == pytest.approx((math.sqrt(h) - 1) / (math.sqrt(h) + 1), abs=1e-6)
    assert err.max() < 0.035


@settings(max_examples=300, deadline=None)
@given(w=arrays(np.int64, (6, 4), elements=st.integers(0, 255)),
       f=arrays(np.float64, (6, 4), elements=st.floats(0.0, 5e4)),
       present=arrays(np.bool_, (6, 4)),
       h=st.floats(1.0, 2.0))
def test_rate_caps_properties(w: np.ndarray, f: np.ndarray, present: np.ndarray,
                              h: float) -> None:
    caps = rate_caps(w, present, f, h)
    on = present & (w > 0)
    has = np.isfinite(caps)
    # Only weighted WATs of the set are capped, within the schema's bounds.
    assert not (has & ~on).any()
    assert ((caps[has] >= CAP_MIN_MBPS) & (caps[has] <= CAP_MAX_MBPS)).all()
    for i in range(len(w)):
        if not has[i].any():
            continue
        # A row with caps has a total: every weighted WAT has a forecast above 0, and the
        # WAT that sets the total is uncapped.
        assert (f[i][on[i]] > 0).all()
        assert (on[i] & ~has[i]).any()
        share = np.where(on[i], w[i], 0) / np.where(on[i], w[i], 0).sum()
        total = min(f[i][j] / share[j] for j in np.flatnonzero(on[i]))
        for j in np.flatnonzero(has[i]):
            want = min(max(round(h * share[j] * total, 3), CAP_MIN_MBPS), CAP_MAX_MBPS)
            assert caps[i, j] == pytest.approx(want, abs=1e-9)
            # Never above headroom x the WAT's own forecast (its share of T is at most it).
            assert caps[i, j] <= max(h * f[i, j] + 1e-3, CAP_MIN_MBPS)


def test_caps_moved() -> None:
    old = np.array([[10.0, NAN], [10.0, NAN], [10.0, NAN], [NAN, NAN], [10.0, 5.0]])
    new = np.array([[10.7, NAN], [10.8, NAN], [NAN, NAN], [NAN, NAN], [10.0, NAN]])
    # Half the 15 % margin: 7.5 %.
    assert caps_moved(old, new).tolist() == [False, True, True, False, True]
    assert caps_moved(old, new, headroom=1.0).tolist() == [True, True, True, False, True]


def test_caps_in_force_only_where_the_applier_is_still_rate_caps() -> None:
    caps = np.array([[10.0, NAN], [20.0, 5.0], [30.0, NAN]])
    rows = np.array([2, 1], dtype=np.intp)
    got = caps_in_force(caps, rows, np.array([True, False, True]))
    assert got is not None
    np.testing.assert_array_equal(got, [[30.0, NAN], [NAN, NAN]])
    # No applier is rate-caps and no caps are in force: no caps at all.
    assert caps_in_force(caps, rows, None) is None


# --- the loop -----------------------------------------------------------------------------


class Kpis:
    """Rows per (cpe, wat, direction) with the capacity as delivered_mbps."""

    def __init__(self, cap: dict[tuple[str, str, str], float]) -> None:
        self.cap = cap

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        keys = sorted(self.cap)
        return KpiFrame(time_s=now_s, cpe=np.array([k[0] for k in keys], dtype=np.str_),
                        wat=np.array([k[1] for k in keys], dtype=np.str_),
                        direction=np.array([k[2] for k in keys], dtype="<U2"),
                        values={"delivered_mbps": np.array([self.cap[k] for k in keys]),
                                "up": np.ones(len(keys))})


class Exact:
    def step(self, frame: KpiFrame) -> CapacityForecast:
        d = frame.column("delivered_mbps")
        return CapacityForecast(median_mbps=d, lower_mbps=d)


class Semantics:
    def __init__(self) -> None:
        self.ul: set[str] = set()
        self.dl: set[str] = set()
        self.asked = 0

    def rate_caps(self, direction: str) -> set[str]:
        self.asked += 1
        return self.ul if direction == "ul" else self.dl

    def max_classes(self, direction: str) -> dict[str, int]:
        return {}


def _loop(kpis: Kpis, pub: MemoryPublisher, semantics: Semantics | None,
          policy: dict[str, object], state: SdlStateStore | None = None) -> ControlLoop:
    return ControlLoop(kpis, Exact(), pub, NullSink(), PolicyBook(policy).resolver,
                       state or SdlStateStore(), settings=LoopSettings(lease_s=30.0),
                       semantics=semantics)


SPLIT = {"mode": "fixed_split", "wats": {"nr": {"split_pct": 70}, "wifi": {"split_pct": 30}},
         "max_weight": 100}


def _rows(cpes: list[str], nr: float = 20.0, wifi: float = 20.0
          ) -> dict[tuple[str, str, str], float]:
    return {(c, w, d): v for c in cpes for d in ("dl", "ul")
            for w, v in (("nr", nr), ("wifi", wifi))}


def test_loop_sends_caps_only_to_rate_caps_appliers() -> None:
    kpis = Kpis(_rows(["a", "b"]))
    sem = Semantics()
    sem.ul = {"a", "ghost"}  # a CPE the loop has not seen is ignored
    pub = MemoryPublisher(clock=lambda: 0.0)
    loop = _loop(kpis, pub, sem, SPLIT)
    loop.tick(100.0)
    docs = {d["cpe_id"]: d for d in pub.take()}
    for doc in docs.values():
        check("weights", doc)
    a, b = docs["a"], docs["b"]
    assert a["ul"]["weights"] == {"nr": 100, "wifi": 43}
    # T = min(20 / (100/143), 20 / (43/143)) = 28.6: nr uncapped, wifi 1.15 x 8.6.
    assert a["ul"]["caps_mbps"] == {"wifi": pytest.approx(1.15 * 20 * 43 / 100, abs=1e-3)}
    assert "caps_mbps" not in a["dl"] and "caps_mbps" not in b["ul"]
    assert "caps_mbps" not in b["dl"]
    assert loop.state.cpe("a") is not None
    assert loop.state.cpe("a").ul.caps_mbps == a["ul"]["caps_mbps"]  # type: ignore[union-attr]
    assert loop.state.cpe("b").ul.caps_mbps == {}  # type: ignore[union-attr]


def test_loop_without_rate_caps_sends_what_it_sent_before() -> None:
    """No semantics, or semantics naming nobody: byte-identical messages, no caps work."""
    out = []
    for sem in (None, Semantics()):
        pub = MemoryPublisher(clock=lambda: 0.0)
        loop = _loop(Kpis(_rows(["a"])), pub, sem, SPLIT)
        loop.tick(100.0)
        out.append(pub.take())
        assert not np.isfinite(loop.fleets["ul"].caps).any()
    assert out[0] == out[1]
    assert b"caps" not in str(out[0]).encode()


def test_loop_resends_when_caps_move_and_drops_them_when_the_backend_changes() -> None:
    kpis = Kpis(_rows(["a"]))
    sem = Semantics()
    sem.ul = {"a"}
    pub = MemoryPublisher(clock=lambda: 0.0)
    loop = _loop(kpis, pub, sem, {**SPLIT, "update_period_s": 1.0})
    loop.tick(100.0)
    first = pub.take()[0]["ul"]["caps_mbps"]["wifi"]
    # Same weights (fixed split); nr 5 % faster: T and wifi's cap move 5 %, under the 7.5 %
    # of the headroom's half margin: nothing sent.
    kpis.cap[("a", "nr", "ul")] = 21.0
    loop.tick(101.0)
    assert pub.take() == []
    # 20 % faster: sent again with the new cap, the weights unchanged.
    kpis.cap[("a", "nr", "ul")] = 24.0
    loop.tick(102.0)
    (doc,) = pub.take()
    assert doc["ul"]["weights"] == {"nr": 100, "wifi": 43}
    assert doc["ul"]["caps_mbps"]["wifi"] == pytest.approx(first * 24 / 20, abs=2e-3)
    # The agent now reports wrr: the caps in force are withdrawn at its next decision.
    sem.ul = set()
    loop.tick(103.0)
    (doc,) = pub.take()
    assert "caps_mbps" not in doc["ul"]
    assert not np.isfinite(loop.fleets["ul"].caps).any()


class Recording(Exact):
    """Exact forecasts; keeps each frame's ``capped`` column by (cpe, wat, direction)."""

    def __init__(self) -> None:
        self.capped: list[dict[tuple[str, str, str], float]] = []

    def step(self, frame: KpiFrame) -> CapacityForecast:
        assert frame.direction is not None
        self.capped.append({(str(c), str(w), str(d)): float(v) for c, w, d, v in zip(
            frame.cpe, frame.wat, frame.direction, frame.column(CAPPED_COLUMN), strict=True)})
        return super().step(frame)


def test_the_estimator_sees_which_wats_the_sets_in_force_cap() -> None:
    """The explorer probes a capped WAT sparingly (xapp.core.ewma), so the loop tells it which
    WATs the sets in force cap: a cap below the schema's maximum, in that direction."""
    sem = Semantics()
    sem.ul = {"a"}
    rec = Recording()
    loop = ControlLoop(Kpis(_rows(["a", "b"])), rec, MemoryPublisher(clock=lambda: 0.0),
                       NullSink(), PolicyBook(SPLIT).resolver, SdlStateStore(),
                       settings=LoopSettings(lease_s=30.0), semantics=sem)
    loop.tick(100.0)
    loop.tick(101.0)
    first, second = rec.capped
    assert set(first.values()) == {0.0}  # nothing in force yet
    # a's uplink: wifi capped at 1.15 x its share, nr uncapped (it sets the total).
    assert {k for k, v in second.items() if v} == {("a", "wifi", "ul")}


def test_loop_caps_survive_a_restart_and_ride_the_refresh() -> None:
    kpis = Kpis(_rows(["a"]))
    sem = Semantics()
    sem.ul = {"a"}
    state = SdlStateStore()
    pub = MemoryPublisher(clock=lambda: 0.0)
    _loop(kpis, pub, sem, {**SPLIT, "update_period_s": 60.0}, state).tick(100.0)
    caps = pub.take()[0]["ul"]["caps_mbps"]
    # A new loop over the same store: restored caps, so an unchanged decision is not re-sent.
    again = _loop(kpis, pub, sem, {**SPLIT, "update_period_s": 60.0}, state)
    again.tick(101.0)
    assert pub.take() == []
    # Half a lease later the set in force is refreshed with its caps.
    again.tick(101.0 + 15.0)
    (doc,) = pub.take()
    assert doc["ul"]["caps_mbps"] == caps


def test_a_set_that_follows_the_other_direction_has_no_caps() -> None:
    # Only ul rows: dl follows ul's set, and ul's caps are ul's alone.
    kpis = Kpis({k: v for k, v in _rows(["a"]).items() if k[2] == "ul"})
    sem = Semantics()
    sem.ul = {"a"}
    sem.dl = {"a"}
    pub = MemoryPublisher(clock=lambda: 0.0)
    _loop(kpis, pub, sem, SPLIT).tick(100.0)
    (doc,) = pub.take()
    assert doc["dl"]["reason"].startswith("follows ul")
    assert "caps_mbps" in doc["ul"] and "caps_mbps" not in doc["dl"]


def test_balancing_caps_uncap_every_weighted_wat() -> None:
    w = np.array([[60, 0, 40], [0, 0, 0]])
    present = np.array([[True, True, True], [True, False, True]])
    out = balancing_caps(w, present)
    assert out[0, 0] == out[0, 2] == CAP_MAX_MBPS
    assert np.isnan(out[0, 1]) and np.isnan(out[1]).all()


@pytest.mark.parametrize(("policy", "capped"), [
    ({"mode": "load_balancing", "max_weight": 100}, False),
    # Share limits ask for a split: the caps rule enforces it.
    ({"mode": "load_balancing", "max_weight": 100, "wats": {"wifi": {"max_share": 0.2}}}, True),
    (SPLIT, True),
])
def test_load_balancing_leaves_a_rate_caps_agent_uncapped(policy: dict[str, object],
                                                          capped: bool) -> None:
    """A forecast far above what a WAT carries (wifi 45 against nr 16, make e2e's case) caps
    nr under the rule; load_balancing without limits sends every WAT uncapped instead."""
    sem = Semantics()
    sem.ul = {"a"}
    pub = MemoryPublisher(clock=lambda: 0.0)
    loop = _loop(Kpis(_rows(["a"], nr=16.0, wifi=45.0)), pub, sem, policy)
    loop.tick(100.0)
    (doc,) = pub.take()
    check("weights", doc)
    caps = doc["ul"]["caps_mbps"]
    weighted = {w for w, v in doc["ul"]["weights"].items() if v > 0}
    assert set(caps) <= weighted
    if capped:
        assert min(caps.values()) < 100
    else:
        assert caps == dict.fromkeys(weighted, CAP_MAX_MBPS)


def test_load_balancing_switches_off_a_wat_too_slow_to_keep_pace() -> None:
    """The engine's choice stands on a rate-caps agent: LiFi at 0.1 beside 76 Mbit/s is off
    (backup: its reassembly stalls would cost more than it carries), the others uncapped; a
    WAT forecast at nothing is off too."""
    rows = {("a", w, d): v for d in ("dl", "ul")
            for w, v in (("nr", 17.0), ("wifi", 59.0), ("lifi", 0.1))}
    rows.update({("b", w, d): v for d in ("dl", "ul") for w, v in (("nr", 17.0), ("wifi", 0.0))})
    sem = Semantics()
    sem.ul = {"a", "b"}
    pub = MemoryPublisher(clock=lambda: 0.0)
    _loop(Kpis(rows), pub, sem, {"mode": "load_balancing", "max_weight": 100}).tick(100.0)
    docs = {d["cpe_id"]: d for d in pub.take()}
    a = docs["a"]["ul"]
    assert a["weights"]["lifi"] == 0 and min(a["weights"]["nr"], a["weights"]["wifi"]) > 0
    assert a["caps_mbps"] == {"nr": CAP_MAX_MBPS, "wifi": CAP_MAX_MBPS}
    assert docs["b"]["ul"]["weights"]["wifi"] == 0 and "wifi" not in docs["b"]["ul"]["caps_mbps"]
