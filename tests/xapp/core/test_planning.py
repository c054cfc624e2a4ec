"""The planning level chosen by cost: each WAT at the quantile equal to its share."""

from __future__ import annotations

import numpy as np
import pytest

from twin.fluid import deliver
from xapp.core.planning import COST, check_level, cost_levels
from xapp.core.weights import optimal_weights_batch


def test_levels_are_the_shares_within_each_cpe_clipped() -> None:
    center = np.array([342.0, 1190.0, 12.0, 50.0, 50.0, np.nan, -5.0, 0.0])
    group = np.array([0, 0, 0, 1, 1, 2, 2, 3])
    levels = cost_levels(center, group)
    total = 342.0 + 1190.0 + 12.0
    np.testing.assert_allclose(levels[:5], [342 / total, 0.5, 0.01, 0.5, 0.5])  # 12/1544 < 0.01
    # Nothing known, nothing forecast: the most cautious level.
    np.testing.assert_array_equal(levels[5:], [0.01, 0.01, 0.01])
    assert cost_levels(np.empty(0), np.empty(0, dtype=np.intp)).shape == (0,)


@pytest.mark.parametrize(("value", "ok"), [
    (COST, True), (0.1, True), (0.01, True), (0.5, True), (1, False), (0.6, False),
    (0.0, False), ("0.1", False), (True, False), (None, False), ("costly", False)])
def test_check_level(value: object, ok: bool) -> None:
    if ok:
        assert check_level(value) == value  # type: ignore[arg-type]
    else:
        with pytest.raises(ValueError, match="planning level"):
            check_level(value)  # type: ignore[arg-type]


def test_the_share_quantile_beats_a_fixed_lower_quantile_in_the_fluid_model() -> None:
    """The derivation checked by simulation: three WATs with independent Gaussian forecast
    errors (10 % of the level), weights planned at each WAT's quantile; the share rule loses
    less of the capacity sum than planning every WAT at its 10 % quantile or at the median."""
    rng = np.random.default_rng(0)
    mean = np.array([342.0, 1190.0, 12.1])
    sd = 0.1 * mean
    cap = mean + sd * rng.standard_normal((4000, 3))
    from scipy.stats import norm

    def achieved(levels: np.ndarray) -> float:
        plan = np.maximum(mean + norm.ppf(levels) * sd, 0.01)
        w = optimal_weights_batch(plan[None, :], 100)[0]
        _, agg, _ = deliver(cap[:, None, :], np.broadcast_to(w, (len(cap), 1, 3)))
        return float(agg.mean() / cap.sum(axis=1).mean())

    share = cost_levels(mean, np.zeros(3, dtype=np.intp))
    by_share = achieved(share)
    assert by_share > achieved(np.full(3, 0.1)) + 0.01
    assert by_share > achieved(np.full(3, 0.5))
