"""The batched decisions against the per-CPE reference, decide(), row by row."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xapp.core.decisions import NO_USABLE, OK, decide_batch
from xapp.core.policy import KNOWN_WATS, Policy, SteeringMode
from xapp.core.weights import NoUsableWatError, WatState, WeightDecision, decide

K = len(KNOWN_WATS)

POLICIES = [
    Policy(),
    Policy(hysteresis_pct=2.0, capacity_floor_mbps=5.0, max_weight=50),
    Policy(excluded=frozenset({"lte"}), hysteresis_pct=1.0),
    Policy(mode=SteeringMode.FIXED_SPLIT, split_pct={"nr": 30.0, "wifi": 70.0}),
    Policy(mode=SteeringMode.ACTIVE_STANDBY, priority=("wifi", "nr")),
    Policy(min_share={"nr": 0.2}, max_share={"wifi": 0.6}),
    Policy(mode=SteeringMode.LATENCY_BOUND, rtt_bound_ms=20.0, demand_mbps=300.0),
    # Issue 35: the two new modes, and thresholds on every mode.
    Policy(mode=SteeringMode.PRIORITY, priority=("wifi", "lte", "nr")),
    Policy(mode=SteeringMode.PRIORITY, priority=("lifi", "nr", "wifi"),
           demand_mbps=400.0, hysteresis_pct=2.0),
    Policy(mode=SteeringMode.SMALLEST_DELAY, rtt_max_ms=30.0),
    Policy(mode=SteeringMode.SMALLEST_DELAY, wat_rtt_max_ms={"nr": 10.0},
           loss_max_pct=2.0, hysteresis_pct=1.0),
    Policy(rtt_max_ms=25.0, loss_max_pct=3.0, hysteresis_pct=2.0),
    Policy(mode=SteeringMode.FIXED_SPLIT, split_pct={"nr": 30.0, "wifi": 70.0},
           wat_loss_max_pct={"wifi": 1.0}),
    Policy(mode=SteeringMode.ACTIVE_STANDBY, priority=("wifi", "nr"),
           wat_rtt_max_ms={"wifi": 20.0}),
    Policy(mode=SteeringMode.PRIORITY, priority=("nr", "wifi"), demand_mbps=50.0,
           rtt_max_ms=40.0, loss_max_pct=5.0),
    Policy(min_share={"nr": 0.2}, rtt_max_ms=30.0),
    # Their own hysteresis: smallest_delay by RTT, priority by the WATs its fill uses.
    Policy(mode=SteeringMode.SMALLEST_DELAY, hysteresis_pct=20.0),
    Policy(mode=SteeringMode.PRIORITY, priority=("nr", "wifi", "lifi"),
           demand_mbps=300.0, hysteresis_pct=10.0),
]

capacity = st.one_of(st.just(0.0), st.floats(0.5, 2000.0))


@st.composite
def fleet(draw: st.DrawFn) -> dict[str, np.ndarray]:
    n = draw(st.integers(1, 6))
    cap = np.array(draw(st.lists(capacity, min_size=n * K, max_size=n * K))).reshape(n, K)
    frac = np.array(draw(st.lists(st.floats(0.3, 1.0), min_size=n * K, max_size=n * K)))
    present = np.array(draw(st.lists(st.booleans(), min_size=n * K, max_size=n * K))
                       ).reshape(n, K)
    present[:, 0] = True  # every CPE reports at least one WAT
    up = np.array(draw(st.lists(st.booleans(), min_size=n * K, max_size=n * K))).reshape(n, K)
    unknown = st.just(float("nan"))
    rtt = np.array(draw(st.lists(st.one_of(unknown, st.floats(1.0, 60.0)), min_size=n * K,
                                 max_size=n * K))).reshape(n, K)
    loss = np.array(draw(st.lists(st.one_of(unknown, st.floats(0.0, 10.0)), min_size=n * K,
                                  max_size=n * K))).reshape(n, K)
    prev = np.array(draw(st.lists(st.integers(0, 100), min_size=n * K, max_size=n * K))
                    ).reshape(n, K)
    # Sets in force on one WAT, as single-WAT modes leave them.
    alone = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    prev[alone] = np.where(np.arange(K)[None, :] == prev[alone].argmax(axis=1)[:, None], 100, 0)
    has = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    return {"cap": cap, "low": cap * frac.reshape(n, K), "present": present, "up": up,
            "rtt": rtt, "loss": loss, "prev": prev, "has": has}


def _reference(f: dict[str, np.ndarray], i: int, policy: Policy, prev_usable: np.ndarray
               ) -> WeightDecision | None:
    cols = np.flatnonzero(f["present"][i])
    def known(x: float) -> float | None:
        return None if np.isnan(x) else float(x)

    states = {KNOWN_WATS[j]: WatState(float(f["cap"][i, j]), float(f["low"][i, j]),
                                      up=bool(f["up"][i, j]), rtt_ms=known(f["rtt"][i, j]),
                                      loss_pct=known(f["loss"][i, j]))
              for j in cols}
    previous = None
    if f["has"][i]:
        pw = {KNOWN_WATS[j]: int(f["prev"][i, j]) for j in cols}
        previous = WeightDecision(pw, {}, 0.0, frozenset(
            KNOWN_WATS[j] for j in cols if prev_usable[i, j]), False, "")
    try:
        return decide(states, policy, previous)
    except NoUsableWatError:
        return None


@settings(max_examples=600, deadline=None)
@given(f=fleet(), which=st.integers(0, len(POLICIES) - 1))
def test_batch_matches_decide(f: dict[str, np.ndarray], which: int) -> None:
    policy = POLICIES[which]
    # The previous usability: what the current inputs make usable, so hysteresis can apply.
    prev_usable = f["present"] & f["up"] & (f["low"] > 0) & (f["low"] >= policy.capacity_floor_mbps)
    out = decide_batch(KNOWN_WATS, f["cap"], f["low"], f["present"], f["up"], f["rtt"],
                       f["loss"], policy, f["prev"], f["present"], prev_usable, f["has"])
    for i in range(len(f["cap"])):
        ref = _reference(f, i, policy, prev_usable)
        if ref is None:
            assert out.status[i] == NO_USABLE
            continue
        assert out.status[i] == OK
        cols = np.flatnonzero(f["present"][i])
        assert {KNOWN_WATS[j]: int(out.weights[i, j]) for j in cols} == ref.weights
        assert bool(out.changed[i]) == ref.changed
        assert out.reason[i] == ref.reason
        assert out.aggregate[i] == ref.aggregate_mbps or abs(
            out.aggregate[i] - ref.aggregate_mbps) <= 1e-9 * max(1.0, ref.aggregate_mbps)
        assert {KNOWN_WATS[j] for j in cols if out.usable[i, j]} == set(ref.usable)


def test_the_batch_floor_judges_the_central_forecast() -> None:
    policy = Policy(capacity_floor_mbps=1.0)
    cap = np.zeros((2, K))
    low = np.zeros((2, K))
    nr, lte = KNOWN_WATS.index("nr"), KNOWN_WATS.index("lte")
    cap[:, nr], low[:, nr] = 19.4, 18.8
    cap[:, lte], low[:, lte] = (2.0, 0.8), (0.6, 0.7)
    present = (cap > 0)
    nan = np.full((2, K), np.nan)
    d = decide_batch(KNOWN_WATS, cap, low, present, present, nan, nan, policy,
                     np.zeros((2, K), dtype=np.int64), present, present, np.zeros(2, dtype=bool))
    assert d.weights[0, lte] > 0 and d.weights[1, lte] == 0
