"""A WAT that is down keeps a weight for its return (xapp/core/returning.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xapp.core.decisions import OK, Inputs, decide_batch
from xapp.core.policy import KNOWN_WATS, Policy, SteeringMode
from xapp.core.returning import with_return_weights

K = len(KNOWN_WATS)
COL = {w: j for j, w in enumerate(KNOWN_WATS)}


def inputs(caps: dict[str, float], down: tuple[str, ...] = ()) -> Inputs:
    cap = np.zeros((1, K))
    present = np.zeros((1, K), dtype=bool)
    for w, c in caps.items():
        cap[0, COL[w]], present[0, COL[w]] = c, True
    up = present.copy()
    for w in down:
        up[0, COL[w]] = False
    nan = np.full((1, K), np.nan)
    return Inputs(cap, cap.copy(), present, up, nan, nan.copy())


def decided(x: Inputs, policy: Policy) -> dict[str, int]:
    n = len(x.cap)
    blank = np.zeros((n, K), dtype=np.int64)
    d = decide_batch(KNOWN_WATS, x.cap, x.low, x.present, x.up, x.rtt, x.loss, policy, blank,
                     x.present, x.present, np.zeros(n, dtype=bool))
    d = with_return_weights(decide_batch, KNOWN_WATS, x, policy, d)
    assert d.status[0] == OK
    return {w: int(d.weights[0, COL[w]]) for w in KNOWN_WATS if x.present[0, COL[w]]}


def test_a_down_wat_gets_its_share_beside_the_others_as_they_were() -> None:
    caps = {"nr": 12.0, "wifi": 8.0, "lifi": 24.0}
    all_up = decided(inputs(caps), Policy())
    without = decided(inputs({"nr": 12.0, "wifi": 8.0}), Policy())
    got = decided(inputs(caps, down=("lifi",)), Policy())
    # NR and Wi-Fi as the decision without LiFi has them, scaled down together so that LiFi's
    # weight fits under max_weight.
    assert got["nr"] / got["wifi"] == pytest.approx(without["nr"] / without["wifi"], rel=0.05)
    assert got["lifi"] == Policy().max_weight
    # LiFi stands to NR as in the decision with it up (up to rounding and the max_weight bound).
    assert got["lifi"] / got["nr"] == pytest.approx(all_up["lifi"] / all_up["nr"], rel=0.05)
    assert max(got.values()) <= Policy().max_weight


def test_nothing_down_changes_nothing() -> None:
    caps = {"nr": 12.0, "wifi": 8.0, "lifi": 24.0}
    x = inputs(caps)
    blank = np.zeros((1, K), dtype=np.int64)
    d = decide_batch(KNOWN_WATS, x.cap, x.low, x.present, x.up, x.rtt, x.loss, Policy(), blank,
                     x.present, x.present, np.zeros(1, dtype=bool))
    before = d.weights.copy()
    assert (with_return_weights(decide_batch, KNOWN_WATS, x, Policy(), d).weights
            == before).all()


def test_an_excluded_wat_stays_at_zero() -> None:
    policy = Policy(excluded=frozenset({"lifi"}))
    got = decided(inputs({"nr": 12.0, "wifi": 8.0, "lifi": 24.0}, down=("lifi",)), policy)
    assert got["lifi"] == 0


def test_active_standby_keeps_the_standby_and_the_active_for_its_return() -> None:
    policy = Policy(mode=SteeringMode.ACTIVE_STANDBY, priority=("lifi", "nr"))
    got = decided(inputs({"nr": 12.0, "lifi": 24.0}, down=("lifi",)), policy)
    assert got == {"nr": policy.max_weight, "lifi": policy.max_weight}


def test_the_reason_names_the_returning_wat() -> None:
    x = inputs({"nr": 12.0, "lifi": 24.0}, down=("lifi",))
    blank = np.zeros((1, K), dtype=np.int64)
    d = decide_batch(KNOWN_WATS, x.cap, x.low, x.present, x.up, x.rtt, x.loss, Policy(), blank,
                     x.present, x.present, np.zeros(1, dtype=bool))
    d = with_return_weights(decide_batch, KNOWN_WATS, x, Policy(), d)
    assert d.reason[0].endswith("for its return: lifi")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.5, 500.0), min_size=K, max_size=K),
       st.lists(st.booleans(), min_size=K, max_size=K),
       st.integers(50, 255))
def test_weights_stay_in_range_and_the_up_wats_keep_their_ratios(
        caps: list[float], down: list[bool], max_weight: int) -> None:
    policy = Policy(max_weight=max_weight)
    if all(down):
        down[0] = False
    x = inputs(dict(zip(KNOWN_WATS, caps, strict=True)),
               down=tuple(w for w, d in zip(KNOWN_WATS, down, strict=True) if d))
    got = decided(x, policy)
    masked = decided(inputs({w: c for w, c, d in zip(KNOWN_WATS, caps, down, strict=True)
                             if not d}), policy)
    assert all(0 <= v <= max_weight for v in got.values())
    assert any(got[w] > 0 for w in masked)
    up = [w for w in masked if masked[w] > 0]
    # The up WATs keep the masked decision's weights, or all of them are scaled down together
    # (when a returning WAT's weight would pass max_weight): never up, and in the same order.
    assert all(got[w] <= masked[w] for w in up)
    assert all(got[w] >= got[v] for w in up for v in up if masked[w] >= masked[v])
