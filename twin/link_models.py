"""The twin's link models: capacity, SNR or SINR and MCS of 802.11ax Wi-Fi, 5G NR and
LiFi in both directions, from the physical drivers a scenario draws (distances, shadowing,
contending stations, interference, blockage; :mod:`twin.scenarios` draws them and assembles
the traces).

*Wi-Fi* (802.11ax, 160 MHz at 5.25 GHz, 2 spatial streams as the CPE's Intel AX201), built so
that it behaves like a real link at the 100 ms scale of the twin:

1. *Mean SNR.* Log-distance path loss ``PL(d) = FSPL(1 m) + 10 n log10(d) + wall(d) + X_shadow``
   with ``FSPL(1 m) = 46.8 dB``, ``n = 3.3`` (indoor corridor), 10 dB extra once the route leaves
   the lab (``d > 12 m``, faded in over the door's ~1 m diffraction zone) and log-normal
   shadowing (3 dB, correlated over 5 s: bodies and furniture change the path over metres,
   i.e. seconds at walking pace; a smooth process, :func:`twin.processes.smooth_ar`, since
   shadows have soft diffraction edges).  SNR = 23 dBm EIRP - PL + 86 dB (noise floor of
   160 MHz: -174 dBm/Hz + 82 dB + 6 dB noise figure).
2. *Effective SNR with frequency diversity.*  Narrowband Rayleigh fading swings the SNR by
   5.6 dB (std), but an OFDM receiver decoding a 160 MHz codeword sees about 2000 subcarriers
   spread over ~30 independent fading blocks (coherence bandwidth ~5 MHz for the 30-50 ns delay
   spread of offices), times 2 receive antennas.  The effective (EESM/MIESM) SNR of such a
   channel fluctuates by about 1 dB per fading realisation (:data:`WIFI_EFF_SNR_DB`), and at
   5.25 GHz with scatterers moving at walking speed (people, 1.2 m/s: Doppler 21 Hz, coherence
   time ~20 ms; the AP itself is carried at 0.2 m/s) a 100 ms step averages ~5 realisations:
   the step's effective SNR jitters by 1/sqrt(5) of that, independently from step to step
   (:data:`WIFI_STEP_JITTER_DB`).
3. *Goodput, not a step function.*  The packet error rate of MCS ``m`` is a logistic curve of the
   effective SNR, ``PER_m(s) = 1 / (1 + 9 exp((s - s_m) / a))``, equal to 10 % at the MCS's
   sensitivity SNR ``s_m`` (:data:`HE_MCS_SNR_DB`, the usual 802.11ax figures at 10 % PER).  The
   scale ``a`` (:data:`WIFI_PER_SCALE_DB`) combines the LDPC waterfall (10 % to 1 % PER in about
   1 dB, scale 0.45 dB) with the fading realisations averaged inside the step (1 dB, moment-matched
   to a logistic).  With A-MPDU aggregation and block-ack every errored MPDU is retransmitted, so
   the MCS delivers ``rate_m * (1 - PER_m(s))``.
4. *Rate adaptation* (Minstrel-HT-like): the MCS is the one of the best expected goodput
   ``rate_m * (1 - PER_m(s_hat))`` for ``s_hat``, the effective SNR averaged with Minstrel's
   EWMA (weight 0.25 on each new 100 ms statistics interval: a 0.35 s time constant), so the
   rate follows the channel with a lag and does not chase each step's jitter.  The step then
   delivers that MCS's goodput at the step's own effective SNR.  ``context["wifi_mcs"]`` is that
   MCS.  Below :data:`WIFI_ASSOC_MIN_SNR_DB` the station loses the beacons and the link is down
   (capacity 0, MCS -1).
5. *Capacity* = goodput x MAC/TCP efficiency 0.4955 (calibrated so that MCS 11 at 1 m gives the
   paper's 1.19 Gbps) x the airtime share ``1 / (1 + 0.5 * stations)`` x a log-normal
   interference factor (7 %, correlated over 2 s, smooth: other networks' load changes as
   their flows start and end).

*5G NR* (50 MHz, 2x2, throughput TDD pattern): 342 Mbps at SINR >= 25 dB, scaled by
``log2(1 + SINR) / log2(1 + 10^2.5)`` below, SINR falling 20 dB per decade of distance from
30 dB at 2 m, with 1 % jitter: the paper's 5G was "extremely stable".

*LiFi* (16.6 MHz, pureLiFi LiFi-XC): ``0.27 * 16.6 * log2(1 + SNR)`` Mbps capped at 42 Mbps, with
SNR about 9.5 dB plus 1 dB jitter, short fades (dongle orientation, people passing: a few per
minute, 4-8 dB, 0.3-1.5 s) and occasional boosts (up to 20 Mbps).  The static trace is rescaled
so its mean is exactly the paper's 12.1 Mbps.  A blocked LiFi link has capacity 0.

*Uplink* (``ul``, CPE to proxy).  The paper measured the downlink only (section 6.2: the proxy,
with one interface, sends to the CPE), so every figure above is ``dl``, and
:func:`twin.scenarios.build` draws the downlink exactly as the one-direction twin did.  The
uplink capacity of each WAT is what a saturating transfer in that direction alone would get
(concurrent transfers in both directions would share Wi-Fi airtime; the twin does not model
that coupling).  It keeps the downlink's
geometry (distances, shadowing, stations, LiFi blockage and fades: the path is reciprocal) and
draws its own receiver noise and interference from a separate random stream:

* 5G NR: TDD gives the uplink the symbols the downlink does not have.  The paper's throughput
  pattern (section 6.1: 5 ms period, 7 DL slots, a special slot of 6 DL and 4 UL symbols, 2 UL
  slots) has 104 DL and 32 UL symbols per period, so the uplink peak is
  ``342 * 32 / 104 = 105`` Mbps (:data:`NR_UL_PEAK_MBPS`, 31 % of the downlink; the usual
  DDDSU pattern gives the same 1/4-1/3), assuming 2 uplink layers and the same modulation as
  the downlink.  The uplink SINR is 3 dB below the downlink's (:data:`NR_UL_SINR_OFFSET_DB`:
  the modem's 23 dBm against the gNB), which only matters beyond ~3 m; own 1 % jitter.
* Wi-Fi: one station and the access point share the channel's airtime, and a backlogged
  transfer in either direction gets all of it, so the uplink is close to the downlink: the
  same 802.11ax PHY (the AX201 sends 2 spatial streams), MAC efficiency and contention, but
  the station transmits at about 20 dBm against the AP's 23 dBm EIRP
  (:data:`WIFI_UL_SNR_OFFSET_DB`, lower MCSs far from the AP), with its own fading
  realisations, rate adaptation (the station's Minstrel) and interference (what the AP hears,
  not what the station hears; in ``paper-static`` calibrated as the downlink's, mean 1.19 Gbps
  within 1.0-1.4 Gbps).  Near the AP both directions sit at MCS 11.
* LiFi: the uplink is infrared (visible light would dazzle the user), from the dongle's IR LED
  to the access point's photodiode; its optical budget is smaller than the luminaire's (eye
  safety, USB power), taken as 3 dB of electrical SNR (:data:`LIFI_UL_SNR_OFFSET_DB`) plus an
  independent 0.5 dB receiver jitter; the same capacity formula and 42 Mbps cap, and the
  downlink's blockage (one line of sight).  ``paper-static`` rescales it by the downlink's
  calibration factor, which keeps the physical ratio: about 8.9 Mbps against 12.1.

These offsets are engineering assumptions, not measurements of the paper's testbed; the
``paper-static`` means are 5G 105 Mbps, Wi-Fi 1.19 Gbps and LiFi 8.9 Mbps uplink.  In
``wifi-walk`` the directions rank the WATs differently: far from the AP the downlink's 5G
(342 Mbps) beats Wi-Fi about half of the time, the uplink's 5G (105 Mbps) rarely does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from twin.processes import Array, ar1, episodes, first_order

#: 802.11ax HE PHY rates (Mbps) for MCS 0..11, 160 MHz, 2 spatial streams, 0.8 µs guard interval.
HE160_2SS_MBPS = np.array([144.1, 288.2, 432.4, 576.5, 864.7, 1152.9, 1297.1, 1441.2,
                           1729.4, 1921.6, 2161.8, 2401.9])


#: Effective SNR (dB) at which each MCS has 10 % PER: the usual 802.11ax sensitivity steps
#: (BPSK 1/2 at 2 dB ... 1024-QAM 5/6 at 37 dB, 160 MHz, LDPC).
HE_MCS_SNR_DB = np.array([2.0, 5.0, 9.0, 11.0, 15.0, 18.0, 20.0, 25.0, 29.0, 31.0, 34.0, 37.0])


WIFI_MAC_EFFICIENCY = 0.4955  # 2401.9 Mbps PHY -> 1190 Mbps TCP goodput (paper, section 6.2)


#: Std of the wideband effective SNR per fading realisation (dB): ~30 independent blocks of a
#: 160 MHz channel x 2 antennas average the 5.6 dB of narrowband Rayleigh down to about 1 dB.
WIFI_EFF_SNR_DB = 1.0


#: Fading realisations in a 100 ms step: coherence time ~20 ms at 5.25 GHz and 1.2 m/s.
WIFI_REALISATIONS_PER_STEP = 5


#: Std of the step-averaged effective SNR (dB), independent from step to step.
WIFI_STEP_JITTER_DB = WIFI_EFF_SNR_DB / float(np.sqrt(WIFI_REALISATIONS_PER_STEP))


#: Logistic scale of the LDPC waterfall (dB): PER 10 % -> 1 % over about 1 dB.
WIFI_WATERFALL_DB = 0.45


#: PER curve scale (dB) of a step: the waterfall convolved with the in-step realisations
#: (a Gaussian of std WIFI_EFF_SNR_DB, moment-matched: logistic std = scale * pi / sqrt(3)).
WIFI_PER_SCALE_DB = float(np.sqrt(WIFI_WATERFALL_DB ** 2
                                  + (WIFI_EFF_SNR_DB * np.sqrt(3.0) / np.pi) ** 2))


#: Weight of the newest 100 ms interval in Minstrel-HT's EWMA of success probability.
WIFI_RA_EWMA = 0.25


#: Below this averaged SNR the station misses the beacons (sent at MCS 0 rates, PER > 80 %)
#: and disassociates: the link is down.
WIFI_ASSOC_MIN_SNR_DB = HE_MCS_SNR_DB[0] - 3.0


NR_PEAK_MBPS = 342.0


LIFI_PEAK_MBPS = 42.0


#: Symbols per 5 ms period of the paper's throughput TDD pattern (section 6.1; 30 kHz SCS,
#: 10 slots of 14 symbols): 7 DL slots + 6 DL symbols of the special slot, and 2 UL slots + its
#: 4 UL symbols (4 guard symbols).
NR_DL_SYMBOLS = 7 * 14 + 6


NR_UL_SYMBOLS = 2 * 14 + 4


#: 5G NR uplink peak: the downlink's 342 Mbps scaled by the uplink's share of the symbols
#: (same 2 layers and modulation assumed): 105 Mbps, 31 % of the downlink.
NR_UL_PEAK_MBPS = NR_PEAK_MBPS * NR_UL_SYMBOLS / NR_DL_SYMBOLS


#: Uplink SINR below the downlink's: the modem's 23 dBm against the gNB's higher power over
#: the same, reciprocal path loss.
NR_UL_SINR_OFFSET_DB = -3.0


#: Wi-Fi uplink SNR below the downlink's: the station (Intel AX201) transmits about 20 dBm
#: against the access point's 23 dBm EIRP.
WIFI_UL_SNR_OFFSET_DB = -3.0


#: LiFi uplink SNR below the downlink's: the dongle's infrared LED has a smaller optical
#: budget than the luminaire (eye safety, USB power); electrical SNR grows with the square of
#: the optical power, so 1.5 optical dB.
LIFI_UL_SNR_OFFSET_DB = -3.0


def wifi_per(mcs: NDArray[np.intp], snr_db: Array) -> Array:
    """Packet error rate of MCS ``mcs`` (0..11) at effective SNR ``snr_db`` (module docstring)."""
    z = np.minimum((snr_db - HE_MCS_SNR_DB[mcs]) / WIFI_PER_SCALE_DB, 50.0)
    return np.asarray(1.0 / (1.0 + 9.0 * np.exp(z)))


def _mcs_switch_points() -> Array:
    """Averaged SNR above which MCS m has the best expected goodput (m = 0..11).

    The best MCS is a non-decreasing function of the SNR; its switch points are found once on
    a 0.01 dB grid, so rate adaptation is a ``searchsorted`` per step.
    """
    grid = np.arange(-10.0, 60.0, 0.01)
    goodput = HE160_2SS_MBPS[:, None] * (1.0 - wifi_per(np.arange(12)[:, None], grid[None, :]))
    best = goodput.argmax(axis=0)
    points = np.full(12, np.inf)
    for m in range(12):
        hit = np.flatnonzero(best >= m)
        if len(hit):
            points[m] = grid[hit[0]]
    points[0] = -np.inf
    return points


MCS_SWITCH_DB = _mcs_switch_points()


def rate_adaptation(snr_db: Array) -> Array:
    """MCS chosen by the Minstrel-like rate adaptation for step SNRs ``snr_db`` (steps, n).

    -1 where the averaged SNR is below :data:`WIFI_ASSOC_MIN_SNR_DB` (disassociated).
    """
    a = WIFI_RA_EWMA
    avg = first_order(snr_db, a, 1.0 - a, snr_db[0])
    mcs = np.searchsorted(MCS_SWITCH_DB, avg, side="right") - 1
    return np.where(avg >= WIFI_ASSOC_MIN_SNR_DB, mcs, -1).astype(np.float64)


def wifi_capacity(snr_db: Array, stations: Array, interference: Array,
                  mcs: Array | None = None) -> tuple[Array, Array]:
    """Capacity (Mbps) and MCS index from effective SNR, contending stations and interference.

    ``mcs`` is the rate adaptation's choice (default: :func:`rate_adaptation` of ``snr_db``).
    """
    if mcs is None:
        mcs = rate_adaptation(snr_db)
    m = np.clip(mcs, 0, 11).astype(np.intp)
    goodput = np.where(mcs >= 0, HE160_2SS_MBPS[m] * (1.0 - wifi_per(m, snr_db)), 0.0)
    share = 1.0 / (1.0 + 0.5 * stations)
    return goodput * WIFI_MAC_EFFICIENCY * share * interference, mcs


def wifi_snr(distance_m: Array, exponent: Array, shadow: Array,
             fast: NDArray[np.floating[Any]]) -> Array:
    """Effective SNR (dB) of the log-distance model described in the module docstring."""
    fspl_1m = 46.8
    # In place: at 10,000 CPEs each temporary is a 200 MB array.
    path_loss = np.maximum(distance_m, 0.5)
    np.log10(path_loss, out=path_loss)
    path_loss *= 10.0 * exponent
    # The lab door at 12 m: 10 dB once the AP is outside, faded in over the door's diffraction
    # zone (Fresnel radius sqrt(lambda d / 2) ~ 0.6 m at 5.25 GHz: 10-90 % over ~1.2 m).
    wall = np.subtract(12.0, distance_m)
    wall /= 0.27
    np.exp(wall, out=wall)
    wall += 1.0
    np.divide(10.0, wall, out=wall)
    path_loss += wall
    path_loss += shadow
    path_loss += fast
    return np.subtract(23.0 + 86.0 - fspl_1m, path_loss, out=path_loss)


def nr_link(distance_m: Array, jitter: Array, peak_mbps: float = NR_PEAK_MBPS,
            sinr_offset_db: float = 0.0) -> tuple[Array, Array]:
    """(capacity Mbps, SINR dB) of the 5G NR model; the defaults are the downlink's."""
    sinr = 30.0 + sinr_offset_db - 20.0 * np.log10(np.maximum(distance_m, 1.0) / 2.0)
    ref = np.log2(1.0 + 10.0 ** 2.5)
    frac = np.minimum(1.0, np.log2(1.0 + 10.0 ** (sinr / 10.0)) / ref)
    return peak_mbps * frac * (1.0 + 0.01 * jitter), sinr


def lifi_link(rng: np.random.Generator, steps: int, n: int, blocked: Array
              ) -> tuple[Array, Array]:
    """(capacity Mbps, SNR dB) of the LiFi model; NaN SNR and 0 capacity while blocked."""
    snr = 9.5 + 1.0 * ar1(rng, steps, n, 1.0)
    fades = episodes(rng, steps, n, per_min=4.0, min_s=0.3, max_s=1.5)
    depth = rng.uniform(4.0, 8.0, (1, n))
    boosts = episodes(rng, steps, n, per_min=1.0, min_s=0.5, max_s=2.0)
    snr = snr - fades * depth + boosts * 4.0
    cap = np.where(blocked > 0, 0.0, lifi_capacity(snr))
    return cap, np.where(blocked > 0, np.nan, snr)


def lifi_capacity(snr_db: Array) -> Array:
    """LiFi capacity (Mbps) at SNR ``snr_db`` (16.6 MHz, 0.27 of Shannon, 42 Mbps cap)."""
    return np.minimum(LIFI_PEAK_MBPS, 0.27 * 16.6 * np.log2(1.0 + 10.0 ** (snr_db / 10.0)))
