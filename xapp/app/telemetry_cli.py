"""``mcw telemetry``: synthesise, import and load per-WAT KPI telemetry.

Examples::

    mcw telemetry synth --scenario wifi-walk --cpes 4 --out walk.csv
    mcw telemetry synth --scenario wifi-walk --influx http://127.0.0.1:8086
    mcw telemetry import-raca ../shared/data/raca5g --influx http://127.0.0.1:8086
    mcw telemetry import-raca ../shared/data/raca5g --out raca.csv
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import pandas as pd
from tqdm import tqdm


def _sink_args(p: argparse.ArgumentParser) -> None:
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", metavar="FILE.csv", help="write a long CSV table")
    out.add_argument("--influx", metavar="URL", help="write to this InfluxDB")
    p.add_argument("--bucket", default="mcw/autogen",
                   help="bucket (1.8: database/retention-policy); default mcw/autogen")
    p.add_argument("--org", default="-", help="organisation (ignored by 1.8)")
    p.add_argument("--token", default="", help="token ('user:password' on 1.8)")
    p.add_argument("--json", action="store_true", help="print a JSON summary")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Generate, import and load per-WAT KPI telemetry (wat_kpi)."
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    syn = sub.add_parser("synth", help="KPIs of a twin scenario, consistent with its capacities",
                         description="Derive NR, Wi-Fi and LiFi KPIs from a twin scenario's "
                         "physical drivers (see twin/kpis.py) and write them.")
    syn.add_argument("--scenario", required=True, help="twin scenario name, e.g. wifi-walk")
    syn.add_argument("--cpes", type=int, default=1, help="number of CPEs (default 1)")
    syn.add_argument("--seed", type=int, default=0)
    syn.add_argument("--duration", type=float, default=None, help="seconds (scenario default)")
    syn.add_argument("--period", type=float, default=1.0, help="report period in s (default 1)")
    syn.add_argument("--start", type=float, default=None,
                     help="epoch seconds of the first report (default: now - duration)")
    _sink_args(syn)
    imp = sub.add_parser("import-raca", help="import Raca 5G trace CSVs",
                         description="Read Raca et al. 5G traces (files or directories) into "
                         "wat_kpi rows; malformed rows are skipped and counted.")
    imp.add_argument("paths", nargs="+", metavar="PATH")
    _sink_args(imp)


def _emit(df: pd.DataFrame, args: argparse.Namespace, extra: dict[str, object]) -> int:
    summary: dict[str, object] = {"rows": len(df), **extra}
    if args.out:
        df.to_csv(args.out, index=False)
        summary["out"] = args.out
    else:
        from xapp.adapters.influx import InfluxConfig, InfluxStore

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
        if args.action == "synth":
            from twin.kpis import synthesize
            from twin.scenarios import build

            scn = build(args.scenario, n_cpes=args.cpes, seed=args.seed,
                        duration_s=args.duration)
            start = time.time() - scn.duration_s if args.start is None else args.start
            df = synthesize(scn, period_s=args.period, seed=args.seed, start_time_s=start)
            return _emit(df, args, {"scenario": args.scenario})
        from xapp.adapters.raca5g import read_sessions

        df, stats = read_sessions(args.paths)
        return _emit(df, args, {"files": stats.files, "skipped_rows": stats.skipped_rows})
    except (ValueError, OSError) as exc:
        print(f"mcw telemetry {args.action}: {exc}", file=sys.stderr)
        return 1
