"""Features of the capacity model, computed the same way online and offline.

One :class:`FeatureState` keeps, per (series, wat) key (series: a CPE and direction), a short
history of *capacity samples* and of a few radio KPIs.  The online estimator feeds it one tick
at a time; training replays a long table through the very same code (:func:`replay`), so the
features the model learns from and the features it sees in service cannot drift apart.

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

from xapp.core.kpis import CELLULAR_FIELDS, LIFI_FIELDS, SATURATED_MIN, WIFI_FIELDS

Array = NDArray[np.float64]

#: Extra cellular fields some sources carry (Raca traces: the NR cell of an NSA attachment and
#: the radio access technology generation, 5 = NR, 4 = LTE, 3 = HSPA/UMTS; the carrier RSSI;
#: the speed of the terminal; the uplink rate and whether the download was active).
CELLULAR_EXTRA: tuple[str, ...] = ("nr_rsrp_dbm", "nr_rsrq_db", "rat", "cell_rssi_dbm",
                                   "speed_kmh", "ul_mbps", "active")

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

#: Capacity samples kept per key.  Ten covers the windows below; longer memory comes from the
#: slow EWMAs, which cost one multiply-add per tick instead of a window pass.
HISTORY = 10
LAGS = 4
WINDOWS: tuple[int, ...] = (3, 10)
#: EWMA smoothing factors; 1.0 is the last capacity sample carried over censored periods (the
#: persistence forecast, which the regressor refines: see ``BASE_FEATURE``).
EWMA_ALPHAS: tuple[float, ...] = (1.0, 0.5, 0.3, 0.1, 0.03)
#: The feature the regressor predicts a correction to (next capacity - last capacity sample).
BASE_FEATURE = "ewma1.0"
#: The volatility feature that widens the lower bound (see ``CapacityRegressor.scale_column``).
SCALE_FEATURE = "std10"
#: Ticks since the last cell change (and since the last capacity sample) are capped: beyond a
#: minute they carry no information.
MAX_SINCE_CELL = 600.0

HISTORY_FEATURES: tuple[str, ...] = (
    tuple(f"lag{i}" for i in range(LAGS))
    + tuple(f"{s}{w}" for w in WINDOWS for s in ("mean", "std", "min", "max"))
    + tuple(f"ewma{a}" for a in EWMA_ALPHAS)
    + ("exp_mean", "exp_max", "d01", "trend10", "r0_mean10", "r0_max", "n_samples",
       "sample_age", "since_cell", "gap_s")
)


def feature_names(family: str) -> tuple[str, ...]:
    """Column names of the feature matrix of ``family``."""
    radio = RADIO_FIELDS[family]
    diffs = tuple(f"d_{f}" for f in DIFF_FIELDS if f in radio)
    return HISTORY_FEATURES + radio + diffs + TRANSPORT_FIELDS


def capacity_sample(delivered: Array, saturated: Array) -> Array:
    """``delivered`` where it measured capacity (saturated or unknown), NaN where censored."""
    return np.where(saturated < SATURATED_MIN, np.nan, delivered)  # NaN (unknown) stays a sample


def _nan_stats(h: Array) -> tuple[Array, Array, Array, Array]:
    """Column-wise mean, sample std, min, max of ``h`` (window x rows) ignoring NaN.

    The window is the short first axis, so every step is one vectorised pass over a
    contiguous row of keys (a reduction over a short inner axis is several times slower).
    """
    ok = ~np.isnan(h)
    cnt = ok.sum(axis=0, dtype=np.float64)
    z = np.where(ok, h, 0.0)
    s1 = z.sum(axis=0)
    s2 = np.einsum("ij,ij->j", z, z)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s1 / cnt
        var = (s2 - cnt * mean * mean) / (cnt - 1.0)
    var[cnt < 2] = np.nan
    std = np.sqrt(np.maximum(var, 0.0))
    # fmin/fmax skip NaN and give NaN only where the whole window is NaN.
    lo = np.fmin.reduce(h, axis=0)
    hi = np.fmax.reduce(h, axis=0)
    return mean, std, lo, hi


@dataclass
class _Slots:
    """Per-key state indexed by slot number (the last axis); grown by doubling.

    Two-dimensional state is stored (k, slots) so a tick touches contiguous rows.
    """

    hist: Array
    ewma: Array
    n: Array
    total: Array
    peak: Array
    cell: Array
    since_cell: Array
    age: Array
    last_t: Array
    prev: Array


class FeatureState:
    """Per-(series, wat) history and the feature matrix of each tick.

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
        return _Slots(hist=np.full((HISTORY, n), np.nan), ewma=np.full((len(EWMA_ALPHAS), n),
                      np.nan), n=np.zeros(n), total=np.zeros(n), peak=nan.copy(),
                      cell=nan.copy(), since_cell=np.zeros(n), age=np.full(n, MAX_SINCE_CELL),
                      last_t=nan.copy(),
                      prev=np.full((len(DIFF_FIELDS), n), np.nan))

    def _grow(self, need: int) -> None:
        old = self._slots
        size = len(old.n)
        if need <= size:
            return
        new_size = max(need, 2 * size)
        new = self._alloc(new_size)
        for name in old.__dataclass_fields__:
            getattr(new, name)[..., :size] = getattr(old, name)
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
        n_rows = len(idx)
        # The online estimator sends the same keys every tick, so idx is usually one contiguous
        # run of slots: a slice then reads and writes the state without gather/scatter copies.
        sel: NDArray[np.intp] | slice = idx
        if n_rows and int(idx[-1]) - int(idx[0]) == n_rows - 1 and (
                n_rows == 1 or bool((np.diff(idx) == 1).all())):
            sel = slice(int(idx[0]), int(idx[0]) + n_rows)
        gap = time_s - st.last_t[sel]
        with np.errstate(invalid="ignore"):
            stale = gap > self.stale_after_s
        if stale.any():
            self.stale_resets += int(stale.sum())
            s_idx = idx[stale]
            st.hist[:, s_idx] = np.nan
            st.ewma[:, s_idx] = np.nan
            st.n[s_idx] = 0.0
            st.total[s_idx] = 0.0
            st.peak[s_idx] = np.nan
            st.age[s_idx] = MAX_SINCE_CELL
            st.prev[:, s_idx] = np.nan
            gap = np.where(stale, np.nan, gap)
        st.last_t[sel] = time_s

        h = np.empty((HISTORY, n_rows))
        h[:-1] = st.hist[1:, sel]
        h[-1] = sample
        st.hist[:, sel] = h

        have = ~np.isnan(sample)
        ew = st.ewma[:, sel]
        if not isinstance(sel, slice):
            ew = ew.copy()
        for j, a in enumerate(EWMA_ALPHAS):
            col = ew[j]
            upd = np.where(np.isnan(col), sample, col + a * (sample - col))
            ew[j] = np.where(have, upd, col)
        st.ewma[:, sel] = ew
        n = st.n[sel] + have
        # How stale the carried-forward sample (ewma1.0, the regressor's base) is: under WRR a
        # WAT held at a small weight stops measuring its capacity, and the forecast must then
        # lean on the radio KPIs instead.
        age = np.where(have, 0.0, np.minimum(st.age[sel] + 1.0, MAX_SINCE_CELL))
        st.age[sel] = age
        total = st.total[sel] + np.where(have, sample, 0.0)
        peak = np.fmax(st.peak[sel], sample)
        st.n[sel], st.total[sel], st.peak[sel] = n, total, peak

        old_cell = st.cell[sel]
        changed = (cell != old_cell) & ~np.isnan(cell) & ~np.isnan(old_cell)
        since = np.where(changed, 0.0, np.minimum(st.since_cell[sel] + 1.0, MAX_SINCE_CELL))
        st.since_cell[sel] = since
        st.cell[sel] = np.where(np.isnan(cell), old_cell, cell)

        out: dict[str, Array] = {}
        for i in range(LAGS):
            out[f"lag{i}"] = h[-1 - i]
        for w in WINDOWS:
            mean, std, lo, hi = _nan_stats(h[-w:])
            out[f"mean{w}"], out[f"std{w}"], out[f"min{w}"], out[f"max{w}"] = mean, std, lo, hi
        for j, a in enumerate(EWMA_ALPHAS):
            out[f"ewma{a}"] = ew[j].copy()
        with np.errstate(invalid="ignore", divide="ignore"):
            out["exp_mean"] = total / n
            out["exp_max"] = peak
            out["d01"] = h[-1] - h[-2]
            out["trend10"] = h[-1] - out["mean10"]
            out["r0_mean10"] = h[-1] / (out["mean10"] + 1.0)
            out["r0_max"] = h[-1] / (peak + 1.0)
        out["n_samples"] = np.minimum(n, 1000.0)
        out["sample_age"] = age
        out["since_cell"] = since
        out["gap_s"] = gap

        prev = st.prev[:, sel]
        nan = np.full(n_rows, np.nan)
        cur = np.stack([kpis.get(f, nan) for f in DIFF_FIELDS])
        d = cur - prev
        for j, f in enumerate(DIFF_FIELDS):
            out[f"d_{f}"] = d[j]
        st.prev[:, sel] = np.where(np.isnan(cur), prev, cur)
        for name, col in kpis.items():
            out.setdefault(name, col)
        return out


def matrix(features: dict[str, Array], names: Sequence[str], rows: NDArray[np.intp] | None = None
           ) -> Array:
    """Stack the named feature columns (missing ones as NaN) into a float matrix.

    The matrix is built column by column into Fortran order (each column one contiguous
    write) and returned as its transposed view: the tree predictor reads any strides, and a
    C-order copy would cost more than it saves.
    """
    n = len(next(iter(features.values())))
    m = n if rows is None else len(rows)
    out = np.empty((len(names), m))
    for j, name in enumerate(names):
        col = features.get(name)
        if col is None:
            out[j] = np.nan
        elif rows is None:
            out[j] = col
        else:
            np.take(col, rows, out=out[j])
    return out.T
