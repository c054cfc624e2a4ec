"""``mcw synth``: the twin's telemetry as files (or InfluxDB), for loading and for training.

Examples::

    mcw synth kpis --scenario wifi-walk --cpes 4 --out walk.csv
    mcw synth kpis --scenario wifi-walk --influx http://127.0.0.1:8086
    mcw synth training --synthetic wifi-walk paper-static lockin \\
        --closed-loop wifi-walk lockin --out twin-training.csv
    mcw model train --signing-key KEY --csv twin-training.csv --out models

``kpis`` derives NR, Wi-Fi and LiFi KPIs from one scenario's physical drivers
(:mod:`twin.kpis`).  ``training`` writes the mix the shipped model is trained on: for each
scenario two replicas, one mostly saturated and one mostly censored (under WRR most subflows are
held below capacity most of the time, so the model must learn to forecast from radio KPIs with
little throughput history), and the telemetry of the shipped control loop run on the
``--closed-loop`` scenarios (EWMA estimator, 1 s period, two seeds): what agents report under
WRR, delivered throughput and saturation only, without the twin's true capacity, so its labels
are censoring-aware as real telemetry's are.  Every row carries a ``source`` column
(``synthetic`` or ``closed-loop``), which ``mcw model train`` splits by.

The twin is a plug-in of the xApp: it imports the xApp, never the other way round.
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from twin.closed_loop_data import closed_loop_telemetry
from twin.kpis import synthesize
from twin.scenarios import SCENARIOS, ScenarioError, build
from xapp.app.telemetry_cli import emit, sink_args

#: Fraction of censored (not saturated) periods in each synthetic replica.
CENSOR_FRACTIONS: tuple[float, ...] = (0.1, 0.7)
#: Seeds of the closed-loop runs (the twin's figures use seed 0: the model never trains on the
#: runs it is scored on).
CLOSED_LOOP_SEEDS: tuple[int, ...] = (200, 201)
PERIOD_S = 1.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0].split(": ", 1)[1] if __doc__ else None
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    kp = sub.add_parser("kpis", help="KPIs of one twin scenario, consistent with its capacities",
                        description="Derive NR, Wi-Fi and LiFi KPIs from a twin scenario's "
                        "physical drivers (see twin/kpis.py) and write them.")
    kp.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    kp.add_argument("--cpes", type=int, default=1, help="number of CPEs (default 1)")
    kp.add_argument("--seed", type=int, default=0)
    kp.add_argument("--duration", type=float, default=None, help="seconds (scenario default)")
    kp.add_argument("--period", type=float, default=1.0, help="report period in s (default 1)")
    kp.add_argument("--start", type=float, default=None,
                    help="epoch seconds of the first report (default: now - duration)")
    sink_args(kp)
    tr = sub.add_parser("training", help="the synthetic and closed-loop training mix",
                        description="Write the twin's training telemetry (see mcw synth "
                        "--help) for mcw model train --csv.")
    tr.add_argument("--synthetic", nargs="*", default=[], metavar="SCENARIO",
                    choices=sorted(SCENARIOS), help="scenarios replayed as KPIs")
    tr.add_argument("--closed-loop", nargs="*", default=[], metavar="SCENARIO",
                    choices=sorted(SCENARIOS), help="scenarios run through the control loop")
    tr.add_argument("--cpes", type=int, default=8, help="CPEs per scenario (default 8)")
    sink_args(tr)


def synthetic(names: list[str], n_cpes: int) -> pd.DataFrame:
    """KPIs of each scenario in two replicas (mostly saturated, mostly censored)."""
    frames = []
    for i, name in enumerate(names):
        for seed, censor in enumerate(CENSOR_FRACTIONS):
            scn = build(name, n_cpes=n_cpes, seed=100 + seed)
            frames.append(synthesize(scn, period_s=PERIOD_S, censor_fraction=censor, seed=seed,
                                     cpe_prefix=f"syn-{name}-{seed}-{PERIOD_S}-",
                                     start_time_s=1e6 * (i + 1)))
    return pd.concat(frames, ignore_index=True)


def training_mix(synthetic_names: list[str], closed_loop_names: list[str],
                 n_cpes: int) -> pd.DataFrame:
    """The training table: synthetic rows, then closed-loop rows (without the true capacity
    a real agent cannot report), each with its ``source``."""
    frames = []
    if synthetic_names:
        frames.append(synthetic(synthetic_names, n_cpes).assign(source="synthetic"))
    if closed_loop_names:
        df = closed_loop_telemetry(closed_loop_names, n_cpes=n_cpes, seeds=CLOSED_LOOP_SEEDS)
        frames.append(df.drop(columns=["capacity_mbps"], errors="ignore")
                      .assign(source="closed-loop"))
    return pd.concat(frames, ignore_index=True)


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "kpis":
            scn = build(args.scenario, n_cpes=args.cpes, seed=args.seed,
                        duration_s=args.duration)
            start = time.time() - scn.duration_s if args.start is None else args.start
            df = synthesize(scn, period_s=args.period, seed=args.seed, start_time_s=start)
            return emit(df, args, {"scenario": args.scenario})
        if not args.synthetic and not args.closed_loop:
            print("mcw synth training: give --synthetic and/or --closed-loop scenarios",
                  file=sys.stderr)
            return 2
        df = training_mix(args.synthetic, args.closed_loop, args.cpes)
        return emit(df, args, {"synthetic": args.synthetic, "closed_loop": args.closed_loop})
    except (ScenarioError, ValueError, OSError) as exc:
        print(f"mcw synth {args.action}: {exc}", file=sys.stderr)
        return 1
