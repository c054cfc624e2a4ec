"""``mcw weights``: the weight engine from the command line.

    mcw weights --capacity nr=342 --capacity wifi=1190 --capacity lifi=12
    mcw weights --capacity nr=342 --lower nr=300 --capacity wifi=1190 --down lifi --json
    mcw weights --capacity nr=342 --capacity wifi=1190 --policy a1-payload.json
    mcw weights --capacity nr=342 --capacity wifi=1190 --policy a1-payload.json --direction dl

Capacities are those of one direction; ``--direction`` applies that direction's overrides of
the policy (its ``directions`` object), as the control loop does for each direction.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from xapp.core.policy import KNOWN_WATS, Policy, PolicyError, SteeringMode
from xapp.core.weights import WatState, WeightError, decide


def _pairs(values: Sequence[str] | None, option: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in values or ():
        wat, sep, number = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{option} expects WAT=VALUE, got {item!r}")
        try:
            out[wat.strip()] = float(number)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{option} {item!r}: not a number") from exc
    return out


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Compute MPTCP weighted round-robin weights that maximise the fluid-model aggregate "
        "T(w) = min_i C_i * sum(w) / w_i under a steering policy. Capacities are in Mbps; "
        f"WATs are {', '.join(KNOWN_WATS)}.")
    parser.add_argument("--capacity", action="append", metavar="WAT=MBPS", required=True,
                        help="capacity estimate of a WAT (repeat per WAT)")
    parser.add_argument("--lower", action="append", metavar="WAT=MBPS",
                        help="lower bound of a WAT's capacity; the engine uses it when given")
    parser.add_argument("--rtt", action="append", metavar="WAT=MS", help="RTT of a WAT in ms")
    parser.add_argument("--loss", action="append", metavar="WAT=PCT",
                        help="share of a WAT's segments retransmitted, in percent (what the "
                             "agents report as retrans_pct)")
    parser.add_argument("--down", action="append", default=[], metavar="WAT",
                        help="mark a WAT as down")
    parser.add_argument("--policy", type=Path, metavar="FILE",
                        help="a JSON policy (the A1 payload, without scope); options below "
                             "override its fields")
    parser.add_argument("--mode", choices=[m.value for m in SteeringMode])
    parser.add_argument("--max-weight", type=int, help="largest weight (default 100)")
    parser.add_argument("--min-share", action="append", metavar="WAT=FRACTION")
    parser.add_argument("--max-share", action="append", metavar="WAT=FRACTION")
    parser.add_argument("--split", action="append", metavar="WAT=PERCENT",
                        help="fixed_split percentages")
    parser.add_argument("--priority", metavar="WAT,WAT,...",
                        help="active_standby and priority order")
    parser.add_argument("--exclude", action="append", default=[], metavar="WAT")
    parser.add_argument("--rtt-bound", type=float, metavar="MS", help="latency_bound RTT bound")
    parser.add_argument("--demand", type=float, metavar="MBPS",
                        help="latency_bound: rate the low-latency WATs must carry; priority: "
                             "rate the listed WATs carry in order")
    parser.add_argument("--rtt-max", type=float, metavar="MS",
                        help="RTT threshold for every WAT (any mode)")
    parser.add_argument("--loss-max", type=float, metavar="PCT",
                        help="retransmission threshold for every WAT, percent (any mode)")
    parser.add_argument("--floor", type=float, metavar="MBPS",
                        help="capacity floor: a WAT whose central forecast is below it gets 0")
    parser.add_argument("--direction", choices=["dl", "ul"],
                        help="decide for this direction: the policy's per-direction overrides "
                             "apply (default: the policy as it is, the same for both)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _policy(args: argparse.Namespace) -> Policy:
    doc: dict[str, object] = json.loads(args.policy.read_text()) if args.policy else {}
    doc.pop("scope", None)
    wats: dict[str, dict[str, float]] = {
        w: dict(v) for w, v in dict(doc.get("wats", {}) or {}).items()}  # type: ignore[call-overload]
    for option, key in (("min_share", "min_share"), ("max_share", "max_share"),
                        ("split", "split_pct")):
        for wat, value in _pairs(getattr(args, option), f"--{option.replace('_', '-')}").items():
            wats.setdefault(wat, {})[key] = value
    doc["wats"] = wats
    overrides = {
        "mode": args.mode, "max_weight": args.max_weight, "rtt_bound_ms": args.rtt_bound,
        "demand_mbps": args.demand, "capacity_floor_mbps": args.floor,
        "priority": args.priority.split(",") if args.priority else None,
        "excluded_wats": args.exclude or None, "rtt_max_ms": args.rtt_max,
        "loss_max_pct": args.loss_max,
    }
    doc.update({k: v for k, v in overrides.items() if v is not None})
    policy = Policy.from_dict(doc)
    return policy if args.direction is None else policy.for_direction(args.direction)


def run(args: argparse.Namespace) -> int:
    try:
        capacity = _pairs(args.capacity, "--capacity")
        lower = _pairs(args.lower, "--lower")
        rtt = _pairs(args.rtt, "--rtt")
        loss = _pairs(args.loss, "--loss")
        for name, table in (("--lower", lower), ("--rtt", rtt), ("--loss", loss),
                            ("--down", args.down)):
            stray = set(table) - set(capacity)
            if stray:
                raise WeightError(f"{name} names {sorted(stray)} without a --capacity")
        states = {w: WatState(capacity_mbps=c, lower_mbps=lower.get(w), up=w not in args.down,
                              rtt_ms=rtt.get(w), loss_pct=loss.get(w))
                  for w, c in capacity.items()}
        decision = decide(states, _policy(args))
    except (argparse.ArgumentTypeError, PolicyError, WeightError, OSError,
            json.JSONDecodeError) as exc:
        print(f"mcw weights: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**decision.to_dict(), "direction": args.direction,
                          "capacity_sum_mbps": round(sum(
                              s.conservative_mbps for w, s in states.items()
                              if w in decision.usable), 3)}))
        return 0
    print(f"{'WAT':<6}{'capacity':>10}{'weight':>8}{'share':>9}")
    for wat, weight in decision.weights.items():
        s = states[wat]
        cap = f"{s.conservative_mbps:g}" + ("" if s.up else " (down)")
        print(f"{wat:<6}{cap:>10}{weight:>8}{decision.shares[wat]:>9.2%}")
    usable_sum = sum(states[w].conservative_mbps for w in decision.usable)
    ratio = decision.aggregate_mbps / usable_sum if usable_sum else 0.0
    print(f"T(w) = {decision.aggregate_mbps:.1f} Mbps ({ratio:.1%} of the usable "
          f"{usable_sum:g} Mbps); reason: {decision.reason}")
    return 0
