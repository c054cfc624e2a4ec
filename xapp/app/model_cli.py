"""``mcw model``: train, evaluate and inspect the capacity model.

Examples::

    mcw model keygen ~/.mcw/model-signing.key        # and ~/.mcw/model-signing.key.pub
    mcw synth training --synthetic wifi-walk --closed-loop wifi-walk --out twin.csv
    mcw model train --signing-key ~/.mcw/model-signing.key --format raca5g \
        --csv ../shared/data/raca5g --out models
    mcw model train --signing-key KEY --csv twin.csv --out models   # long format
    mcw model train --signing-key KEY --influx http://127.0.0.1:8086 --since 24h
    mcw model sign --signing-key KEY --model models/default
    mcw model evaluate --public-key KEY.pub --format raca5g FILE... --json
    mcw model info --json

The xApp loads only artifacts signed by the key whose public half it is given
(``controls.model.public_key_file``); see :mod:`xapp.model.artifact`.  Training reads files and
InfluxDB only; the twin writes its synthetic and closed-loop telemetry as files
(``mcw synth training``), so the xApp never imports the twin.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from xapp.model import artifact as art
from xapp.model import signing, training
from xapp.model.online import default_model_path, default_public_key_path

KEY_HELP = ("Ed25519 private key file: PEM PKCS#8 (unencrypted, as `mcw model keygen` or "
            "`openssl genpkey -algorithm ed25519` write it) or the raw 32-byte key")
PUBLIC_KEY_HELP = ("trusted Ed25519 public key file (PEM or raw 32 bytes); default "
                   "$MCW_MODEL_PUBLIC_KEY_FILE, else the project's release key keys/"
                   "model-signing.pub")

def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Train the per-technology capacity model on KPI history, score it "
                          "against persistence and EWMA baselines, and inspect artifacts.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    tr = sub.add_parser("train", help="train a new artifact from CSV files or InfluxDB",
                        description="Replay KPI history into features, hold out the latest "
                        "traces/CPEs as a test set (group-wise, time-ordered), fit one model "
                        "per technology family, score it against the baselines, and write a "
                        "versioned skops artifact, its model card and their Ed25519 signature "
                        "into --out.  Every family (cellular, wifi, lifi) needs 50 labelled "
                        "rows: add twin telemetry (mcw synth training) for technologies the "
                        "data lacks.")
    tr.add_argument("--signing-key", required=True, metavar="PATH", help=KEY_HELP)
    src = tr.add_argument_group("data")
    src.add_argument("--csv", nargs="+", default=[], metavar="FILE",
                     help="CSV files or directories (see --format)")
    src.add_argument("--format", choices=["auto", "raca5g", "long"], default="auto",
                     help="CSV format: 'raca5g' (Raca et al. traces), 'long' (a wat_kpi "
                          "table with time_s, cpe, wat, cell and field columns, and optionally "
                          "source, as mcw synth and mcw telemetry import-raca write) or 'auto' "
                          "(each file by its header); default auto")
    src.add_argument("--influx", metavar="URL", help="read wat_kpi from this InfluxDB")
    src.add_argument("--bucket", default="mcw/autogen",
                     help="bucket (InfluxDB 1.8: database/retention-policy); default mcw/autogen")
    src.add_argument("--org", default="-", help="organisation (ignored by 1.8); default '-'")
    src.add_argument("--token", default="", help="token ('user:password' on 1.8; default none)")
    src.add_argument("--since", default="24h", help="InfluxDB range start, e.g. 24h, 7d")
    tr.add_argument("--out", default=str(default_model_path()), help="artifact directory")
    tr.add_argument("--test-fraction", type=float, default=0.25,
                    help="fraction of groups (latest first) held out; default 0.25")
    tr.add_argument("--refit", action="store_true",
                    help="after scoring, refit on all data (the card keeps the held-out scores)")
    tr.add_argument("--max-iter", type=int, default=15,
                    help="trees per family (prediction cost grows with it); default 15")
    tr.add_argument("--learning-rate", type=float, default=0.3, help="default 0.3")
    tr.add_argument("--max-leaf-nodes", type=int, default=31, help="leaves per tree; default 31")
    tr.add_argument("--loss", choices=["squared_error", "absolute_error"],
                    default="squared_error",
                    help="tree loss: squared_error (carries R2) or absolute_error (MAE)")
    tr.add_argument("--json", action="store_true", help="print the model card as JSON")

    ev = sub.add_parser("evaluate", help="score an artifact on trace files",
                        description="Score the model and the persistence/EWMA baselines on the "
                        "next-period capacity of each row of the given files.")
    ev.add_argument("files", nargs="+", metavar="FILE")
    ev.add_argument("--format", choices=["auto", "raca5g", "long"], default="auto",
                    help="as for train; default auto")
    ev.add_argument("--model", default=str(default_model_path()),
                    help="artifact file or directory with LATEST (default: shipped model)")
    ev.add_argument("--public-key", default=str(default_public_key_path()), metavar="PATH",
                    help=PUBLIC_KEY_HELP)
    ev.add_argument("--json", action="store_true", help="print JSON")

    info = sub.add_parser("info", help="verify an artifact and show its model card")
    info.add_argument("--model", default=str(default_model_path()))
    info.add_argument("--public-key", default=str(default_public_key_path()), metavar="PATH",
                      help=PUBLIC_KEY_HELP)
    info.add_argument("--json", action="store_true")

    kg = sub.add_parser("keygen", help="make a new Ed25519 signing key pair",
                        description="Write a new private key to KEY (PEM, mode 0600) and its "
                        "public key to KEY.pub (or --public); never overwrites.  Keep the "
                        "private key off the xApp; give the xApp the public key "
                        "(controls.model.public_key_file, from a Secret in the chart).")
    kg.add_argument("key", metavar="KEY", help="private key file to create")
    kg.add_argument("--public", metavar="PATH", help="public key file (default KEY.pub)")

    sg = sub.add_parser("sign", help="sign an existing artifact and its card",
                        description="Write the Ed25519 signature of an artifact and its card "
                        "as they are (capacity-<version>.sig beside them), e.g. to re-sign "
                        "with a new key.  The card's SHA-256 must match the artifact.")
    sg.add_argument("--signing-key", required=True, metavar="PATH", help=KEY_HELP)
    sg.add_argument("--model", default=str(default_model_path()),
                    help="artifact file or directory with LATEST (default: shipped model)")


def _is_long(path: Path) -> bool:
    """A long wat_kpi table names time_s, cpe and wat in its header; a Raca trace does not."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        header = {c.strip() for c in fh.readline().split(",")}
    return {"time_s", "cpe", "wat"} <= header


def _read_csv(files: list[str], fmt: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Every file as wat_kpi rows with a ``source`` (a long table's own column where it has
    one, else the file's format); ``fmt`` auto tells the formats apart by their headers."""
    from xapp.adapters.raca5g import find_sessions, read_sessions

    paths = find_sessions(files)
    long = [p for p in paths if fmt == "long" or (fmt == "auto" and _is_long(p))]
    raca = [p for p in paths if p not in long]
    frames, stats = [], {"files": len(paths), "rows": 0}
    if raca:
        df, st = read_sessions(raca)
        frames.append(df.assign(source="raca5g"))
        stats["skipped_rows"] = st.skipped_rows
    for path in long:
        df = pd.read_csv(path)
        missing = [c for c in ("time_s", "cpe", "wat") if c not in df]
        if missing:
            raise ValueError(f"{path}: a long CSV needs columns time_s, cpe, wat; missing "
                             f"{missing}")
        df["source"] = df["source"].fillna("long") if "source" in df else "long"
        frames.append(df)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    stats["rows"] = len(out)
    return out, stats


def _replay(df: pd.DataFrame) -> training.Dataset:
    with tqdm(total=len(df), desc="features", unit="row", file=sys.stderr,
              disable=None) as bar:
        return training.replay(df, progress=bar.update)


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _train(args: argparse.Namespace) -> int:
    key = signing.load_private_key(args.signing_key)  # a bad key fails before the training
    frames: list[pd.DataFrame] = []
    sources: dict[str, Any] = {}
    if args.csv:
        df, st = _read_csv(args.csv, args.format)
        frames.append(df)
        # Splits are made within each source (the twin's synthetic and closed-loop rows, Raca
        # traces, a site's export): the card says how many rows each brought.
        sources["csv"] = {"format": args.format, **st,
                          "by_source": {str(k): int(v)
                                        for k, v in df["source"].value_counts().items()}}
    if args.influx:
        from xapp.adapters.influx.store import InfluxConfig, InfluxStore

        store = InfluxStore(InfluxConfig(url=args.influx, bucket=args.bucket, org=args.org,
                                         token=args.token))
        try:
            df = store.read_table(start=f"-{args.since}")
        finally:
            store.close()
        df["source"] = "influx"
        frames.append(df)
        sources["influx"] = {"url": args.influx, "bucket": args.bucket, "since": args.since,
                             "rows": len(df), "skipped_rows": store.counters.parse_skipped}
    if not frames or sum(len(f) for f in frames) == 0:
        print("mcw model train: no data (give --csv or --influx)", file=sys.stderr)
        return 2
    if not 0.0 <= args.test_fraction < 1.0:
        print("mcw model train: --test-fraction must be in [0, 1)", file=sys.stderr)
        return 2
    data = pd.concat(frames, ignore_index=True)
    t0 = time.perf_counter()
    ds = _replay(data)
    if args.max_iter < 1 or args.max_leaf_nodes < 2 or not args.learning_rate > 0:
        print("mcw model train: --max-iter >= 1, --max-leaf-nodes >= 2, --learning-rate > 0",
              file=sys.stderr)
        return 2
    params: dict[str, object] = {"max_iter": args.max_iter, "learning_rate": args.learning_rate,
                                 "max_leaf_nodes": args.max_leaf_nodes, "loss": args.loss}
    train_mask = np.ones(len(ds), dtype=bool)
    test_groups: list[str] = []
    if args.test_fraction > 0:
        train_mask, test_groups = training.time_ordered_group_split(ds, args.test_fraction)
    short = [f for f in art.REQUIRED_FAMILIES if len(ds.rows(f, train_mask)) < 50]
    if short:
        print(f"mcw model train: fewer than 50 labelled rows of {', '.join(short)}; the xApp "
              "needs a model of every family (add twin telemetry, mcw synth training, for "
              "technologies the data lacks)", file=sys.stderr)
        return 2
    fams = list(art.REQUIRED_FAMILIES)
    models = {}
    for fam in tqdm(fams, desc="fit", unit="family", file=sys.stderr, disable=None):
        models.update(training.fit_families(ds, train_mask & (ds.family == fam), params))
    metrics = training.evaluate(models, ds, ~train_mask) if test_groups else {}
    if test_groups and len(set(ds.source.tolist())) > 1:
        metrics["by_source"] = {src: training.evaluate(models, ds, ~train_mask & (ds.source == src))
                                for src in sorted(set(ds.source.tolist()))}
    if args.refit and test_groups:
        models = training.fit_families(ds, None, params)
    finite_t = ds.time_s[np.isfinite(ds.time_s)]
    card = {
        "training": {
            "sources": sources,
            "rows": len(ds),
            "labelled_rows": int(np.isfinite(ds.label).sum()),
            "censored_rows": int(np.isfinite(ds.floor).sum()),
            "groups": len(set(ds.group.tolist())),
            "test_groups": test_groups,
            "refit_on_all": bool(args.refit),
            "data_time_range_s": [float(finite_t.min()), float(finite_t.max())]
            if len(finite_t) else None,
            "params": params,
            # How each family's lower bound was calibrated (held-out groups, rows, coverage
            # on them); the coverage on the held-out test groups is in metrics_heldout.
            "calibration": {fam: getattr(m, "calibration_", None) for fam, m in models.items()},
            "seconds": round(time.perf_counter() - t0, 2),
            "label": "next period's capacity: capacity_mbps when known, else delivered_mbps "
                     "of a saturated period; a censored period's delivered_mbps is a lower "
                     "bound (censored rows, see CapacityRegressor.fit)",
        },
        "metrics_heldout": _clean(metrics),
    }
    path = art.save(models, args.out, card, signing_key=key)
    full = json.loads(art.card_path(path).read_text())
    if args.json:
        print(json.dumps(full, indent=2))
    else:
        print(f"wrote {path} ({full['size_bytes']} bytes, sha256 {full['sha256'][:16]}..., "
              f"signed by key {full['signing_key_id']})")
        if metrics:
            print(f"held-out {len(test_groups)} groups: R2 {metrics['r2']:.3f}, MAE "
                  f"{metrics['mae_mbps']:.3f} Mbps vs persistence "
                  f"{metrics['persistence_mae_mbps']:.3f} "
                  f"(ratio {metrics['mae_ratio_vs_persistence']:.3f}), EWMA "
                  f"{metrics['ewma_mae_mbps']:.3f}; {_coverage_text(metrics)}")
    return 0


def _coverage_text(metrics: dict[str, Any]) -> str:
    fams = ", ".join(f"{fam} {b['lower_coverage']:.3f}"
                     for fam, b in metrics.get("families", {}).items())
    return f"lower-bound coverage {metrics['lower_coverage']:.3f} ({fams})"


def _evaluate(args: argparse.Namespace) -> int:
    loaded = art.load(args.model, public_key=args.public_key)
    df, st = _read_csv(args.files, args.format)
    if len(df) == 0:
        print("mcw model evaluate: no rows", file=sys.stderr)
        return 2
    ds = _replay(df)
    metrics = training.evaluate(loaded.models, ds)
    out = _clean({"model_version": loaded.version, "input": st, **metrics})
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"model {loaded.version} on {out['rows']} rows: R2 {metrics['r2']:.3f}, MAE "
              f"{metrics['mae_kbps']:.0f} kbps vs persistence {metrics['persistence_mae_kbps']:.0f}"
              f" kbps (ratio {metrics['mae_ratio_vs_persistence']:.3f}); "
              f"{_coverage_text(metrics)}")
    return 0


def _info(args: argparse.Namespace) -> int:
    loaded = art.load(args.model, public_key=args.public_key)
    if args.json:
        print(json.dumps(loaded.card, indent=2))
    else:
        c = loaded.card
        print(f"{loaded.path}\n  version {loaded.version}\n  families {', '.join(loaded.models)}"
              f"\n  sha256 {c.get('sha256')}\n  created {c.get('created_utc')}"
              f"\n  signed by key {loaded.key_id}")
        m = c.get("metrics_heldout") or {}
        if m:
            print(f"  held-out R2 {m.get('r2')}, MAE ratio vs persistence "
                  f"{m.get('mae_ratio_vs_persistence')}")
    return 0


def _keygen(args: argparse.Namespace) -> int:
    public = args.public or f"{args.key}.pub"
    kid = signing.generate_key_pair(args.key, public)
    print(f"wrote private key {args.key} (mode 0600) and public key {public}; key id {kid}")
    return 0


def _sign(args: argparse.Namespace) -> int:
    key = signing.load_private_key(args.signing_key)
    out = art.sign(args.model, key)
    print(f"wrote {out}; key id {signing.key_id(key.public_key())}")
    return 0


def run(args: argparse.Namespace) -> int:
    actions = {"train": _train, "evaluate": _evaluate, "info": _info, "keygen": _keygen,
               "sign": _sign}
    try:
        return actions[args.action](args)
    except (art.ArtifactError, ValueError, OSError) as exc:
        print(f"mcw model {args.action}: {exc}", file=sys.stderr)
        return 1
