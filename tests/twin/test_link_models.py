"""The twin's link models: Wi-Fi goodput and rate adaptation, 5G NR and LiFi capacity."""

from __future__ import annotations

import numpy as np
import pytest

from twin.link_models import (
    HE160_2SS_MBPS,
    HE_MCS_SNR_DB,
    LIFI_PEAK_MBPS,
    MCS_SWITCH_DB,
    NR_PEAK_MBPS,
    NR_UL_PEAK_MBPS,
    NR_UL_SINR_OFFSET_DB,
    lifi_capacity,
    nr_link,
    rate_adaptation,
    wifi_per,
)


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


def test_nr_at_its_peak_near_the_gnb_and_below_it_far_away() -> None:
    near, far = np.array([[2.0]]), np.array([[20.0]])
    still = np.zeros((1, 1))
    assert nr_link(near, still)[0][0, 0] == pytest.approx(NR_PEAK_MBPS)
    cap, sinr = nr_link(far, still)
    assert sinr[0, 0] == pytest.approx(10.0) and cap[0, 0] < NR_PEAK_MBPS / 2
    # The uplink: its own peak, 3 dB less SINR (which only shows away from the gNB).
    assert nr_link(near, still, NR_UL_PEAK_MBPS, NR_UL_SINR_OFFSET_DB)[0][0, 0] == \
        pytest.approx(NR_UL_PEAK_MBPS)
    assert nr_link(far, still, NR_UL_PEAK_MBPS, NR_UL_SINR_OFFSET_DB)[1][0, 0] == \
        pytest.approx(7.0)


def test_lifi_capacity_grows_with_snr_up_to_its_cap() -> None:
    cap = lifi_capacity(np.array([0.0, 9.5, 20.0, 60.0]))
    assert cap[0] < cap[1] < cap[2] < cap[3]
    assert cap[1] == pytest.approx(0.27 * 16.6 * np.log2(1.0 + 10.0 ** 0.95))
    assert cap[-1] == LIFI_PEAK_MBPS
