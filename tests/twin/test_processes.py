"""The twin's random processes: the row loop of wide filters agrees with scipy's, the noises
have unit variance and their correlation time, and episodes are 0/1 runs of their length."""

from __future__ import annotations

import numpy as np
import pytest

from twin.processes import DT_S, ROW_LOOP_MIN_CPES, ar1, episodes, first_order, smooth_ar


def test_the_row_loop_of_many_cpes_filters_as_lfilter_does() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((200, ROW_LOOP_MIN_CPES))
    y0 = rng.standard_normal(ROW_LOOP_MIN_CPES)
    wide = first_order(x, 0.3, 0.9, y0)  # the row loop
    narrow = first_order(x[:, :8], 0.3, 0.9, y0[:8])  # scipy's lfilter
    assert wide[:, :8] == pytest.approx(narrow, abs=1e-12)
    assert wide[0] == pytest.approx(0.9 * y0 + 0.3 * x[0])


@pytest.mark.parametrize("corr_s", [0.5, 2.0])
def test_ar1_has_unit_variance_and_its_correlation_time(corr_s: float) -> None:
    x = ar1(np.random.default_rng(1), 20_000, 4, corr_s)
    assert x.var() == pytest.approx(1.0, abs=0.1)
    lag1 = np.mean([np.corrcoef(x[:-1, c], x[1:, c])[0, 1] for c in range(4)])
    assert lag1 == pytest.approx(np.exp(-DT_S / corr_s), abs=0.03)


def test_smooth_ar_has_unit_variance_and_smoother_steps_than_ar1() -> None:
    rng = np.random.default_rng(2)
    smooth, rough = smooth_ar(rng, 20_000, 4, 2.0), ar1(rng, 20_000, 4, 2.0)
    assert smooth.var() == pytest.approx(1.0, abs=0.2)
    assert np.abs(np.diff(smooth, axis=0)).mean() < np.abs(np.diff(rough, axis=0)).mean() / 2


def test_episodes_are_runs_of_at_least_their_length() -> None:
    mask = episodes(np.random.default_rng(4), 6_000, 3, per_min=2.0, min_s=1.0, max_s=1.0)
    assert set(np.unique(mask)) <= {0.0, 1.0} and 0 < mask.mean() < 0.2
    for c in range(3):
        edges = np.diff(np.concatenate([[0.0], mask[:, c], [0.0]]))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        # Overlapping episodes merge; one cut short by the trace's end is the only shorter run.
        assert np.all((ends - starts)[ends < len(mask)] >= round(1.0 / DT_S))
