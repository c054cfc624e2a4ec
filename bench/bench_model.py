"""Benchmark of the capacity model: real-data accuracy, batch latency, training time.

* Raca 5G traces (if present): 4-fold group-wise CV by session (each session scored by a model
  that never saw it), next-second DL_bitrate: R² and MAE of the model, of persistence, and of a
  plain GBM on radio KPIs + the last two seconds, all in this run.
* Latency: one ``ModelEstimator.step`` over 30,000 rows (10,000 CPEs x 3 WATs), one thread.
* Training: ``CapacityRegressor.fit`` on 1,000,000 synthetic rows.

    nice .venv/bin/python bench/bench_model.py [--json] [--raca DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from xapp.estimator import KpiFrame
from xapp.model import load_estimator, training
from xapp.model.estimator import CapacityRegressor

RACA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "raca5g"


def _r2(y: np.ndarray, p: np.ndarray) -> float:
    return float(1 - ((y - p) ** 2).sum() / ((y - y.mean()) ** 2).sum())


def raca(directory: Path, max_iter: int) -> dict[str, float]:
    from xapp.telemetry.raca5g import read_sessions

    df, _ = read_sessions([directory])
    ds = training.replay(df)
    ys, model_p, pers_p, plain_p = [], [], [], []
    plain_cols = ["lag0", "lag1", "rsrp_dbm", "rsrq_db", "sinr_db", "cqi", "cell_rssi_dbm",
                  "nr_rsrp_dbm", "nr_rsrq_db"]
    for test in training.group_folds(ds.group.tolist(), 4):
        train = ~np.isin(ds.group, test)
        models = training.fit_families(ds, train, {"max_iter": max_iter})
        rows = np.flatnonzero(~train & np.isfinite(ds.label))
        center, _ = training.predict_rows(models, ds, rows)
        tr_rows = np.flatnonzero(train & np.isfinite(ds.label))
        plain = HistGradientBoostingRegressor(max_iter=max_iter, random_state=0).fit(
            np.column_stack([ds.features[c][tr_rows] for c in plain_cols]), ds.label[tr_rows])
        plain_p.append(plain.predict(np.column_stack([ds.features[c][rows] for c in plain_cols])))
        ys.append(ds.label[rows])
        model_p.append(center)
        pers_p.append(ds.persistence[rows])
    y, m, p, g = (np.concatenate(a) for a in (ys, model_p, pers_p, plain_p))
    mae = float(np.abs(y - m).mean())
    pmae = float(np.abs(y - p).mean())
    return {"raca_rows": len(y), "raca_r2": _r2(y, m), "raca_mae_kbps": mae * 1000,
            "raca_persistence_r2": _r2(y, p), "raca_persistence_mae_kbps": pmae * 1000,
            "raca_mae_ratio": mae / pmae, "raca_plain_gbm_r2": _r2(y, g),
            "raca_plain_gbm_mae_kbps": float(np.abs(y - g).mean()) * 1000}


def latency(n_cpes: int = 10_000, repeats: int = 5) -> dict[str, float]:
    est = load_estimator()
    rng = np.random.default_rng(0)
    cpe = np.repeat(np.array([f"cpe{i}" for i in range(n_cpes)]), 3)
    wat = np.tile(np.array(["nr", "wifi", "lifi"]), n_cpes)
    n = len(cpe)
    times = []
    with threadpool_limits(1):
        for t in range(repeats + 3):
            values = {"delivered_mbps": rng.uniform(5, 800, n), "sinr_db": rng.uniform(0, 30, n),
                      "cqi": rng.integers(1, 16, n).astype(float),
                      "snr_db": rng.uniform(0, 40, n), "rtt_ms": rng.uniform(1, 30, n),
                      "phy_rate_mbps": rng.uniform(100, 2400, n)}
            frame = KpiFrame(time_s=float(t), cpe=cpe, wat=wat, values=values)
            t0 = time.perf_counter()
            est.step(frame)
            if t >= 3:  # the first ticks allocate keys
                times.append(time.perf_counter() - t0)
    return {"predict_rows": n, "predict_ms_median": 1000 * float(np.median(times)),
            "predict_ms_max": 1000 * float(np.max(times))}


def train_time(rows: int, max_iter: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 50))
    y = X[:, 0] * 50 + X[:, 1] * 20 + rng.normal(0, 5, rows)
    t0 = time.perf_counter()
    CapacityRegressor(max_iter=max_iter).fit(X, y)
    return {"train_rows": rows, "train_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--raca", type=Path, default=RACA)
    ap.add_argument("--quick", action="store_true", help="100k training rows, fewer repeats")
    ap.add_argument("--max-iter", type=int, default=200)
    args = ap.parse_args()
    out: dict[str, float] = {}
    if args.raca.exists():
        out.update(raca(args.raca, args.max_iter))
    out.update(latency(repeats=2 if args.quick else 5))
    out.update(train_time(100_000 if args.quick else 1_000_000, args.max_iter))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:32s} {v:12.4f}" if isinstance(v, float) else f"{k:32s} {v:12d}")


if __name__ == "__main__":
    main()
