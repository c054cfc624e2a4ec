"""Memory over time: ``mcw run``'s RSS through a long run with faults (issue 33 item 10).

Starts ``make e2e``'s stack (:func:`tests.e2e.system.start`: Redis, InfluxDB 1.8, Mosquitto with
mTLS and the shipped ACL, ``mcw run`` through ``tests/e2e/xapp_host.py``, one dry-run Go agent
per agent CPE, the twin's KPIs for every CPE) without the real MPTCP connection and without
Prometheus (neither is what this measures), waits until every agent applied weights, then for
``--minutes`` injects faults of the e2e story (:data:`tests.e2e.story.STORY`, each detected and
recovered as ``make e2e`` checks it) at a seeded random schedule and samples the VmRSS of the
xApp's process and of each of its children every ``--sample-s`` seconds.

Two faults of the story are left out: ``mcw run`` SIGKILLed (a restart resets the RSS this
measures; the e2e run covers it) and the WAT down (it needs the real connection).

It prints the start, peak and end RSS, and over the last half of the run (the last 30 min of
the default hour) the growth (a least-squares line's rise over that half, in percent of its
value at the half's start; the raw last-minus-first beside it) and the slope in MiB/min; the
faults injected and recovered.  ``OUT/soak.csv`` (every sample), ``OUT/soak.png`` (RSS over
time, faults shaded, the fit) and ``OUT/soak.json`` go to ``--out`` (default ``out/soak``,
untracked).  ``--trace`` runs the xApp under tracemalloc from the warm-up's end
(``bench/soak_trace.py``) and writes what is still alive of what was allocated since, at the
half and at the end, and the live objects by type, to ``OUT/trace.txt``: a diagnosis, its RSS
is not the product's.

Usage::

    python bench/soak.py                        # 60 min, 200 CPEs, 10 agents, 72 faults
    python bench/soak.py --minutes 12 --trace   # where the memory goes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tqdm import tqdm

from tests.e2e.report import Check, FaultResult
from tests.e2e.story import STORY, Fault, run_fault
from tests.e2e.system import Run, missing_tools, proc_usage, start, wait_all_applied
from tests.integration.stack import REPO
from tests.support.polling import wait_until

#: The story's faults a soak injects, by short name (``--pool``).
POOL: dict[str, str] = {
    "a1-split": "A1 fixed_split 50/50 and back",
    "broker-restart": "broker restarted",
    "broker-hang": "broker hung (SIGSTOP) 15 s",
    "redis-restart": "Redis restarted",
    "influx-away": "InfluxDB away 30 s",
    "agent-restart": "agent restarted with its state file",
    "malformed": "malformed input on every interface",
}
#: The issue's 10-minute soak injected 12 faults: the default rate.
FAULTS_PER_10_MIN = 12
#: No fault starts in the last minute, so the last one has recovered before the end (a fault
#: still running then delays the end until it has).
QUIET_TAIL_S = 60.0


@dataclass(frozen=True)
class Planned:
    """One fault of the schedule: when (s since the measurement began) and which."""

    at_s: float
    key: str


def schedule(minutes: float, n: int, keys: list[str], seed: int, warmup_s: float
             ) -> list[Planned]:
    """``n`` faults at uniform random times in [warm-up, end - quiet tail], each one of
    ``keys``; the same seed gives the same schedule."""
    rng = random.Random(seed)
    last = max(warmup_s, minutes * 60 - QUIET_TAIL_S)
    times = sorted(rng.uniform(warmup_s, last) for _ in range(n))
    return [Planned(round(t, 1), rng.choice(keys)) for t in times]


@dataclass(frozen=True)
class Sample:
    """RSS of the xApp's process and of each of its children at ``t_s``."""

    t_s: float
    pid: int
    rss_mib: float
    cpu_s: float
    #: ``"name[pid]"`` -> RSS MiB of every descendant process.
    children: dict[str, float]
    load1: float

    @property
    def total_mib(self) -> float:
        return self.rss_mib + sum(self.children.values())


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from each thread's ``children`` list)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = Path(f"/proc/{p}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            out.extend(int(k) for k in kids)
            todo.extend(int(k) for k in kids)
    return out


def take_sample(pid: int, t_s: float) -> Sample | None:
    try:
        cpu, rss = proc_usage(pid)
    except (OSError, StopIteration):
        return None  # the process is gone (between two faults' restart) or a zombie
    children: dict[str, float] = {}
    for child in descendants(pid):
        try:
            name = Path(f"/proc/{child}/comm").read_text().strip()
            children[f"{name}[{child}]"] = round(proc_usage(child)[1], 2)
        except (OSError, StopIteration):
            continue
    return Sample(round(t_s, 1), pid, round(rss, 2), round(cpu, 2), children,
                  round(os.getloadavg()[0], 2))


@dataclass(frozen=True)
class Fit:
    """A least-squares line through (minutes, MiB)."""

    slope_mib_per_min: float
    intercept_mib: float

    def at(self, minute: float) -> float:
        return self.intercept_mib + self.slope_mib_per_min * minute


def fit(points: list[tuple[float, float]]) -> Fit:
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in points) / sxx
    return Fit(slope, my - slope * mx)


def longest_stretch(samples: list[Sample]) -> list[Sample]:
    """The longest run of consecutive samples of one process (a restart starts a new one)."""
    best: list[Sample] = []
    cur: list[Sample] = []
    for s in samples:
        if cur and s.pid != cur[-1].pid:
            cur = []
        cur.append(s)
        if len(cur) > len(best):
            best = list(cur)
    return best


def memory_figures(samples: list[Sample], which: str = "xapp") -> dict[str, Any]:
    """Start, peak and end RSS, and the last half's growth and slope, of the longest
    un-restarted stretch; ``which`` is ``xapp`` (the process) or ``total`` (with children)."""
    stretch = longest_stretch(samples)
    if len(stretch) < 4:
        raise ValueError(f"{len(stretch)} samples: too few to fit")

    def rss(s: Sample) -> float:
        return s.rss_mib if which == "xapp" else s.total_mib

    t0, t1 = stretch[0].t_s, stretch[-1].t_s
    half = [s for s in stretch if s.t_s >= (t0 + t1) / 2]
    line = fit([(s.t_s / 60, rss(s)) for s in half])
    m0, m1 = half[0].t_s / 60, half[-1].t_s / 60
    return {
        "start_mib": rss(stretch[0]), "peak_mib": max(rss(s) for s in stretch),
        "end_mib": rss(stretch[-1]),
        "last_half_from_min": round(m0, 2), "last_half_min": round(m1 - m0, 2),
        "last_half_growth_pct": round(100 * (line.at(m1) - line.at(m0)) / line.at(m0), 2),
        "last_half_raw_growth_pct": round(100 * (rss(half[-1]) - rss(half[0])) / rss(half[0]),
                                          2),
        "last_half_slope_mib_per_min": round(line.slope_mib_per_min, 3),
        "fit": [round(line.intercept_mib, 3), round(line.slope_mib_per_min, 5)],
        "samples": len(stretch), "restarts": len({s.pid for s in samples}) - 1,
    }


#: Attempts at a fault's restore: on 2 cores shared with other work, influxd restarting on an
#: hour of KPIs once took longer than the harness's 60 s to answer /ping.
RESTORE_ATTEMPTS = 3


def retried(fault: Fault) -> Fault:
    """``fault`` whose restore is tried up to :data:`RESTORE_ATTEMPTS` times."""
    def restore(run: Run) -> None:
        for attempt in range(1, RESTORE_ATTEMPTS + 1):
            try:
                fault.restore(run)
                return
            except RuntimeError as exc:
                run.mark(f"restore {fault.name}: attempt {attempt} failed: {exc}")
                if attempt == RESTORE_ATTEMPTS:
                    raise

    return replace(fault, restore=restore)


@dataclass
class Injected:
    """A fault the soak injected: when it was planned and what the story's checks said."""

    key: str
    planned_s: float
    at_s: float
    result: FaultResult

    @property
    def recovered(self) -> bool:
        return self.result.recover_s is not None


@dataclass
class Sampler:
    """Samples the xApp the harness runs (the process it holds now) every ``period_s``."""

    run: Run
    t0: float
    period_s: float
    samples: list[Sample] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def loop(self) -> None:
        while not self.stop.is_set():
            proc = self.run.stack.xapp.proc
            if proc is not None:
                s = take_sample(proc.pid, time.monotonic() - self.t0)
                if s is not None:
                    self.samples.append(s)
            self.stop.wait(self.period_s - (time.monotonic() - self.t0) % self.period_s)


def write_csv(path: Path, samples: list[Sample]) -> None:
    lines = ["t_s,pid,xapp_rss_mib,children_rss_mib,total_rss_mib,xapp_cpu_s,load1,children"]
    for s in samples:
        kids = ";".join(f"{k}={v}" for k, v in sorted(s.children.items()))
        lines.append(f"{s.t_s},{s.pid},{s.rss_mib},{round(s.total_mib - s.rss_mib, 2)},"
                     f"{round(s.total_mib, 2)},{s.cpu_s},{s.load1},{kids}")
    path.write_text("\n".join(lines) + "\n")


def plot(path: Path, samples: list[Sample], faults: list[Injected], figures: dict[str, Any],
         title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    mins = [s.t_s / 60 for s in samples]
    ax.plot(mins, [s.rss_mib for s in samples], lw=1.2, label="mcw run (xApp process)")
    if any(s.children for s in samples):
        ax.plot(mins, [s.total_mib for s in samples], lw=0.8, label="with its children")
    for f in faults:
        end = f.result.restored_s + (f.result.recover_s or 0.0)
        ax.axvspan(f.at_s / 60, (f.at_s + end - f.result.injected_s) / 60, color="tab:red",
                   alpha=0.12, lw=0)
    x = figures["xapp"]
    a, b = x["fit"]
    m0 = x["last_half_from_min"]
    m1 = m0 + x["last_half_min"]
    ax.plot([m0, m1], [a + b * m0, a + b * m1], "k--", lw=1,
            label=f"last half: {x['last_half_slope_mib_per_min']:+.3f} MiB/min, "
                  f"{x['last_half_growth_pct']:+.2f} %")
    ax.set_xlabel("minutes (faults shaded)")
    ax.set_ylabel("VmRSS, MiB")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def malloc_summary(path: Path, warmup_s: float) -> dict[str, dict[str, int]]:
    """glibc's heap at the first record after the warm-up and at the last: taken from the
    system (``arena``), in use (``uordblks``), free but kept (``fordblks``), and VmRSS, KiB.
    (The records' clock starts with the xApp, a little before the measurement's.)"""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    after = [r for r in rows if r["t_s"] >= warmup_s] or rows
    keys = ("vm_rss_kib", "arena", "uordblks", "fordblks", "hblkhd")
    return {label: {"t_s": r["t_s"], **{k: r[k] for k in keys}}
            for label, r in (("warm", after[0]), ("end", rows[-1]))}


def trace_report(dump: Path, labels: list[str]) -> str:
    """The allocation sites that grew most between the snapshots, and the live objects by
    type, from ``bench/soak_trace.py``'s dumps."""
    import tracemalloc

    snaps = [tracemalloc.Snapshot.load(str(dump / f"snap-{i}.pickle"))
             for i in range(len(labels))]
    types = [json.loads((dump / f"types-{i}.json").read_text()) for i in range(len(labels))]
    out = ["== glibc malloc (mallinfo2, KiB): arena = heap from the system, uordblks in use, "
           "fordblks free but kept; hblkhd mmapped =="]
    for i, label in enumerate(labels):
        out.append(f"{label:12s} {(dump / f'malloc-{i}.json').read_text()}")
    if (dump / "trim.json").exists():
        trim = json.loads((dump / "trim.json").read_text())
        out.append(f"malloc_trim(0) at the end: VmRSS {trim['before']['vm_rss_kib']} -> "
                   f"{trim['after']['vm_rss_kib']} KiB")
    # Each step, and the whole (what keeps growing shows in every one).
    pairs = [(i - 1, i) for i in range(1, len(snaps))]
    if len(snaps) > 2:
        pairs.append((0, len(snaps) - 1))
    for a, b in pairs:
        out.append(f"== tracemalloc: {labels[a]} -> {labels[b]}, by line ==")
        out.extend(str(st) for st in snaps[b].compare_to(snaps[a], "lineno")[:25])
        out.append(f"== tracemalloc: {labels[a]} -> {labels[b]}, top 8 by traceback ==")
        for st in snaps[b].compare_to(snaps[a], "traceback")[:8]:
            out.append(f"{st.size_diff / 1024:+.1f} KiB, {st.count_diff:+d} blocks")
            out.extend("    " + line for line in st.traceback.format())
        grown = sorted(((types[b].get(k, 0) - types[a].get(k, 0), k)
                        for k in set(types[b]) | set(types[a])), reverse=True)[:25]
        out.append(f"== live gc-tracked objects by type: {labels[a]} -> {labels[b]} ==")
        out.extend(f"{d:+8d}  {k} ({types[b].get(k, 0)})" for d, k in grown)
    return "\n".join(out) + "\n"


def summary(doc: dict[str, Any]) -> str:
    """The report's figures as the bench prints them."""
    f = doc["faults"]
    lines = [f"soak: {doc['minutes']:g} min, {doc['cpes']} CPEs, {doc['agents']} Go agents, "
             f"seed {doc['seed']}, mean load {doc['load1_mean']}"]
    for name, fig in doc["rss"].items():
        lines.append(f"  RSS {name:5s}: start {fig['start_mib']:.1f} MiB, peak "
                     f"{fig['peak_mib']:.1f}, end {fig['end_mib']:.1f}; last "
                     f"{fig['last_half_min']:.1f} min: growth "
                     f"{fig['last_half_growth_pct']:+.2f} % (raw "
                     f"{fig['last_half_raw_growth_pct']:+.2f} %), slope "
                     f"{fig['last_half_slope_mib_per_min']:+.3f} MiB/min")
    lines.append(f"  faults: {f['injected']} injected, {f['recovered']} recovered, "
                 f"{f['all_checks_passed']} with every check passed; {f['by_kind']}")
    lines.append(f"  children: {', '.join(doc['children']) or 'none'}; restarts: "
                 f"{doc['rss']['xapp']['restarts']}")
    lines.append(f"  {doc['csv']}, {doc['png']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/soak.py", description=__doc__.split("\n\n")[0],
        epilog="Fault names for --pool: " + ", ".join(POOL) + ".")
    parser.add_argument("--minutes", type=float, default=60.0,
                        help="measured minutes after every agent applied weights (default: 60)")
    parser.add_argument("--cpes", type=int, default=200,
                        help="CPEs in the KPI feed, each with weights (default: 200)")
    parser.add_argument("--agents", type=int, default=10,
                        help="dry-run Go agents, on the first CPEs (default: 10)")
    parser.add_argument("--faults", type=int, default=None,
                        help=f"faults in the run (default: {FAULTS_PER_10_MIN} per 10 min, "
                             "the issue's soak)")
    parser.add_argument("--pool", default=",".join(POOL),
                        help="comma-separated faults to draw from (default: all of them)")
    parser.add_argument("--seed", type=int, default=33, help="the schedule's seed (default: 33)")
    parser.add_argument("--warmup-s", type=float, default=60.0,
                        help="seconds before the first fault (default: 60)")
    parser.add_argument("--sample-s", type=float, default=10.0,
                        help="RSS sampling period (default: 10)")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "soak", metavar="DIR",
                        help="output directory (default: out/soak); emptied first")
    parser.add_argument("--trace", action="store_true",
                        help="run the xApp under tracemalloc and write OUT/trace.txt")
    parser.add_argument("--malloc", action="store_true",
                        help="record glibc's heap figures every 10 s (bench/soak_trace.py, "
                             "no tracemalloc) and summarise them")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.pool.split(",") if k.strip()]
    if unknown := [k for k in keys if k not in POOL]:
        parser.error(f"unknown faults {unknown}; choose from {', '.join(POOL)}")
    if args.minutes <= 0 or args.agents < 1 or args.cpes < args.agents or not keys:
        parser.error("--minutes > 0, --agents >= 1, --cpes >= --agents and a fault to draw")
    n_faults = (args.faults if args.faults is not None
                else round(FAULTS_PER_10_MIN * args.minutes / 10))
    if missing := [m for m in missing_tools() if not m.startswith("prometheus")]:
        print("soak: missing " + ", ".join(missing), file=sys.stderr)
        return 2
    out: Path = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    plan = schedule(args.minutes, n_faults, keys, args.seed, args.warmup_s)
    story: dict[str, Fault] = {f.name: f for f in STORY}
    host = ["-m", "tests.e2e.xapp_host"]
    dump = out / "trace"
    if args.trace or args.malloc:
        dump.mkdir()
        host = [str(REPO / "bench" / "soak_trace.py"), str(dump)]
    # SIGTERM ends the soak as Ctrl-C does: the finally below stops every server it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = start(out / "run", args.agents, args.cpes, real_link=False, scrape=False, host=host)
    injected: list[Injected] = []
    snaps: list[str] = []
    sampler: Sampler | None = None
    try:
        late = wait_all_applied(run)
        if late is not None:
            print(f"soak: never ready: {run.ready()}; agents without weights: {late[:10]}",
                  file=sys.stderr)
            return 1
        t0 = time.monotonic()
        offset = t0 - run.t0  # run.now() - offset: seconds since the measurement began
        sampler = Sampler(run, t0, args.sample_s)
        thread = threading.Thread(target=sampler.loop, name="soak-sampler", daemon=True)
        thread.start()

        def snapshot(label: str) -> None:
            if args.trace and run.stack.xapp.proc is not None:
                os.kill(run.stack.xapp.proc.pid, signal.SIGUSR1)
                snaps.append(label)
                # The dump is written by the xApp's main thread; wait for it.
                n = len(snaps) - 1
                deadline = time.monotonic() + 120
                while not (dump / f"types-{n}.json").exists() and time.monotonic() < deadline:
                    time.sleep(0.5)

        end_s = args.minutes * 60
        bar = tqdm(total=round(end_s), unit="s", desc="soak", file=sys.stderr,
                   bar_format="{desc}: {n:.0f}/{total:.0f} s {bar} {postfix}")

        def progress() -> None:
            bar.n = min(round(time.monotonic() - t0), bar.total)
            last = sampler.samples[-1] if sampler and sampler.samples else None
            bar.set_postfix_str(
                f"RSS {last.rss_mib if last else 0:.1f} MiB, faults {len(injected)}/"
                f"{len(plan)}, recovered {sum(f.recovered for f in injected)}, load "
                f"{os.getloadavg()[0]:.2f}")

        def sleep_until(t_s: float) -> None:
            while (left := t_s - (time.monotonic() - t0)) > 0:
                progress()
                time.sleep(min(left, 5.0))

        warm_snapped = False
        half_snapped = False
        for p in plan:
            if not warm_snapped and p.at_s >= args.warmup_s:
                sleep_until(args.warmup_s)
                snapshot("warm-up end")
                warm_snapped = True
            if not half_snapped and p.at_s >= end_s / 2:
                sleep_until(end_s / 2)
                snapshot("half")
                half_snapped = True
            sleep_until(p.at_s)
            try:
                res = run_fault(run, retried(story[POOL[p.key]]))
            except Exception as exc:  # a restore that never came back: the soak goes on
                res = FaultResult(POOL[p.key], injected_s=round(run.now(), 2), restored_s=0.0,
                                  checks=[Check("injected and restored", False, repr(exc))])
            injected.append(Injected(p.key, p.at_s, round(res.injected_s - offset, 1), res))
            tqdm.write(f"{injected[-1].at_s:7.1f}s {p.key}: "
                       f"{'recovered' if injected[-1].recovered else 'NOT RECOVERED'} "
                       f"detect {res.detect_s} recover {res.recover_s}"
                       + "".join(f"; FAILED {c.name}: {c.detail}" for c in res.checks
                                 if not (c.ok or c.expected_pending)), file=sys.stderr)
            progress()
        if not warm_snapped:
            sleep_until(args.warmup_s)
            snapshot("warm-up end")
        if not half_snapped:
            sleep_until(end_s / 2)
            snapshot("half")
        sleep_until(end_s)
        snapshot("end")
        if args.trace and run.stack.xapp.proc is not None:
            os.kill(run.stack.xapp.proc.pid, signal.SIGUSR2)
            wait_until(lambda: (dump / "trim.json").exists(), 60, 0.5)
        bar.close()
    finally:
        if sampler is not None:
            sampler.stop.set()
            # A sample being taken lands before the CSV and the figures read the list, so
            # both see the same samples.
            thread.join(timeout=30)
            # Written whatever happened: an hour's samples outlive a failed fault.
            write_csv(out / "soak.csv", sampler.samples)
        run.observer.stop()
        run.stack.stop()
    assert sampler is not None
    samples = sampler.samples
    figures = {"xapp": memory_figures(samples, "xapp"), "total": memory_figures(samples, "total")}
    children = sorted({k for s in samples for k in s.children})
    doc: dict[str, Any] = {
        "command": "python bench/soak.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "minutes": args.minutes, "cpes": args.cpes, "agents": args.agents, "seed": args.seed,
        "sample_s": args.sample_s, "process": "python -m tests.e2e.xapp_host (mcw run's "
                                              "runtime plus the e2e A1 listener)",
        "trace": args.trace, "children": children,
        "load1_mean": round(sum(s.load1 for s in samples) / max(len(samples), 1), 2),
        "xapp_cpu_s": samples[-1].cpu_s if samples else None,
        "rss": figures,
        "faults": {"planned": len(plan), "injected": len(injected),
                   "recovered": sum(f.recovered for f in injected),
                   "all_checks_passed": sum(f.result.ok for f in injected),
                   "by_kind": {k: sum(f.key == k for f in injected) for k in keys},
                   "list": [{"key": f.key, "planned_s": f.planned_s, "at_s": f.at_s,
                             **{k: v for k, v in asdict(f.result).items() if k != "checks"},
                             "failed_checks": [f"{c.name}: {c.detail}" for c in f.result.checks
                                               if not (c.ok or c.expected_pending)]}
                            for f in injected]},
        # The harness's marks (seconds since it started): injections, detections, retries.
        "timeline": run.timeline,
    }
    x = figures["xapp"]
    doc["png"] = str(plot(out / "soak.png", samples, injected, figures,
                          f"bench/soak.py: {args.minutes:g} min, {args.cpes} CPEs, "
                          f"{args.agents} agents, {len(injected)} faults (seed {args.seed})"))
    doc["csv"] = str(out / "soak.csv")
    if (dump / "malloc.jsonl").exists():
        doc["malloc_kib"] = malloc_summary(dump / "malloc.jsonl", args.warmup_s)
    if args.trace and snaps:
        (out / "trace.txt").write_text(trace_report(dump, snaps))
        doc["trace_report"] = str(out / "trace.txt")
    (out / "soak.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2) if args.json else summary(doc))
    ok = all(f.recovered for f in injected) and len(injected) == len(plan)
    return 0 if ok and math.isfinite(x["last_half_growth_pct"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
