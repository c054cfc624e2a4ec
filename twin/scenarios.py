"""Scenarios of the twin: per-WAT capacity and RTT traces, and the physical drivers behind them.

A :class:`Scenario` holds arrays of shape ``(steps, n_cpes, k)`` sampled every ``dt_s`` (0.1 s)
for the WATs ``wats`` (5G NR, Wi-Fi, LiFi, in :data:`xapp.core.policy.KNOWN_WATS` order), for
both directions (``dl`` proxy to CPE, ``ul`` CPE to proxy; a scenario is viewed in one of them,
:meth:`Scenario.toward` switches).  Build one with :func:`build`; the same
``(name, n_cpes, seed, duration_s)`` always gives the same arrays.

Scenarios
---------
``paper-static``
    Paper 000, sections 6.2-6.3: the CPE next to the gNB and access points.  5G NR 342 Mbps,
    extremely stable (Faraday cage), one-way delay 10.1 ms; Wi-Fi 6 at 1 m, 1.0-1.4 Gbps with an
    average of 1.19 Gbps (interference from other networks), 1.28 ms; LiFi 5-20 Mbps with an
    average of 12.1 Mbps, 1.08 ms.  Default duration 120 s.
``wifi-walk``
    Section 6.5: the CPE stays near the gNB (steady 5G) while the Wi-Fi access point is carried
    away and back over a 50 m round trip in 4 min 10 s (250 s, the default duration).  LiFi is
    kept (the paper dropped it) with blockage episodes, to exercise a WAT that disappears.
``lockin``
    The censoring trap of the design brief: Wi-Fi starts crowded (30 other active stations, about
    75 Mbps) and the crowd leaves after 60 s (about 1.19 Gbps).  A history-only estimator that
    learnt "Wi-Fi is slow" under WRR never sees the rise; see ``xapp.core.ewma``.  Default 180 s.

How the traces are built
------------------------
*Wi-Fi* (802.11ax, 160 MHz at 5.25 GHz, 2 spatial streams as the CPE's Intel AX201), built so
that it behaves like a real link at the 100 ms scale of the twin:

1. *Mean SNR.* Log-distance path loss ``PL(d) = FSPL(1 m) + 10 n log10(d) + wall(d) + X_shadow``
   with ``FSPL(1 m) = 46.8 dB``, ``n = 3.3`` (indoor corridor), 10 dB extra once the route leaves
   the lab (``d > 12 m``, faded in over the door's ~1 m diffraction zone) and log-normal
   shadowing (3 dB, correlated over 5 s: bodies and furniture change the path over metres,
   i.e. seconds at walking pace; a smooth process, :func:`smooth_ar`, since shadows have soft
   diffraction edges).  SNR = 23 dBm EIRP - PL + 86 dB (noise floor of 160 MHz: -174 dBm/Hz
   + 82 dB + 6 dB noise figure).
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
with one interface, sends to the CPE), so every figure above is ``dl``, and ``build`` draws the
downlink exactly as the one-direction twin did.  The uplink capacity of each WAT is what a
saturating transfer in that direction alone would get (concurrent transfers in both directions
would share Wi-Fi airtime; the twin does not model that coupling).  It keeps the downlink's
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

*RTT* (ms) is twice the paper's one-way delay plus a serialisation/retransmission term
``24 / capacity`` (two 1500-byte packets queued) and 5 % jitter; NaN while a WAT has no capacity.
Each direction's RTT is the one its sender measures: the queueing term uses that direction's
capacity, the jitter is drawn per direction.

Several CPEs (``n_cpes > 1``) get their own random draws from ``seed``: their own noise, a walk
phase (time offset) for ``wifi-walk``, path-loss exponent ``n ± 0.2``, distance to the gNB
(2-15 m) and LiFi blockage episodes.  CPE 0 of ``paper-static`` and ``wifi-walk`` is the
paper's CPE (no phase offset, 2 m from the gNB).

``context`` keys (each an array of shape ``(steps, n_cpes)``, present in every scenario; values
fixed per CPE are read-only broadcast views, so copy before writing)
---------------------------------------------------------------------------------------------
``wifi_distance_m``   distance CPE to Wi-Fi access point (m)
``wifi_stations``     other active stations contending for the Wi-Fi channel (count)
``wifi_snr_db``       Wi-Fi effective SNR of the step: path loss, shadowing, fading (dB)
``wifi_mcs``          802.11ax MCS index chosen by rate adaptation (0-11; -1 out of range)
``nr_distance_m``     distance CPE to gNB (m)
``nr_sinr_db``        5G NR downlink SINR (dB)
``lifi_blocked``      1.0 while the LiFi line of sight is blocked, else 0.0
``lifi_snr_db``       LiFi SNR (dB; NaN while blocked)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.signal import lfilter

from xapp.core.policy import KNOWN_WATS

#: WATs every scenario carries, in :data:`xapp.core.policy.KNOWN_WATS` order.
WATS: tuple[str, ...] = tuple(w for w in KNOWN_WATS if w in ("nr", "wifi", "lifi"))

DT_S = 0.1

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

#: Directions of a scenario: ``dl`` proxy to CPE (what the paper measured), ``ul`` CPE to
#: proxy.  Their construction is in the module docstring ("Uplink").
DIRECTIONS: tuple[str, ...] = ("dl", "ul")
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
ONE_WAY_MS = {"nr": 10.1, "wifi": 1.28, "lifi": 1.08}  # paper, section 6.3

Array = NDArray[np.float64]


class ScenarioError(ValueError):
    """Unknown scenario name or arguments out of range."""


@dataclass(frozen=True)
class Scenario:
    """Ground truth for the twin: what each WAT of each CPE could carry at each step.

    A scenario is viewed in one direction (``direction``: ``dl``, the paper's, by default);
    ``capacity_mbps`` and ``rtt_ms`` are that direction's, so every single-direction policy
    runs on a view unchanged.  :meth:`toward` gives the view of the other direction and
    :meth:`capacity` / :meth:`rtt` read either without switching.
    """

    name: str
    dt_s: float
    wats: tuple[str, ...]
    #: True capacity in Mbps of ``direction``, shape (steps, n_cpes, k).
    capacity_mbps: Array
    #: Round-trip time in ms seen by ``direction``'s sender, shape (steps, n_cpes, k); NaN
    #: where the WAT has no capacity.
    rtt_ms: Array
    #: Physical drivers, each (steps, n_cpes); keys in the module docstring.
    context: Mapping[str, Array]
    description: str = ""
    #: The direction ``capacity_mbps`` and ``rtt_ms`` belong to.
    direction: str = "dl"
    #: ``(capacity_mbps, rtt_ms)`` of the other direction; None for a one-direction scenario.
    reverse: tuple[Array, Array] | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ScenarioError(f"direction must be one of {list(DIRECTIONS)}, "
                                f"got {self.direction!r}")
        if self.reverse is not None and (self.reverse[0].shape != self.capacity_mbps.shape
                                         or self.reverse[1].shape != self.rtt_ms.shape):
            raise ScenarioError("the two directions' arrays must have the same shape")

    @property
    def directions(self) -> tuple[str, ...]:
        """The directions this scenario carries (both, or only its own)."""
        return DIRECTIONS if self.reverse is not None else (self.direction,)

    def toward(self, direction: str) -> Scenario:
        """The same scenario seen in ``direction`` (``dl`` or ``ul``)."""
        if direction == self.direction:
            return self
        if direction not in DIRECTIONS:
            raise ScenarioError(f"direction must be one of {list(DIRECTIONS)}, "
                                f"got {direction!r}")
        if self.reverse is None:
            raise ScenarioError(f"scenario {self.name!r} has no {direction} direction")
        cap, rtt = self.reverse
        return replace(self, capacity_mbps=cap, rtt_ms=rtt, direction=direction,
                       reverse=(self.capacity_mbps, self.rtt_ms))

    def capacity(self, direction: str) -> Array:
        """True capacity (steps, n_cpes, k) of ``direction``."""
        return self.toward(direction).capacity_mbps

    def rtt(self, direction: str) -> Array:
        """RTT (steps, n_cpes, k) seen by ``direction``'s sender."""
        return self.toward(direction).rtt_ms

    @property
    def steps(self) -> int:
        return int(self.capacity_mbps.shape[0])

    @property
    def n_cpes(self) -> int:
        return int(self.capacity_mbps.shape[1])

    @property
    def duration_s(self) -> float:
        return self.steps * self.dt_s

    @property
    def time_s(self) -> Array:
        """Start time of each step, shape (steps,)."""
        return np.arange(self.steps, dtype=np.float64) * self.dt_s


@dataclass(frozen=True)
class _Spec:
    #: (steps, rng, n_cpes, uplink rng) -> the arrays of :func:`_assemble`.
    builder: Callable[[int, np.random.Generator, int, np.random.Generator], dict[str, Array]]
    default_duration_s: float
    description: str


#: From this many CPEs on, first-order filters run as a loop over time steps on contiguous rows:
#: scipy's lfilter along axis 0 walks each CPE's column with a stride of n values and is
#: several times slower for thousands of CPEs.
ROW_LOOP_MIN_CPES = 64


def first_order(x: NDArray[np.floating[Any]], gain: float, a: float, y_prev: Array) -> Array:
    """``y[t] = a * y[t-1] + gain * x[t]`` along axis 0, with ``y[-1] = y_prev`` (n,)."""
    if x.shape[1] < ROW_LOOP_MIN_CPES:
        y, _ = lfilter([gain], [1.0, -a], x, axis=0, zi=(a * y_prev)[None, :])
        return np.asarray(y, dtype=np.float64)
    y = np.multiply(x, gain, dtype=np.float64)
    tmp = np.empty(x.shape[1])
    np.multiply(y_prev, a, out=tmp)
    y[0] += tmp
    for t in range(1, len(y)):
        np.multiply(y[t - 1], a, out=tmp)
        y[t] += tmp
    return np.asarray(y, dtype=np.float64)


def ar1(rng: np.random.Generator, steps: int, n: int, corr_s: float) -> Array:
    """Unit-variance Gaussian AR(1) noise, shape (steps, n), correlation time ``corr_s``."""
    a = float(np.exp(-DT_S / corr_s)) if corr_s > 0 else 0.0
    e = rng.standard_normal((steps, n), dtype=np.float32)  # float32 draws: twice as fast
    x0 = rng.standard_normal(n)  # stationary start: var(y0) = (1 - a²) + a² = 1
    b = np.sqrt(1.0 - a * a)
    return first_order(e, b, a, x0)


def smooth_ar(rng: np.random.Generator, steps: int, n: int, corr_s: float) -> Array:
    """Unit-variance Gaussian noise with differentiable paths, correlation time about ``corr_s``.

    Two cascaded first-order stages of ``corr_s / 2`` each (a critically damped second-order
    process).  Slow physical drivers (an obstacle's shadow has soft diffraction edges ~0.5 m
    wide; other networks' load changes flow by flow) change smoothly below their decorrelation
    scale, whereas one first-order stage has white increments and jumps at every step.  The
    first ``3 corr_s`` seconds are generated and dropped, so the trace starts stationary.
    """
    a = float(np.exp(-DT_S / (corr_s / 2.0)))
    burn = int(np.ceil(3.0 * corr_s / DT_S))
    x = ar1(rng, steps + burn, n, corr_s / 2.0)
    y = first_order(x, 1.0 - a, a, x[0])
    return np.asarray(y[burn:] * ((1.0 + a) / np.sqrt(1.0 + a * a)), dtype=np.float64)


def _episodes(rng: np.random.Generator, steps: int, n: int, per_min: float,
              min_s: float, max_s: float) -> Array:
    """0/1 mask of episodes starting as a Poisson process, each of uniform length."""
    p_start = per_min / 60.0 * DT_S
    t, c = np.nonzero(rng.random((steps, n), dtype=np.float32) < p_start)
    lengths = np.maximum(1, np.rint(rng.uniform(min_s, max_s, len(t)) / DT_S).astype(np.int64))
    # Difference array: +1 where an episode starts, -1 one past its end; overlaps add up.
    edges = np.zeros((steps + 1, n), dtype=np.int32)
    np.add.at(edges, (t, c), 1)
    np.add.at(edges, (np.minimum(t + lengths, steps), c), -1)
    if n < ROW_LOOP_MIN_CPES:
        np.cumsum(edges, axis=0, out=edges)
    else:  # contiguous rows, as in first_order
        for i in range(1, steps):
            edges[i] += edges[i - 1]
    return (edges[:-1] > 0).astype(np.float64)


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
    fades = _episodes(rng, steps, n, per_min=4.0, min_s=0.3, max_s=1.5)
    depth = rng.uniform(4.0, 8.0, (1, n))
    boosts = _episodes(rng, steps, n, per_min=1.0, min_s=0.5, max_s=2.0)
    snr = snr - fades * depth + boosts * 4.0
    cap = np.where(blocked > 0, 0.0, lifi_capacity(snr))
    return cap, np.where(blocked > 0, np.nan, snr)


def lifi_capacity(snr_db: Array) -> Array:
    """LiFi capacity (Mbps) at SNR ``snr_db`` (16.6 MHz, 0.27 of Shannon, 42 Mbps cap)."""
    return np.minimum(LIFI_PEAK_MBPS, 0.27 * 16.6 * np.log2(1.0 + 10.0 ** (snr_db / 10.0)))


def _rtt(rng: np.random.Generator, capacity: Array) -> Array:
    """RTT (ms) of every WAT from the stacked capacities (steps, n, k)."""
    up = capacity > 0
    rtt = np.full(capacity.shape, np.nan)
    np.divide(24.0, capacity, out=rtt, where=up)  # in place: these arrays are 600 MB at 10k CPEs
    rtt += np.array([2.0 * ONE_WAY_MS[w] for w in WATS])
    jitter = np.abs(rng.standard_normal(capacity.shape, dtype=np.float32))
    jitter *= 0.05
    jitter += 1.0
    rtt *= jitter
    return rtt


def _assemble(rng: np.random.Generator, steps: int, n: int, *, wifi_distance: Array,
              wifi_stations: Array, wifi_interference: Array, exponent: Array,
              nr_distance: Array, lifi_blocked: Array, lifi_mean: float | None,
              rng_ul: np.random.Generator, wifi_interference_ul: Array
              ) -> dict[str, Array]:
    """Both directions' capacities and RTTs and the context.

    The downlink draws from ``rng`` exactly as before the uplink existed (so its traces, and
    every downlink figure, are unchanged); the uplink's own noise comes from ``rng_ul``.
    """
    shadow = 3.0 * smooth_ar(rng, steps, n, 5.0)
    fast = WIFI_STEP_JITTER_DB * rng.standard_normal((steps, n), dtype=np.float32)
    snr = wifi_snr(wifi_distance, exponent, shadow, fast)
    wifi_cap, mcs = wifi_capacity(snr, wifi_stations, wifi_interference)
    nr_cap, nr_sinr = nr_link(nr_distance, ar1(rng, steps, n, 2.0))
    lifi_cap, lifi_snr = lifi_link(rng, steps, n, lifi_blocked)
    lifi_scale = None
    if lifi_mean is not None:  # paper-static: match the measured average exactly
        lifi_scale = lifi_mean / lifi_cap.mean(axis=0, keepdims=True)
        lifi_cap = lifi_cap * lifi_scale
    caps = {"nr": nr_cap, "wifi": wifi_cap, "lifi": lifi_cap}
    capacity = np.stack([caps[w] for w in WATS], axis=-1)
    rtt = _rtt(rng, capacity)
    # Uplink: the same geometry (distance, shadowing, stations, blockage: the path is
    # reciprocal), its own transmit power, receiver noise and interference.
    fast_ul = WIFI_STEP_JITTER_DB * rng_ul.standard_normal((steps, n), dtype=np.float32)
    snr_ul = wifi_snr(wifi_distance, exponent, shadow, fast_ul)
    snr_ul += WIFI_UL_SNR_OFFSET_DB
    wifi_ul, _ = wifi_capacity(snr_ul, wifi_stations, wifi_interference_ul)
    nr_ul, _ = nr_link(nr_distance, ar1(rng_ul, steps, n, 2.0), NR_UL_PEAK_MBPS,
                       NR_UL_SINR_OFFSET_DB)
    lifi_snr_ul = lifi_snr + LIFI_UL_SNR_OFFSET_DB + 0.5 * ar1(rng_ul, steps, n, 1.0)
    lifi_ul = np.where(lifi_blocked > 0, 0.0,
                       lifi_capacity(np.nan_to_num(lifi_snr_ul, nan=-np.inf)))
    if lifi_scale is not None:  # the downlink's calibration factor: keep the physical ratio
        lifi_ul = np.minimum(LIFI_PEAK_MBPS, lifi_ul * lifi_scale)
    caps_ul = {"nr": nr_ul, "wifi": wifi_ul, "lifi": lifi_ul}
    capacity_ul = np.stack([caps_ul[w] for w in WATS], axis=-1)
    out: dict[str, Array] = {
        "capacity": capacity,
        "rtt": rtt,
        "capacity_ul": capacity_ul,
        "rtt_ul": _rtt(rng_ul, capacity_ul),
        "wifi_distance_m": wifi_distance,
        "wifi_stations": np.broadcast_to(wifi_stations, (steps, n)),
        "wifi_snr_db": snr, "wifi_mcs": mcs,
        # The gNB distance is fixed per CPE: read-only views, not (steps, n) copies.
        "nr_distance_m": np.broadcast_to(nr_distance, (steps, n)),
        "nr_sinr_db": np.broadcast_to(nr_sinr, (steps, n)),
        "lifi_blocked": lifi_blocked, "lifi_snr_db": lifi_snr,
    }
    return out


def _interference(rng: np.random.Generator, steps: int, n: int) -> Array:
    return np.exp(0.07 * smooth_ar(rng, steps, n, 2.0) - 0.5 * 0.07 ** 2)


def _nr_distance(rng: np.random.Generator, steps: int, n: int) -> Array:
    d = rng.uniform(2.0, 15.0, n)
    d[0] = 2.0  # the paper's CPE sits next to the gNB
    return d[None, :]  # (1, n): fixed over time


def _paper_interference(rng: np.random.Generator, steps: int, n: int) -> Array:
    """Wi-Fi at 1 m sits at MCS 11; its 1.0-1.4 Gbps spread is interference, not path loss."""
    inter = _interference(rng, steps, n)
    inter = inter / inter.mean(axis=0, keepdims=True)  # mean the paper's 1.19 Gbps
    # within its 1.0-1.4 Gbps
    return np.asarray(np.clip(inter, 1000.0 / 1190.0, 1400.0 / 1190.0), dtype=np.float64)


def _paper_static(steps: int, rng: np.random.Generator, n: int,
                  rng_ul: np.random.Generator) -> dict[str, Array]:
    zeros = np.zeros((steps, n))
    inter = _paper_interference(rng, steps, n)
    return _assemble(rng, steps, n, wifi_distance=zeros + 1.0, wifi_stations=zeros,
                     wifi_interference=inter, exponent=np.full((1, n), 3.3),
                     nr_distance=np.full((1, n), 2.0), lifi_blocked=zeros,
                     lifi_mean=12.1, rng_ul=rng_ul,
                     wifi_interference_ul=_paper_interference(rng_ul, steps, n))


def walk_distance(time_s: Array, period_s: float = 250.0, far_m: float = 25.0,
                  near_m: float = 1.0) -> Array:
    """Distance of an AP carried at a steady pace away and back (50 m round trip)."""
    d = np.mod(time_s, period_s)
    d *= -2.0 / period_s
    d += 1.0
    np.abs(d, out=d)  # |1 - 2 phase|: 1 at the start, 0 at the turning point
    d *= -(far_m - near_m)
    d += far_m
    return d


def _wifi_walk(steps: int, rng: np.random.Generator, n: int,
               rng_ul: np.random.Generator) -> dict[str, Array]:
    t = np.arange(steps) * DT_S
    offset = rng.uniform(0.0, 250.0, n)
    offset[0] = 0.0
    distance = walk_distance(t[:, None] + offset[None, :])
    stations = rng.integers(0, 3, n).astype(np.float64)[None, :]  # (1, n): fixed over time
    stations[:, 0] = 0.0
    exponent = 3.3 + rng.uniform(-0.2, 0.2, (1, n))
    exponent[0, 0] = 3.3
    blocked = _episodes(rng, steps, n, per_min=1.0, min_s=2.0, max_s=8.0)
    return _assemble(rng, steps, n, wifi_distance=distance, wifi_stations=stations,
                     wifi_interference=_interference(rng, steps, n), exponent=exponent,
                     nr_distance=_nr_distance(rng, steps, n), lifi_blocked=blocked,
                     lifi_mean=None, rng_ul=rng_ul,
                     wifi_interference_ul=_interference(rng_ul, steps, n))


def _lockin(steps: int, rng: np.random.Generator, n: int,
            rng_ul: np.random.Generator) -> dict[str, Array]:
    t = np.arange(steps) * DT_S
    leave = 60.0 + rng.uniform(0.0, 20.0, n)
    leave[0] = 60.0
    stations = np.where(t[:, None] < leave[None, :], 30.0, 0.0)
    zeros = np.zeros((steps, n))
    return _assemble(rng, steps, n, wifi_distance=zeros + 1.0, wifi_stations=stations,
                     wifi_interference=_interference(rng, steps, n),
                     exponent=np.full((1, n), 3.3), nr_distance=_nr_distance(rng, steps, n),
                     lifi_blocked=zeros, lifi_mean=None, rng_ul=rng_ul,
                     wifi_interference_ul=_interference(rng_ul, steps, n))


SCENARIOS: dict[str, _Spec] = {
    "paper-static": _Spec(_paper_static, 120.0,
                          "paper 6.2: 5G 342 Mbps, Wi-Fi 1.19 Gbps, LiFi 12.1 Mbps, CPE fixed "
                          "(dl; ul 105, 1190, 8.9)"),
    "wifi-walk": _Spec(_wifi_walk, 250.0,
                       "paper 6.5: Wi-Fi AP carried 25 m away and back in 250 s; LiFi blockages"),
    "lockin": _Spec(_lockin, 180.0,
                    "Wi-Fi crowded (about 75 Mbps) until 60 s, then free (about 1.19 Gbps)"),
}


def build(name: str, n_cpes: int = 1, seed: int = 0, duration_s: float | None = None,
          direction: str = "dl") -> Scenario:
    """Build scenario ``name`` for ``n_cpes`` CPEs, both directions, viewed in ``direction``;
    deterministic in ``seed``.

    Raises :class:`ScenarioError` for an unknown name or direction, ``n_cpes < 1`` or a
    duration shorter than one step.
    """
    spec = SCENARIOS.get(name)
    if spec is None:
        raise ScenarioError(f"unknown scenario {name!r}; known: {sorted(SCENARIOS)}")
    if n_cpes < 1:
        raise ScenarioError(f"n_cpes must be >= 1, got {n_cpes}")
    duration = spec.default_duration_s if duration_s is None else float(duration_s)
    if not np.isfinite(duration) or duration < DT_S:
        raise ScenarioError(f"duration_s must be >= {DT_S}, got {duration_s}")
    steps = round(duration / DT_S)
    if direction not in DIRECTIONS:
        raise ScenarioError(f"direction must be one of {list(DIRECTIONS)}, got {direction!r}")
    rng = np.random.default_rng([seed, sorted(SCENARIOS).index(name)])
    # A stream of its own for the uplink, so the downlink's draws (and figures) are those
    # of the one-direction twin.
    rng_ul = np.random.default_rng([seed, sorted(SCENARIOS).index(name), 1])
    parts = spec.builder(steps, rng, n_cpes, rng_ul)
    dl = (parts.pop("capacity"), parts.pop("rtt"))
    ul = (parts.pop("capacity_ul"), parts.pop("rtt_ul"))
    scn = Scenario(name=name, dt_s=DT_S, wats=WATS, capacity_mbps=dl[0], rtt_ms=dl[1],
                   context=parts, description=spec.description, direction="dl", reverse=ul)
    return scn.toward(direction)
