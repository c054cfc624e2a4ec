"""Scenarios of the twin: per-WAT capacity and RTT traces, and the physical drivers behind them.

A :class:`Scenario` holds arrays of shape ``(steps, n_cpes, k)`` sampled every ``dt_s`` (0.1 s)
for the WATs ``wats`` (5G NR, Wi-Fi, LiFi, in :data:`xapp.policy.KNOWN_WATS` order).  Build one
with :func:`build`; the same ``(name, n_cpes, seed, duration_s)`` always gives the same arrays.

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
    learnt "Wi-Fi is slow" under WRR never sees the rise; see ``xapp.ewma``.  Default 180 s.

How the traces are built
------------------------
*Wi-Fi* (802.11ax, 160 MHz at 5.25 GHz, 2 spatial streams as the CPE's Intel AX201):
log-distance path loss ``PL(d) = FSPL(1 m) + 10 n log10(d) + wall(d) + X_shadow + X_fast`` with
``FSPL(1 m) = 46.8 dB``, ``n = 3.3`` (indoor corridor), 10 dB extra once the route leaves the lab
(``d > 12 m``), log-normal shadowing (3 dB, correlated over 5 s) and fast fading (1.5 dB,
correlated over 0.3 s).  SNR = 23 dBm EIRP - PL + 86 dB (noise floor of 160 MHz, -174 dBm/Hz
+ 82 dB + 6 dB noise figure).  Rate adaptation picks the highest MCS whose threshold (1 dB
margin) the SNR meets; the PHY rate of that MCS (:data:`HE160_2SS_MBPS`) times a MAC/TCP
efficiency of 0.4955 (calibrated so that MCS 11 at 1 m gives the paper's 1.19 Gbps) times the
airtime share ``1 / (1 + 0.5 * stations)`` times a log-normal interference factor (7 %, 2 s)
is the capacity.  Below MCS 0 the link is out of range (capacity 0).

*5G NR* (50 MHz, 2x2, throughput TDD pattern): 342 Mbps at SINR >= 25 dB, scaled by
``log2(1 + SINR) / log2(1 + 10^2.5)`` below, SINR falling 20 dB per decade of distance from
30 dB at 2 m, with 1 % jitter: the paper's 5G was "extremely stable".

*LiFi* (16.6 MHz, pureLiFi LiFi-XC): ``0.27 * 16.6 * log2(1 + SNR)`` Mbps capped at 42 Mbps, with
SNR about 9.5 dB plus 1 dB jitter, short fades (dongle orientation, people passing: a few per
minute, 4-8 dB, 0.3-1.5 s) and occasional boosts (up to 20 Mbps).  The static trace is rescaled
so its mean is exactly the paper's 12.1 Mbps.  A blocked LiFi link has capacity 0.

*RTT* (ms) is twice the paper's one-way delay plus a serialisation/retransmission term
``24 / capacity`` (two 1500-byte packets queued) and 5 % jitter; NaN while a WAT has no capacity.

Several CPEs (``n_cpes > 1``) get their own random draws from ``seed``: their own noise, a walk
phase (time offset) for ``wifi-walk``, path-loss exponent ``n ± 0.2``, distance to the gNB
(2-15 m) and LiFi blockage episodes.  CPE 0 of ``paper-static`` and ``wifi-walk`` is the
paper's CPE (no phase offset, 2 m from the gNB).

``context`` keys (each an array of shape ``(steps, n_cpes)``, present in every scenario)
---------------------------------------------------------------------------------------------
``wifi_distance_m``   distance CPE to Wi-Fi access point (m)
``wifi_stations``     other active stations contending for the Wi-Fi channel (count)
``wifi_snr_db``       Wi-Fi SNR after path loss, shadowing and fast fading (dB)
``wifi_mcs``          802.11ax MCS index chosen by rate adaptation (0-11; -1 out of range)
``nr_distance_m``     distance CPE to gNB (m)
``nr_sinr_db``        5G NR downlink SINR (dB)
``lifi_blocked``      1.0 while the LiFi line of sight is blocked, else 0.0
``lifi_snr_db``       LiFi SNR (dB; NaN while blocked)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.signal import lfilter

from xapp.policy import KNOWN_WATS

#: WATs every scenario carries, in :data:`xapp.policy.KNOWN_WATS` order.
WATS: tuple[str, ...] = tuple(w for w in KNOWN_WATS if w in ("nr", "wifi", "lifi"))

DT_S = 0.1

#: 802.11ax HE PHY rates (Mbps) for MCS 0..11, 160 MHz, 2 spatial streams, 0.8 µs guard interval.
HE160_2SS_MBPS = np.array([144.1, 288.2, 432.4, 576.5, 864.7, 1152.9, 1297.1, 1441.2,
                           1729.4, 1921.6, 2161.8, 2401.9])
#: Minimum SNR (dB) for each MCS (typical receiver sensitivity steps of 802.11ax).
HE_MCS_SNR_DB = np.array([2.0, 5.0, 9.0, 11.0, 15.0, 18.0, 20.0, 25.0, 29.0, 31.0, 34.0, 37.0])

WIFI_MAC_EFFICIENCY = 0.4955  # 2401.9 Mbps PHY -> 1190 Mbps TCP goodput (paper, section 6.2)
NR_PEAK_MBPS = 342.0
LIFI_PEAK_MBPS = 42.0
ONE_WAY_MS = {"nr": 10.1, "wifi": 1.28, "lifi": 1.08}  # paper, section 6.3

Array = NDArray[np.float64]


class ScenarioError(ValueError):
    """Unknown scenario name or arguments out of range."""


@dataclass(frozen=True)
class Scenario:
    """Ground truth for the twin: what each WAT of each CPE could carry at each step."""

    name: str
    dt_s: float
    wats: tuple[str, ...]
    #: True capacity in Mbps, shape (steps, n_cpes, k).
    capacity_mbps: Array
    #: Round-trip time in ms, shape (steps, n_cpes, k); NaN where the WAT has no capacity.
    rtt_ms: Array
    #: Physical drivers, each (steps, n_cpes); keys in the module docstring.
    context: Mapping[str, Array]
    description: str = ""

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
    builder: Callable[[int, np.random.Generator, int], dict[str, Array]]
    default_duration_s: float
    description: str


def ar1(rng: np.random.Generator, steps: int, n: int, corr_s: float) -> Array:
    """Unit-variance Gaussian AR(1) noise, shape (steps, n), correlation time ``corr_s``."""
    a = float(np.exp(-DT_S / corr_s)) if corr_s > 0 else 0.0
    e = rng.standard_normal((steps, n))
    x0 = rng.standard_normal(n)  # stationary start: var(y0) = (1 - a²) + a² = 1
    b = np.sqrt(1.0 - a * a)
    y, _ = lfilter([b], [1.0, -a], e, axis=0, zi=(a * x0)[None, :])
    return np.asarray(y, dtype=np.float64)


def _episodes(rng: np.random.Generator, steps: int, n: int, per_min: float,
              min_s: float, max_s: float) -> Array:
    """0/1 mask of episodes starting as a Poisson process, each of uniform length."""
    mask = np.zeros((steps, n))
    p_start = per_min / 60.0 * DT_S
    starts = rng.random((steps, n)) < p_start
    lengths = np.rint(rng.uniform(min_s, max_s, (steps, n)) / DT_S).astype(np.int64)
    for t, c in zip(*np.nonzero(starts), strict=True):
        mask[t:t + max(1, lengths[t, c]), c] = 1.0
    return mask


def wifi_capacity(snr_db: Array, stations: Array, interference: Array
                  ) -> tuple[Array, Array]:
    """Capacity (Mbps) and MCS index from SNR, contending stations and interference factor."""
    mcs = np.searchsorted(HE_MCS_SNR_DB, snr_db - 1.0, side="right") - 1  # 1 dB margin
    phy = np.where(mcs >= 0, HE160_2SS_MBPS[np.clip(mcs, 0, 11)], 0.0)
    share = 1.0 / (1.0 + 0.5 * stations)
    return phy * WIFI_MAC_EFFICIENCY * share * interference, mcs.astype(np.float64)


def wifi_snr(distance_m: Array, exponent: Array, shadow: Array, fast: Array) -> Array:
    """SNR (dB) of the log-distance model described in the module docstring."""
    fspl_1m = 46.8
    wall = np.where(distance_m > 12.0, 10.0, 0.0)
    path_loss = fspl_1m + 10.0 * exponent * np.log10(np.maximum(distance_m, 0.5)) + wall
    return 23.0 - path_loss + 86.0 - shadow - fast


def nr_link(distance_m: Array, jitter: Array) -> tuple[Array, Array]:
    """(capacity Mbps, SINR dB) of the 5G NR model."""
    sinr = 30.0 - 20.0 * np.log10(np.maximum(distance_m, 1.0) / 2.0)
    ref = np.log2(1.0 + 10.0 ** 2.5)
    frac = np.minimum(1.0, np.log2(1.0 + 10.0 ** (sinr / 10.0)) / ref)
    return NR_PEAK_MBPS * frac * (1.0 + 0.01 * jitter), sinr


def lifi_link(rng: np.random.Generator, steps: int, n: int, blocked: Array
              ) -> tuple[Array, Array]:
    """(capacity Mbps, SNR dB) of the LiFi model; NaN SNR and 0 capacity while blocked."""
    snr = 9.5 + 1.0 * ar1(rng, steps, n, 1.0)
    fades = _episodes(rng, steps, n, per_min=4.0, min_s=0.3, max_s=1.5)
    depth = rng.uniform(4.0, 8.0, (1, n))
    boosts = _episodes(rng, steps, n, per_min=1.0, min_s=0.5, max_s=2.0)
    snr = snr - fades * depth + boosts * 4.0
    cap = np.minimum(LIFI_PEAK_MBPS, 0.27 * 16.6 * np.log2(1.0 + 10.0 ** (snr / 10.0)))
    cap = np.where(blocked > 0, 0.0, cap)
    return cap, np.where(blocked > 0, np.nan, snr)


def _rtt(rng: np.random.Generator, capacity: Array, wat: str) -> Array:
    base = 2.0 * ONE_WAY_MS[wat]
    with np.errstate(divide="ignore"):
        rtt = (base + 24.0 / capacity) * (1.0 + 0.05 * np.abs(rng.standard_normal(capacity.shape)))
    return np.where(capacity > 0, rtt, np.nan)


def _assemble(rng: np.random.Generator, steps: int, n: int, *, wifi_distance: Array,
              wifi_stations: Array, wifi_interference: Array, exponent: Array,
              nr_distance: Array, lifi_blocked: Array, lifi_mean: float | None
              ) -> dict[str, Array]:
    shadow = 3.0 * ar1(rng, steps, n, 5.0)
    fast = 1.5 * ar1(rng, steps, n, 0.3)
    snr = wifi_snr(wifi_distance, exponent, shadow, fast)
    wifi_cap, mcs = wifi_capacity(snr, wifi_stations, wifi_interference)
    nr_cap, nr_sinr = nr_link(nr_distance, ar1(rng, steps, n, 2.0))
    lifi_cap, lifi_snr = lifi_link(rng, steps, n, lifi_blocked)
    if lifi_mean is not None:  # paper-static: match the measured average exactly
        lifi_cap = lifi_cap * (lifi_mean / lifi_cap.mean(axis=0, keepdims=True))
    caps = {"nr": nr_cap, "wifi": wifi_cap, "lifi": lifi_cap}
    out: dict[str, Array] = {
        "capacity": np.stack([caps[w] for w in WATS], axis=-1),
        "rtt": np.stack([_rtt(rng, caps[w], w) for w in WATS], axis=-1),
        "wifi_distance_m": wifi_distance, "wifi_stations": wifi_stations,
        "wifi_snr_db": snr, "wifi_mcs": mcs, "nr_distance_m": nr_distance,
        "nr_sinr_db": nr_sinr, "lifi_blocked": lifi_blocked, "lifi_snr_db": lifi_snr,
    }
    return out


def _interference(rng: np.random.Generator, steps: int, n: int) -> Array:
    return np.exp(0.07 * ar1(rng, steps, n, 2.0) - 0.5 * 0.07 ** 2)


def _nr_distance(rng: np.random.Generator, steps: int, n: int) -> Array:
    d = rng.uniform(2.0, 15.0, n)
    d[0] = 2.0  # the paper's CPE sits next to the gNB
    return np.broadcast_to(d, (steps, n)).copy()


def _paper_static(steps: int, rng: np.random.Generator, n: int) -> dict[str, Array]:
    zeros = np.zeros((steps, n))
    inter = _interference(rng, steps, n)
    # Wi-Fi at 1 m sits at MCS 11; its 1.0-1.4 Gbps spread is interference, not path loss.
    inter = inter / inter.mean(axis=0, keepdims=True)  # mean the paper's 1.19 Gbps
    inter = np.clip(inter, 1000.0 / 1190.0, 1400.0 / 1190.0)  # within its 1.0-1.4 Gbps
    return _assemble(rng, steps, n, wifi_distance=zeros + 1.0, wifi_stations=zeros,
                     wifi_interference=inter, exponent=np.full((1, n), 3.3),
                     nr_distance=np.full((steps, n), 2.0), lifi_blocked=zeros,
                     lifi_mean=12.1)


def walk_distance(time_s: Array, period_s: float = 250.0, far_m: float = 25.0,
                  near_m: float = 1.0) -> Array:
    """Distance of an AP carried at a steady pace away and back (50 m round trip)."""
    phase = np.mod(time_s, period_s) / period_s
    return near_m + (far_m - near_m) * (1.0 - np.abs(1.0 - 2.0 * phase))


def _wifi_walk(steps: int, rng: np.random.Generator, n: int) -> dict[str, Array]:
    t = np.arange(steps) * DT_S
    offset = rng.uniform(0.0, 250.0, n)
    offset[0] = 0.0
    distance = walk_distance(t[:, None] + offset[None, :])
    stations = np.broadcast_to(rng.integers(0, 3, n).astype(np.float64), (steps, n)).copy()
    stations[:, 0] = 0.0
    exponent = 3.3 + rng.uniform(-0.2, 0.2, (1, n))
    exponent[0, 0] = 3.3
    blocked = _episodes(rng, steps, n, per_min=1.0, min_s=2.0, max_s=8.0)
    return _assemble(rng, steps, n, wifi_distance=distance, wifi_stations=stations,
                     wifi_interference=_interference(rng, steps, n), exponent=exponent,
                     nr_distance=_nr_distance(rng, steps, n), lifi_blocked=blocked,
                     lifi_mean=None)


def _lockin(steps: int, rng: np.random.Generator, n: int) -> dict[str, Array]:
    t = np.arange(steps) * DT_S
    leave = 60.0 + rng.uniform(0.0, 20.0, n)
    leave[0] = 60.0
    stations = np.where(t[:, None] < leave[None, :], 30.0, 0.0)
    zeros = np.zeros((steps, n))
    return _assemble(rng, steps, n, wifi_distance=zeros + 1.0, wifi_stations=stations,
                     wifi_interference=_interference(rng, steps, n),
                     exponent=np.full((1, n), 3.3), nr_distance=_nr_distance(rng, steps, n),
                     lifi_blocked=zeros, lifi_mean=None)


SCENARIOS: dict[str, _Spec] = {
    "paper-static": _Spec(_paper_static, 120.0,
                          "paper 6.2: 5G 342 Mbps, Wi-Fi 1.19 Gbps, LiFi 12.1 Mbps, CPE fixed"),
    "wifi-walk": _Spec(_wifi_walk, 250.0,
                       "paper 6.5: Wi-Fi AP carried 25 m away and back in 250 s; LiFi blockages"),
    "lockin": _Spec(_lockin, 180.0,
                    "Wi-Fi crowded (about 75 Mbps) until 60 s, then free (about 1.19 Gbps)"),
}


def build(name: str, n_cpes: int = 1, seed: int = 0, duration_s: float | None = None
          ) -> Scenario:
    """Build scenario ``name`` for ``n_cpes`` CPEs; deterministic in ``seed``.

    Raises :class:`ScenarioError` for an unknown name, ``n_cpes < 1`` or a duration shorter
    than one step.
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
    rng = np.random.default_rng([seed, sorted(SCENARIOS).index(name)])
    parts = spec.builder(steps, rng, n_cpes)
    capacity = parts.pop("capacity")
    rtt = parts.pop("rtt")
    return Scenario(name=name, dt_s=DT_S, wats=WATS, capacity_mbps=capacity, rtt_ms=rtt,
                    context=parts, description=spec.description)
