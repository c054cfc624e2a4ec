"""``mcw twin``: simulate MPTCP WRR connections under a weight policy and compare to the oracle.

Examples::

    mcw twin --scenario paper-static --policy fixed:30,100,1
    mcw twin --scenario wifi-walk --policy probe --json
    mcw twin --scenario lockin --policy xapp --estimator ewma --plot out/lockin.png
    mcw twin --scenario wifi-walk --policy xapp --direction ul --json
    mcw twin --scenario wifi-walk --policy xapp --direction ul --backend rate-caps
    mcw twin --scenario wifi-walk --a1-policy policy.json --traffic control-bulk
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from twin.a1_file import PolicyFileError, load
from twin.loop_driver import BACKENDS
from twin.policies import (
    ESTIMATORS,
    POLICIES,
    TwinOptions,
    TwinPolicyError,
    run_with_oracle,
    summary,
)
from twin.scenarios import DIRECTIONS, SCENARIOS, Scenario, ScenarioError, build
from twin.traffic import MIXES, TrafficError, mix
from twin.try_policy import format_trial, trial


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Simulate CPEs whose MPTCP connection uses weighted round-robin (cwnd_limited=N) over "
        "5G NR, Wi-Fi and LiFi, with weights from a policy, and compare the time-averaged "
        "aggregate throughput to the oracle (the best integer weights for the true capacity "
        "of every 100 ms step).  Each scenario has a downlink (proxy to CPE, weights applied "
        "by the proxy's agent; what the paper measured) and an uplink (CPE to proxy, applied "
        "by the CPE's agent); the xapp policy steers both, --direction picks the one "
        "reported.")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "scenarios:\n" + "\n".join(
        f"  {name:13s} {spec.description}" for name, spec in SCENARIOS.items()) + (
        "\npolicies:\n"
        "  oracle        exact optimum for the true capacities, every step\n"
        "  lagged-oracle the oracle one control period (--period) late: best weights for the\n"
        "                previous period's mean capacities, the causal headroom\n"
        "  probe         the paper: 5 s iperf3 probe every 10 s, weights every 12 s\n"
        "  probe-replay  the paper's measured run: probe weights replayed, no probe traffic\n"
        "  equal         plain round-robin (all weights 1)\n"
        "  fixed:A,B,C   constant weights for nr,wifi,lifi (e.g. fixed:30,100,1)\n"
        "  xapp          estimator + weight engine every control period")
    parser.add_argument("--scenario", default="paper-static", choices=sorted(SCENARIOS),
                        help="capacity traces to simulate (default: %(default)s)")
    parser.add_argument("--policy", default="xapp", metavar="P",
                        help=f"one of {', '.join(POLICIES)} (default: %(default)s)")
    parser.add_argument("--direction", default="dl", choices=DIRECTIONS,
                        help="direction reported: dl (proxy to CPE, the paper's) or ul (CPE "
                             "to proxy); aggregate, oracle and ratios are that direction's "
                             "(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--cpes", type=int, default=1, help="number of CPEs (default: 1)")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="simulated seconds (default: the scenario's)")
    parser.add_argument("--estimator", default="ewma", choices=ESTIMATORS,
                        help="capacity estimator of the xapp policy (default: %(default)s)")
    parser.add_argument("--period", type=float, default=1.0, metavar="S",
                        help="control period of the xapp policy in s (default: 1.0)")
    parser.add_argument("--hysteresis", type=float, default=1.0, metavar="PCT",
                        help="xapp: new weights only if T(w) improves by more (default: 1.0)")
    parser.add_argument("--backend", default=None, choices=BACKENDS,
                        help="the agents' backend (CPE uplink and proxy downlink), xapp policy "
                             "only: wrr (the 5G-CLARITY kernel) or rate-caps (mptcp-shares on "
                             "mainline: per-WAT egress caps, the xApp sends caps_mbps, and "
                             "traffic classes) (default: rate-caps with --traffic or "
                             "--a1-policy, else wrr)")
    parser.add_argument("--traffic", default=None, choices=sorted(MIXES),
                        help="the flows every CPE carries, each in the class of the first rule "
                             "it matches (rate-caps): bulk alone, or a control loop (200 bytes "
                             "each way every 10 ms, TCP port 5302) beside bulk (port 5301) "
                             "(default: one backlogged transfer; control-bulk with "
                             "--a1-policy)")
    parser.add_argument("--a1-policy", type=Path, default=None, metavar="FILE",
                        help="try an A1 policy of type 20101 (the JSON payload, rules and all) "
                             "before applying it: the xapp policy runs under it and under the "
                             "same policy without its rules, and the figures per flow and "
                             "direction are printed side by side (--policy and --direction "
                             "do not apply)")
    parser.add_argument("--max-weight", type=int, default=100,
                        help="largest WRR weight (default: 100, as in the paper)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.add_argument("--plot", type=Path, default=None, metavar="FILE",
                        help="write a PNG of CPE 0 (throughput, weights, capacities)")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.max_weight <= 255:
        print("mcw twin: --max-weight must be in 1..255", file=sys.stderr)
        return 2
    if args.period <= 0 or args.hysteresis < 0:
        print("mcw twin: --period must be > 0 and --hysteresis >= 0", file=sys.stderr)
        return 2
    trying = args.a1_policy is not None
    traffic = args.traffic or ("control-bulk" if trying else None)
    backend = args.backend or ("rate-caps" if traffic is not None else "wrr")
    opts = TwinOptions(estimator=args.estimator, period_s=args.period,
                       hysteresis_pct=args.hysteresis, max_weight=args.max_weight,
                       backend=backend)
    try:
        scenario = build(args.scenario, n_cpes=args.cpes, seed=args.seed,
                         duration_s=args.duration, direction=args.direction,
                         traffic=None if traffic is None else mix(traffic))
        if trying:
            return _try(scenario, load(args.a1_policy), opts, args)
        res = run_with_oracle(scenario, args.policy, opts,
                              progress=not args.json and args.cpes > 100)
    except (ScenarioError, TwinPolicyError, TrafficError, PolicyFileError) as exc:
        print(f"mcw twin: {exc}", file=sys.stderr)
        return 2
    doc = summary(res)
    doc["seed"] = args.seed
    if args.plot is not None:
        from twin.plots import plot_run

        try:
            doc["plot"] = str(plot_run(res, scenario.capacity_mbps, args.plot))
        except ValueError as exc:
            print(f"mcw twin: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"scenario {doc['scenario']}  direction {doc['direction']}  policy {doc['policy']}  "
          f"backend {backend}  CPEs {doc['n_cpes']}  {doc['duration_s']:.0f} s  "
          f"seed {args.seed}")
    rows = [("aggregate", doc["aggregate_mbps"]), ("oracle", doc["oracle_mbps"]),
            ("sum of capacities", doc["capacity_sum_mbps"])]
    rows += [(f"  carried on {w}", v) for w, v in doc["per_wat_mbps"].items()]
    for label, value in rows:
        print(f"  {label:20s} {value:10.1f} Mbps")
    ratio = doc["ratio_to_oracle"]
    print(f"  {'ratio to oracle':20s} {ratio if ratio is not None else float('nan'):10.3f}")
    lagged = doc.get("lagged_oracle_ratio")
    if lagged is not None:
        late = doc["lagged_oracle_period_s"]
        print(f"  {'lagged oracle':20s} {lagged:10.3f}   (the oracle {late:g} s late: what "
              "perfect knowledge of the last period gives)")
    print(f"  {'weight updates':20s} {doc['weight_updates']:10.1f}")
    for name, flow in doc.get("flows", {}).items():
        rtt = flow.get("rtt_ms")
        delay = "" if rtt is None or rtt["p50"] is None else (
            f"   RTT p50 {rtt['p50']:.1f} ms, p95 {rtt['p95']:.1f} ms")
        print(f"  {'flow ' + name:20s} {flow['mbps']:10.3f} Mbps{delay}")
    if "plot" in doc:
        print(f"  plot: {doc['plot']}")
    return 0


def _try(scenario: Scenario, payload: dict[str, Any], opts: TwinOptions,
         args: argparse.Namespace) -> int:
    """``--a1-policy``: the runs with and without the policy's rules, side by side."""
    doc = trial(scenario, payload, opts)
    doc["seed"] = args.seed
    doc["policy_file"] = str(args.a1_policy)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"policy {args.a1_policy}  seed {args.seed}")
    for line in format_trial(doc):
        print(line)
    return 0
