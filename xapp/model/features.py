"""Features of the capacity model, computed the same way online and offline.

One :class:`FeatureState` keeps, per (cpe, wat) key, a short history of *capacity samples* and
of a few radio KPIs.  The online estimator feeds it one tick at a time; training replays a long
table through the very same code (:func:`replay`), so the features the model learns from and the
features it sees in service cannot drift apart.

The censoring choice
--------------------
Under WRR with ``cwnd_limited=N`` a subflow carries exactly its share, so ``delivered_mbps`` is a
capacity measurement only when the subflow was saturated (``saturated`` = 1: data waiting and
cwnd-limited for the whole period).  The history therefore stores ``delivered_mbps`` only for
saturated periods and NaN otherwise (``saturated`` NaN, i.e. unknown, counts as saturated: the
Raca traces are full-buffer downloads).  Labels follow the same rule (see
:mod:`xapp.model.training`).  A WAT held at a small weight thus loses its throughput history
instead of teaching the model that it is slow, and the forecast falls back on the radio KPIs,
which are not censored: that is what breaks the lock-in of a history-only estimator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.telemetry.schema import CELLULAR_FIELDS, LIFI_FIELDS, WIFI_FIELDS

Array = NDArray[np.float64]

#: Extra cellular fields some sources carry (Raca traces: the NR cell of an NSA attachment and
#: the radio access technology generation, 5 = NR, 4 = LTE, 3 = HSPA/UMTS; the carrier RSSI;
#: the speed of the terminal).
CELLULAR_EXTRA: tuple[str, ...] = ("nr_rsrp_dbm", "nr_rsrq_db", "rat", "cell_rssi_dbm",
                                   "speed_kmh")

#: Radio KPIs used as features, per technology family.
RADIO_FIELDS: dict[str, tuple[str, ...]] = {
    "cellular": CELLULAR_FIELDS + CELLULAR_EXTRA,
    "wifi": WIFI_FIELDS,
    "lifi": LIFI_FIELDS,
}
#: Radio KPIs whose change since the previous tick is a feature (a fade or handover shows there
#: before it shows in throughput).
DIFF_FIELDS: tuple[str, ...] = ("rsrp_dbm", "sinr_db", "cqi", "snr_db", "rssi_dbm",
                                "phy_rate_mbps", "nr_rsrp_dbm")
TRANSPORT_FIELDS: tuple[str, ...] = ("rtt_ms", "loss")

HISTORY = 30
LAGS = 6
WINDOWS: tuple[int, ...] = (3, 10, 30)
EWMA_ALPHAS: tuple[float, ...] = (0.3, 0.1)
#: Ticks since the last cell change are capped: beyond a minute it carries no information.
MAX_SINCE_CELL = 600.0

HISTORY_FEATURES: tuple[str, ...] = (
    tuple(f"lag{i}" for i in range(LAGS))
    + tuple(f"{s}{w}" for w in WINDOWS for s in ("mean", "std", "min", "max"))
    + tuple(f"ewma{a}" for a in EWMA_ALPHAS)
    + ("exp_mean", "exp_max", "d01", "r0_mean10", "r0_max", "n_samples", "since_cell", "gap_s")
)


def feature_names(family: str) -> tuple[str, ...]:
    """Column names of the feature matrix of ``family``."""
    radio = RADIO_FIELDS[family]
    diffs = tuple(f"d_{f}" for f in DIFF_FIELDS if f in radio)
    return HISTORY_FEATURES + radio + diffs + TRANSPORT_FIELDS


def capacity_sample(delivered: Array, saturated: Array) -> Array:
    """``delivered`` where it measured capacity (saturated or unknown), NaN where censored."""
    return np.where(saturated == 0.0, np.nan, delivered)


def _nan_stats(h: Array) -> tuple[Array, Array, Array, Array]:
    """Row-wise mean, sample std, min, max ignoring NaN, without all-NaN warnings."""
    ok = ~np.isnan(h)
    cnt = ok.sum(axis=1)
    z = np.where(ok, h, 0.0)
    s1 = z.sum(axis=1)
    s2 = (z * z).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(cnt > 0, s1 / cnt, np.nan)
        var = np.where(cnt > 1, (s2 - cnt * mean * mean) / (cnt - 1), np.nan)
    std = np.sqrt(np.maximum(var, 0.0))
    lo = np.where(ok, h, np.inf).min(axis=1)
    hi = np.where(ok, h, -np.inf).max(axis=1)
    lo[cnt == 0] = np.nan
    hi[cnt == 0] = np.nan
    return mean, std, lo, hi


@dataclass
class _Slots:
    """Per-key state, rows indexed by slot number; grown by doubling."""

    hist: Array
    ewma: Array
    n: Array
    total: Array
    peak: Array
    cell: Array
    since_cell: Array
    last_t: Array
    prev: Array


class FeatureState:
    """Per-(cpe, wat) history and the feature matrix of each tick.

    Not safe for concurrent use: one control loop owns one state.

    Parameters
    ----------
    stale_after_s : float, default=10.0
        A key not seen for longer than this restarts with an empty history (its old
        throughput says nothing about the link now).
    """

    def __init__(self, stale_after_s: float = 10.0) -> None:
        self.stale_after_s = stale_after_s
        self._slot: dict[tuple[str, str], int] = {}
        self._slots = self._alloc(1024)
        self._last_keys: tuple[object, object, Array] | None = None
        #: keys whose history was dropped because they were stale.
        self.stale_resets = 0

    @staticmethod
    def _alloc(n: int) -> _Slots:
        nan = np.full(n, np.nan)
        return _Slots(hist=np.full((n, HISTORY), np.nan), ewma=np.full((n, len(EWMA_ALPHAS)),
                      np.nan), n=np.zeros(n), total=np.zeros(n), peak=nan.copy(),
                      cell=nan.copy(), since_cell=np.zeros(n), last_t=nan.copy(),
                      prev=np.full((n, len(DIFF_FIELDS)), np.nan))

    def _grow(self, need: int) -> None:
        old = self._slots
        size = len(old.n)
        if need <= size:
            return
        new_size = max(need, 2 * size)
        new = self._alloc(new_size)
        for name in old.__dataclass_fields__:
            getattr(new, name)[:size] = getattr(old, name)
        self._slots = new

    def slots(self, cpe: NDArray[np.str_], wat: NDArray[np.str_]) -> NDArray[np.intp]:
        """Slot index of each row's key, allocating new keys (cached for repeated key arrays)."""
        last = self._last_keys
        if last is not None and last[0] is cpe and last[1] is wat:
            return last[2].astype(np.intp)
        idx = np.empty(len(cpe), dtype=np.intp)
        table = self._slot
        for i, key in enumerate(zip(cpe.tolist(), wat.tolist(), strict=True)):
            s = table.get(key)
            if s is None:
                s = table[key] = len(table)
            idx[i] = s
        self._grow(len(table))
        self._last_keys = (cpe, wat, idx.astype(np.float64))
        return idx

    def update(self, idx: NDArray[np.intp], time_s: Array, sample: Array,
               kpis: dict[str, Array], cell: Array) -> dict[str, Array]:
        """Ingest one tick for slots ``idx`` (each at most once) and return its features.

        ``sample`` is the capacity sample (:func:`capacity_sample`); ``kpis`` maps field names
        to columns; ``cell`` is a numeric cell identity (NaN if unknown).
        """
        st = self._slots
        gap = time_s - st.last_t[idx]
        stale = gap > self.stale_after_s
        if stale.any():
            self.stale_resets += int(stale.sum())
            s_idx = idx[stale]
            st.hist[s_idx] = np.nan
            st.ewma[s_idx] = np.nan
            st.n[s_idx] = 0.0
            st.total[s_idx] = 0.0
            st.peak[s_idx] = np.nan
            st.prev[s_idx] = np.nan
            gap = np.where(stale, np.nan, gap)
        st.last_t[idx] = time_s

        h = np.empty((len(idx), HISTORY))
        h[:, :-1] = st.hist[idx, 1:]
        h[:, -1] = sample
        st.hist[idx] = h

        have = ~np.isnan(sample)
        ew = st.ewma[idx]
        for j, a in enumerate(EWMA_ALPHAS):
            col = ew[:, j]
            ew[:, j] = np.where(have, np.where(np.isnan(col), sample, a * sample + (1 - a) * col),
                                col)
        st.ewma[idx] = ew
        n = st.n[idx] + have
        total = st.total[idx] + np.where(have, sample, 0.0)
        peak = np.fmax(st.peak[idx], sample)
        st.n[idx], st.total[idx], st.peak[idx] = n, total, peak

        old_cell = st.cell[idx]
        changed = (cell != old_cell) & ~np.isnan(cell) & ~np.isnan(old_cell)
        since = np.where(changed, 0.0, np.minimum(st.since_cell[idx] + 1.0, MAX_SINCE_CELL))
        st.since_cell[idx] = since
        st.cell[idx] = np.where(np.isnan(cell), old_cell, cell)

        out: dict[str, Array] = {}
        for i in range(LAGS):
            out[f"lag{i}"] = h[:, -1 - i]
        for w in WINDOWS:
            mean, std, lo, hi = _nan_stats(h[:, -w:])
            out[f"mean{w}"], out[f"std{w}"], out[f"min{w}"], out[f"max{w}"] = mean, std, lo, hi
        for j, a in enumerate(EWMA_ALPHAS):
            out[f"ewma{a}"] = ew[:, j]
        with np.errstate(invalid="ignore", divide="ignore"):
            out["exp_mean"] = np.where(n > 0, total / n, np.nan)
            out["exp_max"] = peak
            out["d01"] = h[:, -1] - h[:, -2]
            out["r0_mean10"] = h[:, -1] / (out["mean10"] + 1.0)
            out["r0_max"] = h[:, -1] / (peak + 1.0)
        out["n_samples"] = np.minimum(n, 1000.0)
        out["since_cell"] = since
        out["gap_s"] = gap

        prev = st.prev[idx]
        cur = np.column_stack([kpis.get(f, np.full(len(idx), np.nan)) for f in DIFF_FIELDS])
        for j, f in enumerate(DIFF_FIELDS):
            out[f"d_{f}"] = cur[:, j] - prev[:, j]
        st.prev[idx] = np.where(np.isnan(cur), prev, cur)
        for name, col in kpis.items():
            out.setdefault(name, col)
        return out


def matrix(features: dict[str, Array], names: Sequence[str], rows: NDArray[np.intp] | None = None
           ) -> Array:
    """Stack the named feature columns (missing ones as NaN) into a float matrix."""
    n = len(next(iter(features.values())))
    m = n if rows is None else len(rows)
    out = np.empty((m, len(names)))
    for j, name in enumerate(names):
        col = features.get(name)
        if col is None:
            out[:, j] = np.nan
        else:
            out[:, j] = col if rows is None else col[rows]
    return out
