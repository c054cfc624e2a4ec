"""Synthetic per-WAT KPIs consistent with a twin scenario's true capacities.

The twin's scenarios (:mod:`twin.scenarios`) give, per step, each WAT's true capacity and the
physical drivers behind it (distances, SNRs, stations, LiFi blockage).  This module derives the
KPIs a real reporter would send for the same radio state, so a model that reads them learns the
same physics the twin simulates:

*5G NR* (50 MHz, 2x2, TDD, 30 kHz SCS): the scenario's SINR plus 0.5 dB measurement noise; CQI
from SINR with the 3GPP TS 38.214 CQI table 2 (256QAM) thresholds at 10 % BLER; MCS from CQI
(table 5.1.3.1-2 indices for the same spectral efficiency); RSRP from the distance (free-space
plus 20 dB per decade beyond 2 m, -75 dBm at 2 m); RSRQ about -10.5 dB; PRB utilisation of the
other users 10-30 %; BLER around the 10 % target of outer-loop link adaptation.

*Wi-Fi 6* (802.11ax, 160 MHz, 2 SS): SNR and MCS are the scenario's (rate adaptation), RSSI is
SNR minus the -86 dBm noise floor of 160 MHz, PHY rate from the HE MCS table, ``nss`` 2,
``channel_busy`` the airtime other stations take ``1 - 1 / (1 + 0.5 n)`` plus interference,
``retries`` rising as the SNR margin over the chosen MCS's threshold shrinks, ``stations`` the
contending stations.

*LiFi*: SNR from the scenario; the received optical power follows from it (electrical SNR grows
with the square of optical power: 2 dB of SNR per optical dB, -10 dBm at 9.5 dB); a blocked link
reports a dark receiver (about -40 dBm, SNR about -5 dB).

For all: ``delivered_mbps`` is what the twin says the subflow carried (by default the capacity:
a saturated, full-buffer measurement), ``saturated`` whether it was capacity-limited,
``rtt_ms`` the scenario's RTT, ``loss`` small.  ``capacity_mbps`` (the truth of the period) is
included for training; a real reporter does not have it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from twin.link_models import HE160_2SS_MBPS, HE_MCS_SNR_DB
from twin.scenarios import Scenario
from xapp.core.forecast import KpiFrame

Array = NDArray[np.float64]

#: TS 38.214 CQI table 2 (256QAM) SINR thresholds (dB) at 10 % BLER for CQI 1..15 (AWGN,
#: typical link-level values).
NR_CQI_SINR_DB = np.array([-6.7, -4.7, -2.3, 0.2, 2.4, 4.3, 5.9, 8.1, 10.3, 11.7, 14.1, 16.3,
                           18.7, 21.0, 22.7])
#: MCS index (TS 38.214 table 5.1.3.1-2) of the same efficiency as CQI 0..15.
NR_CQI_TO_MCS = np.array([0, 0, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27])
#: Wi-Fi noise floor over 160 MHz (dBm), as in the scenario's SNR.
WIFI_NOISE_DBM = -86.0


def nr_cqi(sinr_db: Array) -> Array:
    """CQI 0..15 from SINR (the highest CQI whose threshold the SINR meets)."""
    return np.searchsorted(NR_CQI_SINR_DB, sinr_db, side="right").astype(np.float64)


def radio_kpis(scn: Scenario, rng: np.random.Generator) -> dict[str, dict[str, Array]]:
    """Per-WAT KPI arrays of shape (steps, n_cpes) for every step of ``scn``."""
    shape = scn.capacity_mbps.shape[:2]
    ctx = scn.context
    noise = rng.standard_normal
    out: dict[str, dict[str, Array]] = {}
    sinr = ctx["nr_sinr_db"] + 0.5 * noise(shape)
    cqi = nr_cqi(sinr)
    dist = ctx["nr_distance_m"]
    out["nr"] = {
        "sinr_db": np.clip(sinr, -23.0, 40.0),
        "cqi": cqi,
        "mcs": NR_CQI_TO_MCS[cqi.astype(np.intp)].astype(np.float64),
        "rsrp_dbm": -75.0 - 20.0 * np.log10(np.maximum(dist, 1.0) / 2.0) + 1.0 * noise(shape),
        "rsrq_db": -10.5 + 0.5 * noise(shape),
        "prb_util": np.clip(0.2 + 0.05 * noise(shape), 0.0, 1.0),
        "bler": np.clip(0.1 + 0.02 * noise(shape), 0.0, 1.0),
    }
    snr = ctx["wifi_snr_db"] + 0.5 * noise(shape)
    mcs = ctx["wifi_mcs"]
    valid = mcs >= 0
    mcs_i = np.clip(mcs, 0, 11).astype(np.intp)
    margin = snr - HE_MCS_SNR_DB[mcs_i]
    stations = ctx["wifi_stations"]
    busy = 1.0 - 1.0 / (1.0 + 0.5 * stations)
    out["wifi"] = {
        "snr_db": np.clip(snr, -20.0, 80.0),
        "rssi_dbm": np.clip(snr + WIFI_NOISE_DBM, -120.0, 0.0),
        "mcs": np.where(valid, mcs, np.nan),
        "nss": np.full(shape, 2.0),
        "phy_rate_mbps": np.where(valid, HE160_2SS_MBPS[mcs_i], 0.0),
        "channel_busy": np.clip(busy + 0.03 * np.abs(noise(shape)), 0.0, 1.0),
        "retries": np.clip(0.3 * np.exp(-np.maximum(margin, 0.0) / 1.5)
                           + 0.02 * np.abs(noise(shape)), 0.0, 1.0),
        "stations": stations,
    }
    blocked = ctx["lifi_blocked"] > 0
    lsnr = np.where(blocked, -5.0 + 0.5 * noise(shape), ctx["lifi_snr_db"] + 0.3 * noise(shape))
    out["lifi"] = {
        "snr_db": np.clip(lsnr, -20.0, 80.0),
        "rx_optical_dbm": np.where(blocked, -40.0 + 0.5 * noise(shape),
                                   -10.0 + (lsnr - 9.5) / 2.0),
    }
    return out


def synthesize(scn: Scenario, *, period_s: float | None = None, delivered: Array | None = None,
               saturated: Array | None = None, censor_fraction: float = 0.0, seed: int = 0,
               cpe_prefix: str = "cpe", start_time_s: float = 0.0) -> pd.DataFrame:
    """A ``wat_kpi`` long table (one row per period, CPE and WAT) for scenario ``scn``.

    Parameters
    ----------
    period_s : float, optional
        Report period; capacity and delivered throughput are averaged over it, radio KPIs are
        those of its last step.  Default: the scenario step (0.1 s).
    delivered, saturated : arrays (steps, n_cpes, k), optional
        What the twin's connection carried and whether each subflow was capacity-limited.
        Default: a full-buffer probe (delivered = capacity, saturated).
    censor_fraction : float, default=0.0
        With the default delivered throughput, the fraction of periods made unsaturated
        (delivered 20-90 % of capacity, ``saturated`` 0), to teach the model censored history.
    """
    rng = np.random.default_rng(seed)
    steps, n, k = scn.capacity_mbps.shape
    per = max(1, round((period_s or scn.dt_s) / scn.dt_s))
    n_per = steps // per
    if n_per == 0:
        raise ValueError(f"period_s {period_s} is longer than the scenario")
    cut = n_per * per
    cap = scn.capacity_mbps[:cut].reshape(n_per, per, n, k).mean(axis=1)
    if delivered is None:
        sat = (rng.random(cap.shape) >= censor_fraction).astype(np.float64)
        dlv = np.where(sat > 0, cap, cap * rng.uniform(0.2, 0.9, cap.shape))
    else:
        dlv = np.asarray(delivered, dtype=np.float64)[:cut].reshape(n_per, per, n, k).mean(axis=1)
        sat = (np.ones_like(dlv) if saturated is None else
               np.asarray(saturated, dtype=np.float64)[:cut].reshape(n_per, per, n, k).min(axis=1))
    kpis = radio_kpis(scn, rng)
    last = np.arange(n_per) * per + per - 1
    rtt = scn.rtt_ms[last]
    times = start_time_s + (last + 1) * scn.dt_s
    frames: list[pd.DataFrame] = []
    for j, wat in enumerate(scn.wats):
        cols: dict[str, object] = {
            "time_s": np.repeat(times, n),
            "cpe": np.tile([f"{cpe_prefix}{i}" for i in range(n)], n_per),
            "wat": wat,
            "cell": f"{wat}-1",
            "capacity_mbps": cap[:, :, j].ravel(),
            "delivered_mbps": dlv[:, :, j].ravel(),
            "saturated": sat[:, :, j].ravel(),
            "rtt_ms": rtt[:, :, j].ravel(),
            "loss": np.where(cap[:, :, j] > 0, 0.001, 1.0).ravel(),
        }
        for name, arr in kpis.get(wat, {}).items():
            cols[name] = arr[last].ravel()
        frames.append(pd.DataFrame(cols))
    return pd.concat(frames, ignore_index=True).sort_values(
        ["time_s", "cpe", "wat"], kind="mergesort").reset_index(drop=True)


def frame_at(scn: Scenario, step: int, kpis: Mapping[str, Mapping[str, Array]],
             delivered: Array, saturated: Array | None = None) -> KpiFrame:
    """The :class:`KpiFrame` of one twin step for every CPE and WAT.

    ``kpis`` is :func:`radio_kpis` of the scenario (computed once); ``delivered`` and
    ``saturated`` have shape (n_cpes, k) for this step.
    """
    n, k = scn.capacity_mbps.shape[1:]
    cpe = np.repeat(np.array([f"cpe{i}" for i in range(n)]), k)
    wat = np.tile(np.array(scn.wats), n)
    values: dict[str, Array] = {
        "delivered_mbps": np.asarray(delivered, dtype=np.float64).ravel(),
        "saturated": (np.ones(n * k) if saturated is None
                      else np.asarray(saturated, dtype=np.float64).ravel()),
        "rtt_ms": scn.rtt_ms[step].ravel(),
    }
    for j, w in enumerate(scn.wats):
        for name, arr in kpis.get(w, {}).items():
            col = values.setdefault(name, np.full(n * k, np.nan))
            col[j::k] = arr[step]
    return KpiFrame(time_s=float((step + 1) * scn.dt_s), cpe=cpe, wat=wat, values=values)
