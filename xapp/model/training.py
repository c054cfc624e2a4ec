"""Offline side of the model: replay a long KPI table into features, split, fit, score.

A *long table* has one row per (time_s, cpe, wat) with the ``wat_kpi`` fields as columns and
optionally ``capacity_mbps`` (ground truth, only synthetic telemetry has it).  Labels are the
next row of the same key: its ``capacity_mbps`` when known, otherwise its capacity sample
(``delivered_mbps`` when saturated, see :mod:`xapp.model.features`); a censored next period
gives no exact label, so the model never learns "slow" from a WAT that was only held back.
What such a period delivered is still a *lower bound* of its capacity (``floor``): fitting
passes those rows as censored (:meth:`CapacityRegressor.fit`), so a forecast below what the
WAT certainly carried is pushed up to it.  Without them the labels would come only from
periods in which the WAT was the bottleneck, that is when its capacity was low for its
weight: a sample biased low, which teaches the model to under-forecast a WAT it rarely sees
saturated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from xapp.core.forecast import DIRECTIONS, expansion
from xapp.core.kpis import FAMILIES, cell_code, family_of, normalise_wat
from xapp.model.estimator import CapacityRegressor
from xapp.model.features import (
    BASE_FEATURE,
    DIFF_FIELDS,
    RADIO_FIELDS,
    SCALE_FEATURE,
    TRANSPORT_FIELDS,
    FeatureState,
    capacity_sample,
    feature_names,
)

Array = NDArray[np.float64]


@dataclass
class Dataset:
    """Features, labels and baselines of every row of a replayed long table."""

    features: dict[str, Array]
    family: NDArray[np.str_]
    label: Array
    #: what the next period delivered where it was censored (a lower bound of the label,
    #: which is then NaN); NaN elsewhere.
    floor: Array
    group: NDArray[np.str_]
    time_s: Array
    #: last capacity sample (carried forward over censored periods) and its fast EWMA.
    persistence: Array
    ewma: Array
    #: data source of each row (``source`` column, e.g. "raca5g", "synthetic"); splits are
    #: made within each source so every source is represented on both sides.
    source: NDArray[np.str_]

    def __len__(self) -> int:
        return len(self.label)

    def rows(self, family: str, mask: NDArray[np.bool_] | None = None,
             censored: bool = False) -> NDArray[np.intp]:
        """Rows of ``family`` with a label (and, with ``censored``, those with a floor)."""
        have = np.isfinite(self.label)
        if censored:
            have |= np.isfinite(self.floor)
        sel = (self.family == family) & have
        if mask is not None:
            sel &= mask
        return np.flatnonzero(sel)

    def matrix(self, family: str, rows: NDArray[np.intp]) -> Array:
        names = feature_names(family)
        out = np.empty((len(rows), len(names)))
        for j, name in enumerate(names):
            col = self.features.get(name)
            out[:, j] = np.nan if col is None else col[rows]
        return out


def _column(df: pd.DataFrame, name: str) -> Array:
    if name in df:
        return np.asarray(pd.to_numeric(df[name], errors="coerce"), dtype=np.float64)
    return np.full(len(df), np.nan)


def replay(df: pd.DataFrame, progress: Callable[[int], None] | None = None) -> Dataset:
    """Run a long table through :class:`FeatureState` key by key, in time order.

    Rows of unknown WATs are dropped.  ``progress`` is called with the number of rows done.

    Keys are (cpe, wat, direction), as the serving path keeps its series
    (:attr:`~xapp.core.forecast.KpiFrame.series`): when the table has rows with a
    ``direction`` (``dl``/``ul``), a row without one (radio KPIs, points from before
    directions existed) is replayed into both directions, as the intake does; a table without
    directions replays per (cpe, wat) as before.  Rows with another direction are dropped.
    """
    wat = np.array([normalise_wat(str(w)) or "" for w in df["wat"]], dtype=object)
    keep = wat != ""
    direction = (df["direction"].fillna("").astype(str).to_numpy(dtype=str)
                 if "direction" in df else np.full(len(df), "", dtype=str))
    keep &= np.isin(direction, ["", *DIRECTIONS])
    df = df.loc[keep].copy()
    df["wat"] = wat[keep]
    direction = direction[keep]
    if (direction != "").any():
        take, direction = expansion(direction, len(df))
        df = df.iloc[take].reset_index(drop=True)
    df["direction"] = direction
    df["_order"] = np.arange(len(df))
    df = df.sort_values(["cpe", "wat", "direction", "time_s", "_order"],
                        kind="mergesort").reset_index(drop=True)
    n = len(df)
    key = (df["cpe"].astype(str) + "\x00" + df["wat"].astype(str) + "\x00"
           + df["direction"].astype(str))
    key_codes, _ = pd.factorize(key)
    start = np.r_[True, key_codes[1:] != key_codes[:-1]]
    first_idx = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    rank = np.arange(n) - first_idx

    time_s = _column(df, "time_s")
    sample = capacity_sample(_column(df, "delivered_mbps"), _column(df, "saturated"))
    fields = sorted({f for fam in FAMILIES for f in RADIO_FIELDS[fam]} | set(DIFF_FIELDS)
                    | set(TRANSPORT_FIELDS))
    kpis = {f: _column(df, f) for f in fields if f in df}
    cells = np.array([cell_code(str(c)) if c is not None else np.nan
                      for c in (df["cell"] if "cell" in df else [None] * n)])
    names = sorted({nm for fam in FAMILIES for nm in feature_names(fam)})
    feats = {nm: np.full(n, np.nan) for nm in names}

    state = FeatureState()
    order = np.argsort(rank, kind="stable")
    bounds = np.searchsorted(rank[order], np.arange(rank.max() + 2 if n else 1))
    done = 0
    for r in range(len(bounds) - 1):
        rows = order[bounds[r]:bounds[r + 1]]
        if len(rows) == 0:
            continue
        out = state.update(key_codes[rows].astype(np.intp), time_s[rows], sample[rows],
                           {f: c[rows] for f, c in kpis.items()}, cells[rows])
        for nm, col in out.items():
            if nm in feats:
                feats[nm][rows] = col
        done += len(rows)
        if progress is not None:
            progress(len(rows))

    same_next = np.r_[key_codes[1:] == key_codes[:-1], False]
    truth = _column(df, "capacity_mbps")
    nxt_truth = np.r_[truth[1:], np.nan]
    nxt_sample = np.r_[sample[1:], np.nan]
    label: Array = np.where(same_next, np.where(np.isfinite(nxt_truth), nxt_truth, nxt_sample),
                            np.nan).astype(np.float64)
    nxt_delivered = np.r_[_column(df, "delivered_mbps")[1:], np.nan]
    floor: Array = np.where(same_next & ~np.isfinite(label), nxt_delivered, np.nan)
    persistence = pd.Series(sample).groupby(key_codes).ffill().to_numpy(dtype=np.float64)
    family = np.array([family_of(w) for w in df["wat"]], dtype=str)
    return Dataset(features=feats, family=family, label=label, floor=floor,
                   group=df["cpe"].astype(str).to_numpy(dtype=str), time_s=time_s,
                   persistence=persistence, ewma=feats["ewma0.3"].copy(),
                   source=(df["source"].astype(str).to_numpy(dtype=str) if "source" in df
                           else np.full(n, "", dtype=str)))


def time_ordered_group_split(ds: Dataset, test_fraction: float
                             ) -> tuple[NDArray[np.bool_], list[str]]:
    """Train mask and held-out groups: within each source, the latest ``test_fraction`` of the
    groups (traces or CPEs, ordered by their first row) are held out whole, so no session is on
    both sides and the test data is never older than the training data of its source."""
    test: list[str] = []
    frame = pd.DataFrame({"t": ds.time_s, "g": ds.group, "s": ds.source})
    for _, part in frame.groupby("s", sort=True):
        starts = part.groupby("g")["t"].min().sort_values(kind="mergesort")
        groups = [str(g) for g in starts.index]
        n_test = max(1, round(len(groups) * test_fraction)) if len(groups) > 1 else 0
        test.extend(groups[len(groups) - n_test:])
    return ~np.isin(ds.group, test), test


def group_folds(groups: Sequence[str], k: int, seed: int = 0) -> list[list[str]]:
    """``k`` disjoint sets of groups (shuffled with ``seed``) for group-wise cross-validation."""
    uniq = sorted(set(groups))
    rng = np.random.default_rng(seed)
    rng.shuffle(uniq)
    return [list(map(str, f)) for f in np.array_split(np.array(uniq, dtype=object), k)]


def fit_families(ds: Dataset, mask: NDArray[np.bool_] | None, params: dict[str, object]
                 ) -> dict[str, CapacityRegressor]:
    """One regressor per family that has at least 50 labelled rows under ``mask``."""
    models: dict[str, CapacityRegressor] = {}
    for fam in FAMILIES:
        if len(ds.rows(fam, mask)) < 50:
            continue
        rows = ds.rows(fam, mask, censored=True)
        # Rows in time order per group, groups in a seeded random order.  The regressor
        # calibrates its lower bound on whole groups (sessions/CPEs) held out of its trees.
        rows = rows[np.lexsort((ds.time_s[rows], _shuffled_groups(ds.group[rows])))]
        names = feature_names(fam)
        exact = np.isfinite(ds.label[rows])
        models[fam] = CapacityRegressor(**{  # type: ignore[arg-type]
            "base_column": names.index(BASE_FEATURE), "scale_column": names.index(SCALE_FEATURE),
            **params}).fit(ds.matrix(fam, rows), np.where(exact, ds.label[rows], ds.floor[rows]),
                           groups=ds.group[rows], censored=~exact)
    return models


def _shuffled_groups(groups: NDArray[np.str_], seed: int = 0) -> NDArray[np.intp]:
    """A rank per row: its group's position in a seeded permutation of the groups."""
    codes, uniq = pd.factorize(groups, sort=True)
    perm = np.random.default_rng(seed).permutation(len(uniq))
    return np.asarray(perm[codes], dtype=np.intp)


def _scores(y: Array, pred: Array) -> dict[str, float]:
    ok = np.isfinite(pred)
    y, pred = y[ok], pred[ok]
    if len(y) == 0:
        return {"mae_mbps": float("nan"), "r2": float("nan"), "rows": 0}
    ss_tot = float(((y - y.mean()) ** 2).sum())
    ss_res = float(((y - pred) ** 2).sum())
    return {"mae_mbps": float(np.abs(y - pred).mean()),
            "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"), "rows": len(y)}


def predict_rows(models: dict[str, CapacityRegressor], ds: Dataset, rows: NDArray[np.intp]
                 ) -> tuple[Array, Array]:
    """(central, lower) forecasts for ``rows``; NaN for families without a model."""
    center = np.full(len(rows), np.nan)
    lower = np.full(len(rows), np.nan)
    for fam, model in models.items():
        sel = np.flatnonzero(ds.family[rows] == fam)
        if len(sel):
            c, lo = model.predict_both(ds.matrix(fam, rows[sel]))
            center[sel], lower[sel] = c, lo
    return center, lower


def evaluate(models: dict[str, CapacityRegressor], ds: Dataset,
             mask: NDArray[np.bool_] | None = None) -> dict[str, object]:
    """Scores of the model and of the persistence and EWMA baselines, overall and per family.

    Baselines are scored on exactly the rows the model is scored on.  ``lower_coverage`` is the
    fraction of rows whose label is at least the lower forecast, overall and per family (in
    ``families``), beside ``lower_coverage_target`` (``1 - lower_quantile`` of the family's
    model; overall, NaN when the families' targets differ).
    """
    result: dict[str, object] = {}
    per_family: dict[str, object] = {}
    all_rows = np.flatnonzero(np.isfinite(ds.label) & (True if mask is None else mask))
    center, lower = predict_rows(models, ds, all_rows)
    have = np.isfinite(center)
    rows, center, lower = all_rows[have], center[have], lower[have]
    y = ds.label[rows]
    pers = np.where(np.isfinite(ds.persistence[rows]), ds.persistence[rows], 0.0)
    ewma = np.where(np.isfinite(ds.ewma[rows]), ds.ewma[rows], pers)

    targets = {fam: 1.0 - float(m.lower_quantile) for fam, m in models.items()}

    def block(sel: NDArray[np.bool_], target: float) -> dict[str, object]:
        m = _scores(y[sel], center[sel])
        p = _scores(y[sel], pers[sel])
        e = _scores(y[sel], ewma[sel])
        return {
            "rows": m["rows"], "r2": m["r2"], "mae_mbps": m["mae_mbps"],
            "persistence_r2": p["r2"], "persistence_mae_mbps": p["mae_mbps"],
            "ewma_r2": e["r2"], "ewma_mae_mbps": e["mae_mbps"],
            "mae_ratio_vs_persistence": (m["mae_mbps"] / p["mae_mbps"]
                                         if p["mae_mbps"] else float("nan")),
            "lower_coverage": float(np.mean(y[sel] >= lower[sel])) if sel.any() else float("nan"),
            "lower_coverage_target": target,
        }

    present = {targets[f] for f in set(ds.family[rows].tolist()) if f in targets}
    result.update(block(np.ones(len(rows), dtype=bool),
                        present.pop() if len(present) == 1 else float("nan")))
    for fam in FAMILIES:
        sel = ds.family[rows] == fam
        if sel.any():
            per_family[fam] = block(sel, targets[fam])
    result["families"] = per_family
    result["mae_kbps"] = float(result["mae_mbps"]) * 1000.0  # type: ignore[arg-type]
    result["persistence_mae_kbps"] = float(result["persistence_mae_mbps"]) * 1000.0  # type: ignore[arg-type]
    return result
