"""Scenario traces: shapes, documented context, determinism and the paper's figures."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from twin.scenarios import (
    HE160_2SS_MBPS,
    HE_MCS_SNR_DB,
    MCS_SWITCH_DB,
    SCENARIOS,
    ScenarioError,
    build,
    rate_adaptation,
    walk_distance,
    wifi_per,
)

CONTEXT_KEYS = {"wifi_distance_m", "wifi_stations", "wifi_snr_db", "wifi_mcs", "nr_distance_m",
                "nr_sinr_db", "lifi_blocked", "lifi_snr_db"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_shapes_and_context(name: str) -> None:
    s = build(name, n_cpes=3, seed=1, duration_s=20.0)
    assert s.wats == ("nr", "wifi", "lifi")
    assert s.capacity_mbps.shape == s.rtt_ms.shape == (200, 3, 3)
    assert set(s.context) == CONTEXT_KEYS
    for value in s.context.values():
        assert value.shape == (200, 3)
    assert (s.capacity_mbps >= 0).all() and np.isfinite(s.capacity_mbps).all()
    # RTT is known exactly where the WAT can carry something
    assert np.array_equal(np.isfinite(s.rtt_ms), s.capacity_mbps > 0)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_deterministic_per_seed(name: str) -> None:
    a, b = build(name, n_cpes=2, seed=7), build(name, n_cpes=2, seed=7)
    c = build(name, n_cpes=2, seed=8)
    assert np.array_equal(a.capacity_mbps, b.capacity_mbps)
    assert np.array_equal(a.rtt_ms, b.rtt_ms, equal_nan=True)
    assert not np.array_equal(a.capacity_mbps, c.capacity_mbps)


def test_cpes_differ() -> None:
    s = build("wifi-walk", n_cpes=4, seed=0)
    assert not np.allclose(s.capacity_mbps[:, 0, 1], s.capacity_mbps[:, 1, 1])


def test_paper_static_matches_the_paper() -> None:
    c = build("paper-static").capacity_mbps[:, 0, :]
    nr, wifi, lifi = c.mean(axis=0)
    assert nr == pytest.approx(342.0, rel=0.01)
    assert wifi == pytest.approx(1190.0, rel=0.01)
    assert lifi == pytest.approx(12.1, rel=0.01)
    assert c[:, 1].min() >= 1000.0 - 1 and c[:, 1].max() <= 1400.0 + 1
    lifi_1s = c[:, 2].reshape(-1, 10).mean(axis=1)
    assert lifi_1s.min() > 3.0 and lifi_1s.max() < 25.0


def test_wifi_walk_follows_the_route() -> None:
    s = build("wifi-walk")
    d = s.context["wifi_distance_m"][:, 0]
    assert d[0] == pytest.approx(1.0) and d.max() == pytest.approx(25.0, abs=0.1)
    assert walk_distance(np.array([125.0]))[0] == pytest.approx(25.0)
    wifi = s.capacity_mbps[:, 0, 1]
    near, far = wifi[:200].mean(), wifi[1100:1400].mean()
    assert near > 900 and far < near / 3  # Wi-Fi fades with distance
    nr = s.capacity_mbps[:, 0, 0]
    assert nr.std() / nr.mean() < 0.02  # 5G steady near the gNB
    blocked = s.context["lifi_blocked"][:, 0] > 0
    assert (s.capacity_mbps[blocked, 0, 2] == 0).all()


@pytest.mark.parametrize(("args", "msg"), [
    (("nope",), "unknown scenario"),
    (("paper-static", 0), "n_cpes"),
    (("paper-static", 1, 0, 0.01), "duration_s"),
])
def test_bad_input(args: tuple[Any, ...], msg: str) -> None:
    with pytest.raises(ScenarioError, match=msg):
        build(*args)


def test_wifi_goodput_is_continuous_in_snr() -> None:
    """Best goodput over the MCS set: no step of a whole MCS between nearby SNRs."""
    snr = np.arange(0.0, 45.0, 0.05)
    best = np.stack([HE160_2SS_MBPS[m] * (1.0 - wifi_per(np.full(len(snr), m), snr))
                     for m in range(12)]).max(axis=0)
    assert np.all(np.diff(best) >= -1e-9)  # more SNR never delivers less
    rel = np.diff(best) / best[1:]
    assert np.max(rel[snr[1:] >= 5.0]) < 0.03  # < 3 % per 0.05 dB; an MCS step is 10-100 %
    per = wifi_per(np.arange(12), HE_MCS_SNR_DB)
    assert per == pytest.approx(np.full(12, 0.1))  # thresholds are the 10 % PER points


def test_rate_adaptation_follows_the_trend_not_the_jitter() -> None:
    rng = np.random.default_rng(0)
    trend = np.linspace(5.0, 40.0, 3000)[:, None]
    snr = trend + 0.5 * rng.standard_normal((3000, 1))
    mcs = rate_adaptation(snr)[:, 0]
    instant = np.searchsorted(MCS_SWITCH_DB, snr[:, 0], side="right") - 1
    assert np.all(np.diff(mcs) >= -1)  # no wild swings on a rising channel
    assert np.count_nonzero(np.diff(mcs)) < np.count_nonzero(np.diff(instant)) / 2
    assert mcs[0] >= 0 and mcs[-1] == 11
    assert (rate_adaptation(np.full((20, 1), -10.0)) == -1).all()  # out of range


def test_wifi_walk_is_predictable_at_100_ms() -> None:
    """A whole-MCS jump every few hundred ms would make the next step unknowable."""
    s = build("wifi-walk", n_cpes=4, seed=5)
    wifi = s.capacity_mbps[:, :, 1]
    # Near the AP (upper MCSs, where the paper's Wi-Fi carries most): steps of a whole MCS
    # (10-20 %) would show here.  Far away, at low SNR, the link is genuinely jumpier.
    near = (s.context["wifi_mcs"][1:] >= 7) & (wifi[:-1] > 50)
    change = np.abs(np.diff(wifi, axis=0))[near] / wifi[1:][near]
    assert np.median(change) < 0.03
    assert np.mean(change > 0.10) < 0.05
