"""The closed loop on the real stack, scenario by scenario, against leaving MPTCP alone.

For each scenario (a :class:`twin.path_traces.PathTrace`: per-period path rates, delays,
losses, buffers, outages and radio KPIs) and each policy, one real MPTCP connection between
network namespaces carries bulk traffic both ways and a small request/response flow while
``tc`` plays the trace (:mod:`tests.realstack.harness`).  Every policy runs on the same trace in
the same invocation, ``--runs`` times (the order rotates from run to run); the figures are
medians with the spread beside them.

Per scenario and direction it prints delivered goodput / the sum of what the paths could carry
(outages excluded) for each policy, its ratio to ``default`` (mainline's scheduler alone, no
agent, no xApp) and to ``oracle``, the twin's prediction for the same trace and the weights
and caps the policy applied (:func:`twin.path_traces.predict`: the fluid model and its transport
layer, :mod:`twin.transport`), the small flow's RTT p50, p95 and p99 and its share of answers
later than 20 ms, and the segments each direction's sender retransmitted; one PNG per scenario
goes to ``--out``.  ``--json`` adds ``rtt_p99_ms``, ``deadline_misses`` and ``retrans`` per
policy beside the keys docs/realstack.md lists.  Goodput is TCP payload and the rates are what
the shapers pass in frames, so even a perfect policy stays a few percent under 1.

Usage (as root, Linux with MPTCP; about 50 s per policy run)::

    python bench/bench_realstack.py                                 # every scenario, 3 runs
    python bench/bench_realstack.py --scenario lossy --runs 1 --json
    python bench/bench_realstack.py --scenario-file site.csv        # docs/realstack.md
    python bench/bench_realstack.py --replay out/realstack          # this twin, saved runs
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tqdm import tqdm

from tests.e2e.mptcp_bulk import CONGESTION_CONTROL
from tests.realstack.harness import DEADLINE_MS, POLICIES, Run, RunResult, Servers
from tests.realstack.replay import load_applied
from tests.support.netns_lock import netns_bench_lock
from twin.path_traces import SCENARIOS, PathTrace, TraceError, build, load_csv, predict
from twin.transport import Stack

DIRECTIONS = ("dl", "ul")


def bench_stack(policy: str) -> Stack:
    """What surrounds the bench's connection, for the twin: no propagation delay (the
    harness's kernel has no netem, so a path's round trip is its queues) and, for every policy
    but ``default``, agents that take a WAT out of the connection as soon as its carrier
    drops and put it back when the link returns (:attr:`twin.transport.Stack.rejoin_s`)."""
    return Stack(plays_delay=False, carrier_reaction=policy != "default")


def ratio(res: RunResult, trace: PathTrace, direction: str) -> float:
    """Delivered / what the paths could carry, over the seconds measured."""
    xs = res.delivered[direction]
    if not xs:
        return 0.0
    # What the paths could carry in each measured second: the trace's capacity integrated
    # over [offset + i, offset + i + 1) on a 10 ms grid.
    cap = trace.capacity(direction).sum(axis=1)
    grid = res.offset_s + np.arange(len(xs) * 100) / 100.0
    idx = np.minimum((grid / trace.period_s).astype(int), len(cap) - 1)
    per = cap[idx].reshape(len(xs), 100).mean(axis=1)
    return float(np.sum(xs) / np.sum(per)) if per.sum() > 0 else 0.0


def percentile(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def summarise(trace: PathTrace, results: dict[str, list[RunResult]]) -> dict[str, Any]:
    out: dict[str, Any] = {d: {} for d in DIRECTIONS}
    out["spread"] = {d: {} for d in DIRECTIONS}
    out["twin"] = {d: {} for d in DIRECTIONS}
    out["rtt_ms"] = {}
    out["rtt_p99_ms"] = {}
    out["deadline_misses"] = {}
    out["retrans"] = {}
    for policy, runs in results.items():
        out["retrans"][policy] = {d: int(statistics.median(r.retrans.get(d, 0) for r in runs))
                                  for d in DIRECTIONS}
        for d in DIRECTIONS:
            rs = [ratio(r, trace, d) for r in runs]
            out[d][policy] = round(statistics.median(rs), 4)
            out["spread"][d][policy] = [round(min(rs), 4), round(max(rs), 4)]
            other = DIRECTIONS[1 - DIRECTIONS.index(d)]
            tw = [predict(trace, d, r.weights.get(d), r.caps.get(d), bench_stack(policy),
                          r.weights.get(other)) for r in runs]
            out["twin"][d][policy] = round(statistics.median(tw), 4)
        qs = [[v for r in runs if (v := percentile(r.rtt_ms, q)) is not None]
              for q in (50, 95, 99)]
        out["rtt_ms"][policy] = [round(statistics.median(x), 1) if x else None for x in qs[:2]]
        out["rtt_p99_ms"][policy] = round(statistics.median(qs[2]), 1) if qs[2] else None
        missed = [sum(x > DEADLINE_MS for x in r.rtt_ms) / len(r.rtt_ms) for r in runs if r.rtt_ms]
        out["deadline_misses"][policy] = round(statistics.median(missed), 4) if missed else None
    for base in ("default", "oracle"):
        out[f"vs_{base}"] = {d: {p: (round(v / out[d][base], 3) if out[d].get(base) else None)
                                 for p, v in out[d].items()} for d in DIRECTIONS
                             } if base in results else {}
    out["notes"] = sorted({n for runs in results.values() for r in runs for n in r.notes})[:20]
    return out


def replay_twin(out: Path, trace: PathTrace, s: dict[str, Any]) -> None:
    """Recompute scenario ``s``'s twin column, as saved in ``out`` by an earlier invocation, with
    this commit's twin on the weights and caps its runs applied (read back from their files:
    :func:`tests.realstack.replay.load_applied`); None for a policy with a run that cannot
    be placed on the trace."""
    for policy in s["dl"]:
        got = [load_applied(r, trace, policy)
               for r in sorted((out / trace.name).glob(f"run*/{policy}"))]
        runs = [g for g in got if g is not None]
        for d in DIRECTIONS:
            other = DIRECTIONS[1 - DIRECTIONS.index(d)]
            tw = [predict(trace, d, w[d], c[d], bench_stack(policy), w[other]) for w, c in runs]
            s["twin"][d][policy] = (round(statistics.median(tw), 4)
                                    if tw and len(runs) == len(got) else None)


def table(name: str, trace: PathTrace, s: dict[str, Any]) -> str:
    lines = [f"== {name}: {trace.description} ({trace.duration_s:.0f} s, "
             f"WATs {', '.join(trace.wats)})",
             f"{'policy':<11}" + "".join(f"{d + ' of sum':>12}{'x default':>10}{'x oracle':>9}"
                                         f"{'twin':>7}" for d in DIRECTIONS)
             + f"{'RTT p50/p95/p99 ms':>20}{'>20ms':>7}{'retx dl/ul':>14}"]
    for p in s["dl"]:
        row = f"{p:<11}"
        for d in DIRECTIONS:
            lo, hi = s["spread"][d][p]
            vd = s["vs_default"].get(d, {}).get(p) if s["vs_default"] else None
            vo = s["vs_oracle"].get(d, {}).get(p) if s["vs_oracle"] else None
            row += (f"{s[d][p]:>6.3f} ({lo:.2f}-{hi:.2f})"[:12].rjust(12)
                    + (f"{vd:>10.2f}" if vd is not None else f"{'':>10}")
                    + (f"{vo:>9.2f}" if vo is not None else f"{'':>9}")
                    + (f"{tw:>7.3f}" if (tw := s["twin"][d][p]) is not None else f"{'-':>7}"))
        p50, p95 = s["rtt_ms"][p]
        # Reports saved before these keys (--replay) lack them.
        p99, miss = s.get("rtt_p99_ms", {}).get(p), s.get("deadline_misses", {}).get(p)
        rtt = "-" if p50 is None else (f"{p50:.0f}/{p95:.0f}/"
                                       + ("-" if p99 is None else f"{p99:.0f}"))
        row += f"{rtt:>20}"
        row += f"{(f'{100 * miss:.1f}%' if miss is not None else '-'):>7}"
        rx = s.get("retrans", {}).get(p, {"dl": "-", "ul": "-"})
        row += f"{rx['dl']:>7}/{rx['ul']:<6}"
        lines.append(row)
    for n in s.get("notes", []):
        lines.append(f"  note: {n}")
    return "\n".join(lines)


def plot(name: str, trace: PathTrace, results: dict[str, list[RunResult]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    t = np.arange(trace.periods) * trace.period_s
    cap = {d: trace.capacity(d) for d in DIRECTIONS}
    for j, w in enumerate(trace.wats):
        axes[0].step(t, cap["dl"][:, j], where="post", label=f"{w} dl")
        axes[0].step(t, cap["ul"][:, j], where="post", ls="--", label=f"{w} ul")
    axes[0].set_ylabel("path rate\n(Mbit/s)")
    axes[0].legend(ncol=6, fontsize=7, loc="upper right")
    for ax, d in ((axes[1], "dl"), (axes[2], "ul")):
        ax.step(t, cap[d].sum(axis=1), where="post", color="black", lw=1, label="sum of paths")
        for p, runs in results.items():
            xs = runs[0].delivered[d]
            ax.plot(np.arange(len(xs)) + 1, xs, lw=1, label=p)
        ax.set_ylabel(f"{d} delivered\n(Mbit/s)")
        ax.legend(ncol=4, fontsize=7, loc="lower left")
    first = trace.wats[0]
    for p, runs in results.items():
        dl = runs[0].weights.get("dl")
        if dl is not None:
            share = dl[:, 0] / np.maximum(1, dl.sum(axis=1))
            axes[3].step(t, share, where="post", label=p)
    axes[3].set_ylabel(f"dl weight share\nof {first}")
    axes[3].set_xlabel("s into the trace")
    axes[3].legend(ncol=4, fontsize=7, loc="lower left")
    fig.suptitle(f"real stack, {name}: {trace.description}", fontsize=10)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"realstack-{name}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_realstack.py", description=__doc__.split("\n\n")[0],
                                 epilog="Scenarios: " + ", ".join(SCENARIOS) + ". Policies: "
                                 + ", ".join(POLICIES) + ".")
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                    help="a built-in scenario (repeat for several; default: all)")
    ap.add_argument("--scenario-file", action="append", type=Path, default=[],
                    help="an operator's trace as CSV (docs/realstack.md); repeatable")
    ap.add_argument("--policy", action="append", choices=POLICIES,
                    help="a policy (repeat for several; default: all)")
    ap.add_argument("--runs", type=int, default=3, help="runs of every policy (default 3)")
    ap.add_argument("--duration", type=float, default=40.0,
                    help="seconds of each built-in trace (default 40)")
    ap.add_argument("--warmup", type=float, default=8.0,
                    help="seconds before the trace starts, at its first period (default 8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cc", default=CONGESTION_CONTROL,
                    help="the congestion control of the bulk, small and probe flows (default "
                    f"{CONGESTION_CONTROL}, mainline's default, whatever this host's is)")
    ap.add_argument("--out", type=Path, default=Path("out/realstack"),
                    help="PNGs and every run's raw files (default out/realstack)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--replay", type=Path, metavar="DIR",
                    help="run nothing: the report an earlier invocation saved in DIR (its --out), "
                    "with the twin's column recomputed by this commit's twin from the runs' files "
                    "(built-in scenarios; --duration and --seed as that invocation's unless its "
                    "report says them)")
    a = ap.parse_args(argv)
    # SIGTERM ends the bench as Ctrl-C does: the context managers tear down the namespaces,
    # agents and servers of the run under way (they outlived the bench before).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.runs < 1 or a.duration < 3 or a.warmup < 2:
        ap.error("--runs >= 1, --duration >= 3 and --warmup >= 2")
    if a.replay is not None:
        return replay(a.replay, a.duration, a.seed, a.json)
    try:
        traces = [build(n, a.duration, a.seed) for n in (a.scenario or
                                                           ([] if a.scenario_file else SCENARIOS))]
        traces += [load_csv(f) for f in a.scenario_file]
    except TraceError as exc:
        ap.error(str(exc))
    policies = tuple(a.policy or POLICIES)
    a.out = a.out.resolve()
    with netns_bench_lock():
        return measure(a, traces, policies)


def measure(a: argparse.Namespace, traces: list[PathTrace], policies: tuple[str, ...]) -> int:
    """Every policy on every trace, ``a.runs`` times; the report printed and saved."""
    servers = Servers.start(a.out / "servers")
    doc: dict[str, Any] = {"scenarios": {}, "runs": a.runs, "cc": a.cc,
                           "duration_s": a.duration, "seed": a.seed}
    texts = []
    bar = tqdm(total=len(traces) * a.runs * len(policies), unit="run", disable=a.json,
               file=sys.stderr)
    t_start = time.monotonic()
    try:
        for trace in traces:
            results: dict[str, list[RunResult]] = {p: [] for p in policies}
            for i in range(a.runs):
                order = policies[i % len(policies):] + policies[:i % len(policies)]
                for p in order:
                    bar.set_description(f"{trace.name} {p} run {i + 1}")
                    root = a.out / trace.name / f"run{i + 1}" / p
                    results[p].append(Run(servers, trace, p, root, a.warmup, cc=a.cc).execute())
                    bar.update()
            s = summarise(trace, results)
            s["png"] = str(plot(trace.name, trace, results, a.out))
            doc["scenarios"][trace.name] = s
            texts.append(table(trace.name, trace, s))
            if not a.json:
                tqdm.write(texts[-1], file=sys.stderr)
    finally:
        bar.close()
        servers.stop()
    doc["wall_s"] = round(time.monotonic() - t_start, 1)
    (a.out / "realstack.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2) if a.json else "\n\n".join(texts))
    return 0


def replay(out: Path, duration_s: float, seed: int, as_json: bool) -> int:
    doc = json.loads((out / "realstack.json").read_text())
    duration_s, seed = doc.get("duration_s", duration_s), doc.get("seed", seed)
    texts = []
    for name, s in doc["scenarios"].items():
        if name not in SCENARIOS:
            print(f"{name}: not a built-in scenario, its twin column left as saved",
                  file=sys.stderr)
            continue
        trace = build(name, duration_s, seed)
        replay_twin(out, trace, s)
        texts.append(table(name, trace, s))
    print(json.dumps(doc, indent=2) if as_json else "\n\n".join(texts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
