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
Each WAT's link (Wi-Fi, 5G NR, LiFi, both directions) is modelled in
:mod:`twin.link_models`, on the random processes of :mod:`twin.processes`; a scenario draws
the physical drivers (distances, shadowing, contending stations, interference, blockage)
and assembles the links' capacities into traces.

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

import numpy as np

from twin.link_models import (
    LIFI_PEAK_MBPS,
    LIFI_UL_SNR_OFFSET_DB,
    NR_UL_PEAK_MBPS,
    NR_UL_SINR_OFFSET_DB,
    WIFI_STEP_JITTER_DB,
    WIFI_UL_SNR_OFFSET_DB,
    lifi_capacity,
    lifi_link,
    nr_link,
    wifi_capacity,
    wifi_snr,
)
from twin.processes import DT_S, Array, ar1, episodes, smooth_ar
from twin.traffic import Traffic
from xapp.core.policy import KNOWN_WATS

#: WATs every scenario carries, in :data:`xapp.core.policy.KNOWN_WATS` order.
WATS: tuple[str, ...] = tuple(w for w in KNOWN_WATS if w in ("nr", "wifi", "lifi"))

#: Directions of a scenario: ``dl`` proxy to CPE (what the paper measured), ``ul`` CPE to
#: proxy.  Their construction is in :mod:`twin.link_models` ("Uplink").
DIRECTIONS: tuple[str, ...] = ("dl", "ul")
ONE_WAY_MS = {"nr": 10.1, "wifi": 1.28, "lifi": 1.08}  # paper, section 6.3


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
    #: The flows every CPE carries (:mod:`twin.traffic`); None: one backlogged transfer.
    traffic: Traffic | None = None

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
    blocked = episodes(rng, steps, n, per_min=1.0, min_s=2.0, max_s=8.0)
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
          direction: str = "dl", traffic: Traffic | None = None) -> Scenario:
    """Build scenario ``name`` for ``n_cpes`` CPEs, both directions, viewed in ``direction``,
    carrying ``traffic`` (None: one backlogged transfer); deterministic in ``seed``.

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
                   context=parts, description=spec.description, direction="dl", reverse=ul,
                   traffic=traffic)
    return scn.toward(direction)
