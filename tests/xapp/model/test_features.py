"""Features: online ticks and offline replay agree; censored samples never enter the history."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tests.xapp.model.conftest import synthetic_table
from xapp.model import training
from xapp.model.features import FeatureState, capacity_sample, feature_names


def test_replay_equals_online_ticks() -> None:
    df = synthetic_table(seed=3, n_cpes=2, duration_s=30.0)
    ds = training.replay(df)
    # Online: the same rows, tick by tick, in a fresh state.
    state = FeatureState()
    order = df.sort_values(["cpe", "wat", "time_s"], kind="mergesort").reset_index(drop=True)
    keys = list(zip(order["cpe"], order["wat"], strict=True))
    slots = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    online = {name: np.full(len(order), np.nan) for name in feature_names("wifi")}
    for t, part in order.groupby("time_s", sort=True):
        rows = part.index.to_numpy()
        idx = np.array([slots[k] for k in zip(part["cpe"], part["wat"], strict=True)])
        sample = capacity_sample(part["delivered_mbps"].to_numpy(), part["saturated"].to_numpy())
        kpis = {c: part[c].to_numpy(dtype=float) for c in part.columns
                if c not in ("time_s", "cpe", "wat", "cell", "capacity_mbps",
                             "delivered_mbps", "saturated")}
        out = state.update(idx, np.full(len(rows), float(t)), sample, kpis,
                           np.full(len(rows), np.nan))
        for name in online:
            if name in out:
                online[name][rows] = out[name]
    for name in ("lag0", "lag3", "mean10", "std10", "min3", "trend10", "ewma1.0", "ewma0.1",
                 "exp_max", "snr_db", "d_snr_db"):
        np.testing.assert_allclose(online[name], ds.features[name], equal_nan=True,
                                   err_msg=name)


def test_censored_periods_are_not_history_or_labels() -> None:
    state = FeatureState()
    idx = np.array([0])
    for t, (dlv, sat) in enumerate([(100.0, 1.0), (20.0, 0.0), (30.0, 0.0)]):
        out = state.update(idx, np.array([float(t)]),
                           capacity_sample(np.array([dlv]), np.array([sat])), {},
                           np.array([np.nan]))
    assert np.isnan(out["lag0"][0]) and np.isnan(out["lag1"][0])
    assert out["lag2"][0] == 100.0
    assert out["exp_max"][0] == 100.0 and out["n_samples"][0] == 1.0
    # The base of the regressor carries the last sample, and says how old it is.
    assert out["ewma1.0"][0] == 100.0 and out["sample_age"][0] == 2.0


def test_stale_key_restarts_history() -> None:
    state = FeatureState(stale_after_s=5.0)
    idx = np.array([0])
    state.update(idx, np.array([0.0]), np.array([50.0]), {}, np.array([np.nan]))
    out = state.update(idx, np.array([60.0]), np.array([10.0]), {}, np.array([np.nan]))
    assert state.stale_resets == 1
    assert np.isnan(out["lag1"][0]) and out["exp_mean"][0] == 10.0


def test_cell_change_resets_since_cell() -> None:
    state = FeatureState()
    idx = np.array([0])
    for t in range(5):
        out = state.update(idx, np.array([float(t)]), np.array([1.0]), {}, np.array([7.0]))
    assert out["since_cell"][0] == 5.0  # ticks seen on this cell, the first counts
    out = state.update(idx, np.array([5.0]), np.array([1.0]), {}, np.array([8.0]))
    assert out["since_cell"][0] == 0.0


def test_contiguous_and_scattered_slots_agree() -> None:
    """The slice fast path (keys in slot order) and the gather path compute the same."""
    rng = np.random.default_rng(5)
    n, ticks = 7, 15
    fast, slow = FeatureState(), FeatureState()
    perm = rng.permutation(n)
    for t in range(ticks):
        sample = np.where(rng.uniform(size=n) < 0.2, np.nan, rng.uniform(0, 100, n))
        kpis = {"sinr_db": rng.uniform(0, 30, n), "cqi": rng.integers(0, 16, n).astype(float)}
        cell = rng.integers(0, 2, n).astype(float)
        times = np.full(n, float(t))
        a = fast.update(np.arange(n), times, sample, kpis, cell)
        b = slow.update(perm, times[perm], sample[perm], {k: v[perm] for k, v in kpis.items()},
                        cell[perm])
        # Slot perm[i] of `slow` received row i of the permuted inputs.
        for name in feature_names("cellular"):
            if name in a:
                np.testing.assert_allclose(b[name], a[name][perm], equal_nan=True,
                                           err_msg=name)


def test_replay_keeps_directions_apart_and_gives_link_rows_to_both() -> None:
    table = synthetic_table(seed=5, n_cpes=1, duration_s=20.0)
    df = table[table["wat"] == "nr"].reset_index(drop=True)  # one series per direction
    plain = training.replay(df)
    # The same table, labelled both ways: one series per direction, each the plain one.
    both = pd.concat([df.assign(direction="dl"), df.assign(direction="ul")], ignore_index=True)
    ds = training.replay(both)
    assert len(ds.label) == 2 * len(plain.label)
    for name in ("lag0", "mean10", "ewma0.3"):
        np.testing.assert_allclose(ds.features[name][: len(plain.label)],
                                   plain.features[name], equal_nan=True)
    # dl at twice the throughput: its history never mixes with ul's.
    scaled = both.copy()
    dl = scaled["direction"] == "dl"
    scaled.loc[dl, "delivered_mbps"] *= 2
    ds2 = training.replay(scaled)
    first = len(plain.label)
    np.testing.assert_allclose(ds2.features["lag0"][:first], 2 * plain.features["lag0"],
                               equal_nan=True)
    np.testing.assert_allclose(ds2.features["lag0"][first:], plain.features["lag0"],
                               equal_nan=True)
    # A row without a direction (radio KPIs) goes to both; an unknown direction is dropped.
    mixed = pd.concat([both, df.head(1).assign(direction=""),
                       df.head(1).assign(direction="sideways")], ignore_index=True)
    assert len(training.replay(mixed).label) == len(ds.label) + 2
