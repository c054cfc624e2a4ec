"""Benchmark of the twin: one CPE for an hour, and 10,000 CPEs over the 250 s walk.

Targets (issue 2): one CPE, one simulated hour at 100 ms steps under 1 s; 10,000 CPEs over the
wifi-walk under 60 s.  The baseline, measured in the same run, is the naive way: a per-step
Python loop over a few CPEs (dict-based fluid formula each step, the full engine ``decide`` each
control period), extrapolated linearly to the same work and reported as a ratio.

    python bench/bench_twin.py [--cpes 10000] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twin.policies import run_policy
from twin.scenarios import Scenario, build
from xapp.weights import WatState, decide, fluid_aggregate


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def naive_loop(s: Scenario, cpes: int, period_steps: int = 10) -> float:
    """Per-step, per-CPE Python loop with per-period decide() on the true capacities."""
    t = time.perf_counter()
    total = 0.0
    for c in range(cpes):
        weights = dict.fromkeys(s.wats, 1)
        for step in range(s.steps):
            cap = {w: float(s.capacity_mbps[step, c, j]) for j, w in enumerate(s.wats)}
            used = {w: (v if cap[w] > 0 else 0) for w, v in weights.items()}
            total += fluid_aggregate(cap, used)
            if step % period_steps == period_steps - 1:
                with contextlib.suppress(ValueError):  # nothing usable: keep the weights
                    weights = decide({w: WatState(cap[w], up=cap[w] > 0) for w in s.wats}).weights
    assert total >= 0
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpes", type=int, default=10_000, help="CPEs of the walk run")
    parser.add_argument("--hours", type=float, default=1.0, help="simulated hours, one CPE")
    parser.add_argument("--json", action="store_true", help="print figures as JSON")
    args = parser.parse_args(argv)
    fig: dict[str, Any] = {}

    build_s, hour = _timed(build, "wifi-walk", 1, 0, args.hours * 3600.0)
    fig["one_cpe"] = {"simulated_s": hour.duration_s, "steps": hour.steps,
                      "build_s": round(build_s, 3)}
    for policy in ("oracle", "probe", "xapp"):
        sec, _ = _timed(run_policy, hour, policy)
        fig["one_cpe"][f"{policy}_s"] = round(sec, 3)
    short = build("wifi-walk", 1, 0, 60.0)
    naive = naive_loop(short, 1) * hour.steps / short.steps
    fig["one_cpe"]["naive_loop_s"] = round(naive, 3)
    fig["one_cpe"]["speedup_oracle_vs_naive"] = round(naive / fig["one_cpe"]["oracle_s"], 1)

    build_s, walk = _timed(build, "wifi-walk", args.cpes, 0)
    fig["walk"] = {"cpes": args.cpes, "steps": walk.steps, "build_s": round(build_s, 2)}
    for policy in ("probe", "xapp"):
        sec, _ = _timed(run_policy, walk, policy)
        fig["walk"][f"{policy}_s"] = round(sec, 2)
    few = 3
    naive = naive_loop(build("wifi-walk", few, 0), few) * args.cpes / few
    fig["walk"]["naive_loop_s"] = round(naive, 1)
    fig["walk"]["xapp_total_s"] = round(fig["walk"]["build_s"] + fig["walk"]["xapp_s"], 2)
    fig["walk"]["speedup_xapp_vs_naive"] = round(naive / fig["walk"]["xapp_s"], 1)

    if args.json:
        print(json.dumps(fig, indent=2))
        return 0
    o, w = fig["one_cpe"], fig["walk"]
    print(f"one CPE, {o['simulated_s'] / 3600:.1f} h at 100 ms ({o['steps']} steps): "
          f"build {o['build_s']:.3f} s, oracle {o['oracle_s']:.3f} s, probe {o['probe_s']:.3f} s,"
          f" xapp {o['xapp_s']:.3f} s; naive loop {o['naive_loop_s']:.2f} s "
          f"({o['speedup_oracle_vs_naive']}x slower than oracle)")
    print(f"{w['cpes']} CPEs, 250 s walk: build {w['build_s']:.1f} s, probe {w['probe_s']:.1f} s,"
          f" xapp {w['xapp_s']:.1f} s (build + xapp {w['xapp_total_s']:.1f} s); naive loop "
          f"{w['naive_loop_s']:.0f} s ({w['speedup_xapp_vs_naive']}x slower than xapp)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
