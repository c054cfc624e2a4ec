"""Path traces: what each WAT's path does, period by period, for the real-stack bench.

The fluid twin (:mod:`twin.scenarios`) gives capacities every 0.1 s at the paper's rates; a real
MPTCP connection between network namespaces needs something a traffic shaper can play: per
control period and WAT a rate, a one-way delay, a loss rate and a buffer, plus outages shorter
than a period (a 50 ms handover, a 2 s LiFi blockage) at their own times.  A :class:`PathTrace`
is that, with the radio KPIs a KPI writer would report for the same radio state.  The bench
(``bench/bench_realstack.py``) plays it with ``tc``; :func:`predict` is the twin's view of the
same trace, so the two can be compared scenario by scenario.

Built-in scenarios (:data:`SCENARIOS`, :func:`build`); rates are scaled to what two cores carry
through three namespaces in both directions (a sum of at most about 80 Mbit/s):

``wifi-walk``
    The twin's wifi-walk (the access point carried 25 m away and back) compressed into the run:
    NR steady at 16 Mbit/s, Wi-Fi 1.19 Gbps -> 40 Mbit/s fading to almost nothing and back,
    LiFi 12 -> 6 Mbit/s with the twin's blockage episodes.
``lifi-blockage``
    Seed 004: LiFi carries most (24 Mbit/s) and is cut for 0.5-3 s again and again (the
    dongle loses the optical link: carrier down on the CPE's interface); NR 12, Wi-Fi 8.
``nr-lte-handover``
    Seed 002: NR 20-40 Mbit/s in steps and LTE 6-12, each with a handover every 6-9 s that
    cuts the path for 50-100 ms (packets vanish; the interface stays up).
``wifi-backhaul``
    ``make e2e``'s case: Wi-Fi's radio KPIs are excellent (the paper's 1.19 Gbps) but its
    backhaul delivers 8 Mbit/s; NR 16.
``lossy``
    A bufferbloated, lossy Wi-Fi: 40 ms each way, 2 % loss, a 400 ms buffer, 16 Mbit/s,
    beside a clean NR at 16.
``paper-static``
    Seed 000's rates divided by 20: NR 17.1, Wi-Fi 59.5, LiFi 0.6 Mbit/s (one-way delays
    10.1, 1.28 and 1.08 ms).

The CSV form (:func:`load_csv`, :func:`to_csv`; ``docs/realstack.md``) has one row per period
and WAT, so an operator can replay the traces of their own site.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
from numpy.typing import NDArray

from twin.transport import Stack, coupled_backup, deliver
from xapp.core.kpis import CELLULAR_FIELDS, LIFI_FIELDS, WIFI_FIELDS
from xapp.core.policy import KNOWN_WATS

Array = NDArray[np.float64]

OUTAGE_MODES: Final = ("drop", "down")
#: Bounds of what the shaper can play (and a CSV may ask for).
MAX_RATE_MBIT: Final = 1000.0
MAX_DELAY_MS: Final = 2000.0
MAX_BUFFER_MS: Final = 5000.0
MIN_RATE_MBIT: Final = 0.1
MAX_PERIODS: Final = 100_000
#: The radio KPI fields a CSV may carry, per WAT family (``schemas/wat_kpi.md``).
RADIO_FIELDS: Final = frozenset(CELLULAR_FIELDS + WIFI_FIELDS + LIFI_FIELDS)
_REQUIRED = ("t_s", "wat", "rate_mbit")
_OPTIONAL_NUMERIC = ("ul_rate_mbit", "delay_ms", "loss_pct", "buffer_ms", "outage_start_s",
                     "outage_ms")


class TraceError(ValueError):
    """A trace that cannot be played: unknown WAT, a value out of range, a malformed CSV."""


@dataclass(frozen=True)
class Outage:
    """A cut of one WAT's path: ``drop`` (every packet lost, the interface stays up: a
    handover) or ``down`` (the CPE's interface loses carrier: the link is gone)."""

    wat: str
    start_s: float
    duration_s: float
    mode: str = "drop"


@dataclass(frozen=True)
class PathTrace:
    """Per-period path conditions of one CPE's WATs (arrays of shape ``(periods, k)``)."""

    name: str
    period_s: float
    wats: tuple[str, ...]
    rate_dl: Array
    rate_ul: Array
    delay_ms: Array
    loss_pct: Array
    buffer_ms: Array
    outages: tuple[Outage, ...] = ()
    #: Radio KPI field -> (periods, k) array, NaN where a WAT does not report the field.
    radio: Mapping[str, Array] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        k, n = len(self.wats), self.periods
        if not 0 < k <= len(KNOWN_WATS) or len(set(self.wats)) != k:
            raise TraceError(f"wats must be 1-{len(KNOWN_WATS)} distinct WATs, got {self.wats}")
        unknown = sorted(set(self.wats) - set(KNOWN_WATS))
        if unknown:
            raise TraceError(f"unknown WATs {unknown}; known: {list(KNOWN_WATS)}")
        if not 0.1 <= self.period_s <= 60 or not 0 < n <= MAX_PERIODS:
            raise TraceError("period_s must be in [0.1, 60] and the trace 1-100000 periods")
        for name, arr, lo, hi in (("rate_mbit", self.rate_dl, MIN_RATE_MBIT, MAX_RATE_MBIT),
                                  ("ul_rate_mbit", self.rate_ul, MIN_RATE_MBIT, MAX_RATE_MBIT),
                                  ("delay_ms", self.delay_ms, 0.0, MAX_DELAY_MS),
                                  ("loss_pct", self.loss_pct, 0.0, 100.0),
                                  ("buffer_ms", self.buffer_ms, 1.0, MAX_BUFFER_MS)):
            if arr.shape != (n, k):
                raise TraceError(f"{name}: shape {arr.shape}, want {(n, k)}")
            if not np.isfinite(arr).all() or (arr < lo).any() or (arr > hi).any():
                raise TraceError(f"{name} must be finite and within [{lo}, {hi}]")
        for o in self.outages:
            if o.wat not in self.wats or o.mode not in OUTAGE_MODES:
                raise TraceError(f"outage {o}: WAT not in the trace or mode not in "
                                 f"{list(OUTAGE_MODES)}")
            if not (0 <= o.start_s < self.duration_s and 0 < o.duration_s <= self.duration_s):
                raise TraceError(f"outage {o}: outside the trace")
        for f, arr in self.radio.items():
            if f not in RADIO_FIELDS or arr.shape != (n, k):
                raise TraceError(f"radio KPI {f!r}: unknown field or shape {arr.shape}")

    @property
    def periods(self) -> int:
        return int(self.rate_dl.shape[0])

    @property
    def duration_s(self) -> float:
        return self.periods * self.period_s

    def rate(self, direction: str) -> Array:
        return self.rate_dl if direction == "dl" else self.rate_ul

    def available(self) -> Array:
        """The fraction of each period each WAT's path is not cut, shape ``(periods, k)``."""
        out = np.ones((self.periods, len(self.wats)))
        for o in self.outages:
            j = self.wats.index(o.wat)
            t0, t1 = o.start_s, min(o.start_s + o.duration_s, self.duration_s)
            for p in range(int(t0 // self.period_s), math.ceil(t1 / self.period_s)):
                lo, hi = p * self.period_s, (p + 1) * self.period_s
                out[p, j] -= max(0.0, min(hi, t1) - max(lo, t0)) / self.period_s
        return np.clip(out, 0.0, 1.0)

    def capacity(self, direction: str) -> Array:
        """What each path can carry in each period: its rate for the time it is not cut."""
        return self.rate(direction) * self.available()

    def nominal_mbit(self) -> dict[str, float]:
        """Each WAT's largest rate in either direction: the agents' configured link rate."""
        peak = np.maximum(self.rate_dl.max(axis=0), self.rate_ul.max(axis=0))
        return {w: float(math.ceil(v)) for w, v in zip(self.wats, peak.tolist(), strict=True)}


# --- radio KPIs ------------------------------------------------------------------------------

#: The paper's testbed at its best, per WAT (as ``tests.integration.stack.BASE_KPIS``).
_BEST: Final[dict[str, dict[str, float]]] = {
    "nr": {"rsrp_dbm": -80.0, "rsrq_db": -10.0, "sinr_db": 25.0, "cqi": 14.0, "mcs": 25.0,
           "prb_util": 0.2, "bler": 0.02},
    "lte": {"rsrp_dbm": -85.0, "rsrq_db": -10.5, "sinr_db": 20.0, "cqi": 13.0, "mcs": 24.0,
            "prb_util": 0.3, "bler": 0.03},
    "wifi": {"rssi_dbm": -45.0, "snr_db": 41.0, "mcs": 11.0, "nss": 2.0, "channel_busy": 0.15,
             "retries": 0.03, "phy_rate_mbps": 2401.9},
    "lifi": {"snr_db": 12.0, "rx_optical_dbm": -9.0},
}


def radio_kpis(wat: str, quality: Array) -> dict[str, Array]:
    """Radio KPIs of ``wat`` for a radio quality ``q`` in [0, 1] (1: the testbed at its best,
    0: no link), as a KPI writer would report them: SNR/SINR fall 10 dB per decade of ``q``
    (capacity follows log2(1 + SNR), so a tenth of the rate is about 10 dB less), the rest
    from the SNR as :mod:`twin.kpis` derives them."""
    q = np.clip(np.asarray(quality, dtype=np.float64), 1e-3, 1.0)
    drop = 10.0 * np.log10(q)  # dB below the best
    best = _BEST[wat]
    if wat in ("nr", "lte"):
        sinr = best["sinr_db"] + drop
        return {"rsrp_dbm": best["rsrp_dbm"] + drop, "rsrq_db": best["rsrq_db"] + 0.2 * drop,
                "sinr_db": sinr, "cqi": np.clip(np.round(best["cqi"] + drop / 2.0), 1, 15),
                "mcs": np.clip(np.round(best["mcs"] + drop), 0, 27),
                "prb_util": np.full_like(q, best["prb_util"]),
                "bler": np.full_like(q, best["bler"])}
    if wat == "wifi":
        snr = best["snr_db"] + drop
        mcs = np.clip(np.round(best["mcs"] + drop / 3.0), 0, 11)
        return {"rssi_dbm": best["rssi_dbm"] + drop, "snr_db": snr, "mcs": mcs,
                "nss": np.full_like(q, 2.0), "channel_busy": np.full_like(q, best["channel_busy"]),
                "retries": np.clip(best["retries"] - drop / 100.0, 0.0, 1.0),
                "phy_rate_mbps": best["phy_rate_mbps"] * q}
    snr = best["snr_db"] + drop
    return {"snr_db": snr, "rx_optical_dbm": best["rx_optical_dbm"] + drop / 2.0}


def _radio(wats: tuple[str, ...], quality: Array) -> dict[str, Array]:
    out: dict[str, Array] = {}
    for j, w in enumerate(wats):
        for f, col in radio_kpis(w, quality[:, j]).items():
            out.setdefault(f, np.full(quality.shape, np.nan))[:, j] = col
    return out


# --- built-in scenarios ----------------------------------------------------------------------

DEFAULT_PERIOD_S: Final = 1.0
DEFAULT_DURATION_S: Final = 40.0


def _columns(wats: tuple[str, ...], per_wat: Mapping[str, float], n: int) -> Array:
    return np.tile(np.array([per_wat[w] for w in wats], dtype=np.float64), (n, 1))


def _blockages(rng: np.random.Generator, wat: str, duration_s: float, lo_s: float, hi_s: float,
               gap: tuple[float, float], mode: str) -> tuple[Outage, ...]:
    out: list[Outage] = []
    t = float(rng.uniform(*gap))
    while True:
        d = float(rng.uniform(lo_s, hi_s))
        if t + d >= duration_s - 1.0:
            return tuple(out)
        out.append(Outage(wat, round(t, 3), round(d, 3), mode))
        t += d + float(rng.uniform(*gap))


def _wifi_walk(n: int, period_s: float, rng: np.random.Generator) -> PathTrace:
    from twin.scenarios import build as build_twin

    twin = build_twin("wifi-walk", seed=int(rng.integers(1 << 30)))
    cap = np.asarray(twin.capacity("dl")[:, 0, :])  # (steps, 3): nr, wifi, lifi at 0.1 s
    cap_ul = np.asarray(twin.capacity("ul")[:, 0, :])
    # The walk compressed into the run: period p takes the twin's mean over its slice.
    edges = np.linspace(0, len(cap), n + 1).astype(int)

    def squeeze(a: Array) -> Array:
        return np.array([a[edges[i]:edges[i + 1]].mean(axis=0) for i in range(n)])

    dl, ul = squeeze(cap), squeeze(cap_ul)
    scale = np.array([16.0 / 342.0, 40.0 / 1190.0, 6.0 / 12.1])
    rate_dl = np.clip(dl * scale, MIN_RATE_MBIT, None)
    rate_ul = np.clip(ul * scale * np.array([342.0 / 105.0, 1.0, 1.0]), MIN_RATE_MBIT, None)
    wats = ("nr", "wifi", "lifi")
    quality = dl / np.array([342.0, 1190.0, 12.1 * 1.5])
    return PathTrace("wifi-walk", period_s, wats, rate_dl, rate_ul,
                     _columns(wats, {"nr": 10.1, "wifi": 1.3, "lifi": 1.1}, n),
                     np.zeros((n, 3)), _columns(wats, {"nr": 50, "wifi": 50, "lifi": 50}, n),
                     (), _radio(wats, quality),
                     "Wi-Fi fades with distance and comes back (the twin's walk, compressed)")


def _lifi_blockage(n: int, period_s: float, rng: np.random.Generator) -> PathTrace:
    wats = ("nr", "wifi", "lifi")
    rates = {"nr": 12.0, "wifi": 8.0, "lifi": 24.0}
    duration = n * period_s
    outages = _blockages(rng, "lifi", duration, 0.5, 3.0, (3.0, 6.0), "down")
    rate = _columns(wats, rates, n)
    trace = PathTrace("lifi-blockage", period_s, wats, rate, rate.copy(),
                      _columns(wats, {"nr": 10.0, "wifi": 2.0, "lifi": 1.0}, n),
                      np.zeros((n, 3)), _columns(wats, {"nr": 50, "wifi": 50, "lifi": 50}, n),
                      outages, {}, "LiFi cut for 0.5-3 s again and again (seed 004)")
    quality = np.where(trace.available() < 1.0, 1e-3, 1.0) * np.ones((n, 3))
    quality[:, 1] = 0.6  # Wi-Fi a few metres away
    return PathTrace(**{**trace.__dict__, "radio": _radio(wats, quality)})


def _nr_lte_handover(n: int, period_s: float, rng: np.random.Generator) -> PathTrace:
    wats = ("nr", "lte")
    nr = np.repeat(rng.choice([20.0, 30.0, 40.0], size=n // 6 + 1), 6)[:n]
    lte = np.repeat(rng.choice([6.0, 9.0, 12.0], size=n // 8 + 1), 8)[:n]
    rate = np.stack([nr, lte], axis=1)
    duration = n * period_s
    outages = tuple(sorted(
        _blockages(rng, "nr", duration, 0.05, 0.1, (6.0, 9.0), "drop")
        + _blockages(rng, "lte", duration, 0.05, 0.1, (6.0, 9.0), "drop"),
        key=lambda o: o.start_s))
    quality = rate / np.array([40.0, 12.0])
    return PathTrace("nr-lte-handover", period_s, wats, rate, rate * np.array([0.5, 0.5]),
                     _columns(wats, {"nr": 8.0, "lte": 20.0}, n), np.zeros((n, 2)),
                     _columns(wats, {"nr": 60, "lte": 80}, n), outages, _radio(wats, quality),
                     "NR and LTE rate steps, a 50-100 ms outage at each handover (seed 002)")


def _wifi_backhaul(n: int, period_s: float, rng: np.random.Generator) -> PathTrace:
    wats = ("nr", "wifi")
    rate = _columns(wats, {"nr": 16.0, "wifi": 8.0}, n)
    quality = _columns(wats, {"nr": 1.0, "wifi": 1.0}, n)  # both radios at their best
    return PathTrace("wifi-backhaul", period_s, wats, rate, rate.copy(),
                     _columns(wats, {"nr": 10.0, "wifi": 2.0}, n), np.zeros((n, 2)),
                     _columns(wats, {"nr": 50, "wifi": 50}, n), (), _radio(wats, quality),
                     "Wi-Fi radio excellent, backhaul capped at 8 Mbit/s (make e2e's case)")


def _lossy(n: int, period_s: float, rng: np.random.Generator) -> PathTrace:
    wats = ("nr", "wifi")
    rate = _columns(wats, {"nr": 16.0, "wifi": 16.0}, n)
    loss = _columns(wats, {"nr": 0.0, "wifi": 2.0}, n)
    quality = _columns(wats, {"nr": 1.0, "wifi": 0.3}, n)
    return PathTrace("lossy", period_s, wats, rate, rate.copy(),
                     _columns(wats, {"nr": 10.0, "wifi": 40.0}, n), loss,
                     _columns(wats, {"nr": 50, "wifi": 400}, n), (), _radio(wats, quality),
                     "Wi-Fi bufferbloated and lossy: 40 ms each way, 2 % loss, 400 ms buffer")


def _paper_static(n: int, period_s: float, rng: np.random.Generator) -> PathTrace:
    wats = ("nr", "wifi", "lifi")
    base = np.array([342.0, 1190.0, 12.1]) / 20.0
    jitter = 1.0 + np.array([0.01, 0.08, 0.2]) * rng.standard_normal((n, 3))
    rate = np.clip(base * jitter, MIN_RATE_MBIT, None)
    ul = np.clip(np.array([105.0, 1190.0, 8.9]) / 20.0 * jitter, MIN_RATE_MBIT, None)
    quality = rate / base
    return PathTrace("paper-static", period_s, wats, rate, ul,
                     _columns(wats, {"nr": 10.1, "wifi": 1.28, "lifi": 1.08}, n),
                     np.zeros((n, 3)), _columns(wats, {"nr": 50, "wifi": 50, "lifi": 50}, n),
                     (), _radio(wats, np.clip(quality, 0, 1)),
                     "Seed 000's static testbed, rates divided by 20")


SCENARIOS: Final = {"wifi-walk": _wifi_walk, "lifi-blockage": _lifi_blockage,
                    "nr-lte-handover": _nr_lte_handover, "wifi-backhaul": _wifi_backhaul,
                    "lossy": _lossy, "paper-static": _paper_static}


def build(name: str, duration_s: float = DEFAULT_DURATION_S, seed: int = 0,
          period_s: float = DEFAULT_PERIOD_S) -> PathTrace:
    """The built-in scenario ``name``; the same arguments always give the same trace."""
    make = SCENARIOS.get(name)
    if make is None:
        raise TraceError(f"unknown scenario {name!r}; known: {sorted(SCENARIOS)}")
    n = max(1, round(duration_s / period_s))
    return make(n, period_s, np.random.default_rng([seed, sorted(SCENARIOS).index(name)]))


# --- CSV -------------------------------------------------------------------------------------

def to_csv(trace: PathTrace) -> str:
    """The trace as CSV, one row per period and WAT (the format :func:`load_csv` reads)."""
    radio = sorted(trace.radio)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["t_s", "wat", "rate_mbit", "ul_rate_mbit", "delay_ms", "loss_pct", "buffer_ms",
                "outage_start_s", "outage_ms", "outage_mode", *radio])
    by_cell: dict[tuple[int, str], Outage] = {}
    for o in trace.outages:
        key = (int(o.start_s // trace.period_s), o.wat)
        if key in by_cell:
            raise TraceError(f"two outages of {o.wat} start in period {key[0]}: the CSV "
                             "holds one per period and WAT")
        by_cell[key] = o
    for p in range(trace.periods):
        for j, wat in enumerate(trace.wats):
            cut = by_cell.get((p, wat))
            vals = [trace.radio[f][p, j] for f in radio]
            w.writerow([round(p * trace.period_s, 3), wat, _num(trace.rate_dl[p, j]),
                        _num(trace.rate_ul[p, j]), _num(trace.delay_ms[p, j]),
                        _num(trace.loss_pct[p, j]), _num(trace.buffer_ms[p, j]),
                        "" if cut is None else round(cut.start_s - p * trace.period_s, 3),
                        "" if cut is None else round(cut.duration_s * 1000, 1),
                        "" if cut is None else cut.mode,
                        *("" if not np.isfinite(v) else _num(v) for v in vals)])
    return out.getvalue()


def _num(v: float) -> str:
    return f"{float(v):.6g}"


#: A CSV larger than this is refused before parsing.
MAX_CSV_BYTES: Final = 64 * 1024 * 1024


def load_csv(path: Path, name: str | None = None) -> PathTrace:
    """A trace from an operator's CSV (``docs/realstack.md``); :class:`TraceError` names the
    line of the first problem."""
    try:
        if path.stat().st_size > MAX_CSV_BYTES:
            raise TraceError(f"{path}: larger than {MAX_CSV_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: {exc}") from None
    return parse_csv(text.splitlines(), name or path.stem)


def parse_csv(lines: Iterable[str], name: str) -> PathTrace:
    reader = csv.DictReader(lines)
    cols = reader.fieldnames or []
    missing = [c for c in _REQUIRED if c not in cols]
    if missing:
        raise TraceError(f"the CSV lacks the columns {missing}; it has {cols}")
    known = set(_REQUIRED) | set(_OPTIONAL_NUMERIC) | {"outage_mode"} | RADIO_FIELDS
    extra = sorted(set(cols) - known)
    if extra:
        raise TraceError(f"unknown columns {extra}; radio KPI columns are the wat_kpi fields")
    rows: dict[tuple[float, str], dict[str, str]] = {}
    for i, row in enumerate(reader, start=2):
        try:
            key = (float(row["t_s"]), str(row["wat"]).strip())
        except (TypeError, ValueError):
            raise TraceError(f"line {i}: t_s must be a number") from None
        if key in rows:
            raise TraceError(f"line {i}: a second row for t_s={key[0]}, wat={key[1]}")
        if len(rows) >= MAX_PERIODS * len(KNOWN_WATS):
            raise TraceError(f"line {i}: more than {MAX_PERIODS} periods")
        rows[key] = {k: (v or "").strip() for k, v in row.items() if k is not None}
    if not rows:
        raise TraceError("the CSV has no rows")
    times = sorted({t for t, _ in rows})
    wats = tuple(w for w in KNOWN_WATS if any(w == x for _, x in rows))
    unknown = sorted({x for _, x in rows} - set(KNOWN_WATS))
    if unknown:
        raise TraceError(f"unknown WATs {unknown}; known: {list(KNOWN_WATS)}")
    steps = np.diff(times) if len(times) > 1 else np.array([DEFAULT_PERIOD_S])
    period = float(steps[0])
    if times[0] != 0 or not np.allclose(steps, period, atol=1e-6):
        raise TraceError("t_s must start at 0 and step by one period (the same for every row)")
    n, k = len(times), len(wats)

    def grid(col: str, default: float) -> Array:
        out = np.full((n, k), np.nan)
        for p, t in enumerate(times):
            for j, w in enumerate(wats):
                row = rows.get((t, w))
                if row is None:
                    raise TraceError(f"no row for t_s={t}, wat={w}: every WAT needs every "
                                     "period")
                text = row.get(col, "")
                try:
                    out[p, j] = float(text) if text else default
                except ValueError:
                    raise TraceError(f"t_s={t}, wat={w}: {col}={text!r} is not a number"
                                     ) from None
        return out

    rate = grid("rate_mbit", np.nan)
    ul = grid("ul_rate_mbit", np.nan)
    ul = np.where(np.isnan(ul), rate, ul)
    outages = []
    for (t, w), row in sorted(rows.items()):
        if row.get("outage_ms"):
            try:
                start = t + float(row.get("outage_start_s") or 0.0)
                dur = float(row["outage_ms"]) / 1000.0
            except ValueError:
                raise TraceError(f"t_s={t}, wat={w}: outage_start_s/outage_ms must be numbers"
                                 ) from None
            outages.append(Outage(w, start, dur, row.get("outage_mode") or "drop"))
    radio = {f: grid(f, np.nan) for f in cols if f in RADIO_FIELDS}
    return PathTrace(name, period, wats, rate, ul, grid("delay_ms", 5.0),
                     grid("loss_pct", 0.0), grid("buffer_ms", 50.0), tuple(outages),
                     {f: a for f, a in radio.items() if np.isfinite(a).any()},
                     f"replayed from a CSV of {n} periods")


# --- the twin's view of a trace --------------------------------------------------------------

#: MPTCP payload per frame the shapers count: a 1514-byte Ethernet frame carries 14 bytes of
#: Ethernet, 20 of IPv4, 20 of TCP, 12 of timestamps and about 20 of MPTCP's data sequence
#: mapping beside 1428 bytes of data.  The rates of a trace are frames (what the shapers pass),
#: the bench's goodput is data.
TRANSPORT_EFFICIENCY: Final = 1428 / 1514


def predict(trace: PathTrace, direction: str, weights: Array | None = None,
            caps: Array | None = None, stack: Stack | None = None,
            reverse_weights: Array | None = None) -> float:
    """The twin's delivered goodput over the trace, as a fraction of the sum of what the paths
    could carry: per period each WAT runs at ``min(cap, capacity)`` under the ``mptcp-shares``
    rule (:func:`twin.rate_caps.deliver_caps`), less what the transport loses
    (:func:`twin.transport.deliver`: the reverse flow's ACKs, timeouts that hold the connection
    hostage, outages and their backoff, loss).  ``weights``/``caps`` are ``(periods, k)``
    (None: the default scheduler, every WAT uncapped and carrying; caps ``inf`` where
    uncapped); ``reverse_weights`` the other direction's, whose WATs at weight 0 are backup
    this way too (:func:`twin.transport.coupled_backup`; None: not known, not coupled);
    ``stack`` what surrounds the connection (None: :class:`twin.transport.Stack`'s defaults,
    every delay on the wire and no agent).  Goodput is data, the rates are frames: see
    :data:`TRANSPORT_EFFICIENCY`."""
    rate, up = trace.rate(direction), trace.available()
    n, k = rate.shape
    w = np.ones((n, k), np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
    c = np.full((n, k), np.inf) if caps is None else np.asarray(caps, dtype=np.float64)
    per_wat = deliver(trace, direction, coupled_backup(w, reverse_weights), c,
                      Stack() if stack is None else stack)
    whole = float((rate * up).sum())
    return float(per_wat.sum()) * TRANSPORT_EFFICIENCY / whole if whole > 0 else 0.0
