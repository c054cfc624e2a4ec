"""``mcw telemetry``: import and load per-WAT KPI telemetry.

Examples::

    mcw telemetry import-raca ../shared/data/raca5g --influx http://127.0.0.1:8086
    mcw telemetry import-raca ../shared/data/raca5g --out raca.csv

Synthetic telemetry comes from the twin, which is not part of the xApp: ``mcw synth``.
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd
from tqdm import tqdm


def sink_args(p: argparse.ArgumentParser) -> None:
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", metavar="FILE.csv", help="write a long CSV table")
    out.add_argument("--influx", metavar="URL", help="write to this InfluxDB")
    p.add_argument("--bucket", default="mcw/autogen",
                   help="bucket (1.8: database/retention-policy); default mcw/autogen")
    p.add_argument("--org", default="-", help="organisation (ignored by 1.8)")
    p.add_argument("--token", default="", help="token ('user:password' on 1.8)")
    p.add_argument("--json", action="store_true", help="print a JSON summary")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Import and load per-WAT KPI telemetry (wat_kpi)."
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    imp = sub.add_parser("import-raca", help="import Raca 5G trace CSVs",
                         description="Read Raca et al. 5G traces (files or directories) into "
                         "wat_kpi rows; malformed rows are skipped and counted.")
    imp.add_argument("paths", nargs="+", metavar="PATH")
    sink_args(imp)


def emit(df: pd.DataFrame, args: argparse.Namespace, extra: dict[str, object]) -> int:
    """Write ``df`` where :func:`sink_args`' options say (a CSV file or InfluxDB) and print a
    summary; 1 when InfluxDB did not take every point."""
    summary: dict[str, object] = {"rows": len(df), **extra}
    if args.out:
        df.to_csv(args.out, index=False)
        summary["out"] = args.out
    else:
        from xapp.adapters.influx.store import InfluxConfig, InfluxStore

        store = InfluxStore(InfluxConfig(url=args.influx, bucket=args.bucket, org=args.org,
                                         token=args.token))
        try:
            step = 5000
            for i in tqdm(range(0, len(df), step), desc="write", unit="batch", file=sys.stderr,
                          disable=None):
                store.write_table(df.iloc[i:i + step])
                ok = store.flush()  # this CLI's own thread: send each batch as it goes
            ok = store.flush()
        finally:
            store.close()
        summary.update(store.counters.as_dict())
        if not ok:
            print(f"mcw telemetry: {store.buffered} points not written (InfluxDB unreachable)",
                  file=sys.stderr)
            return 1
    print(json.dumps(summary) if args.json else
          " ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        from xapp.adapters.raca5g import read_sessions

        df, stats = read_sessions(args.paths)
        return emit(df, args, {"files": stats.files, "skipped_rows": stats.skipped_rows})
    except (ValueError, OSError) as exc:
        print(f"mcw telemetry {args.action}: {exc}", file=sys.stderr)
        return 1
