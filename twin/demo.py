"""``mcw demo``: the closed loop on embedded defaults, with a dry-run kernel backend.

The wifi-walk scenario (paper 000, section 6.5) drives one CPE; every control period (1 s) the
twin's agent reports the subflow KPIs an agent sends, and the shipped control loop
(:class:`xapp.core.loop.ControlLoop`, through :class:`twin.loop_driver.LoopDriver`) forecasts
each WAT's capacity with the EWMA estimator, decides WRR weights (hysteresis 1 %) and publishes a
validated weights message; each new set is written in the 5G-CLARITY sysctl format by
:class:`twin.sysctl_backend.DryRunBackend` under ``OUT/sysroot``
(source addresses of the example CPE:
:data:`twin.sysctl_backend.DEMO_SOURCE_IPS`, destination 0.0.0.0 = any).  Prints a live table
and writes ``OUT/demo.png`` and ``OUT/summary.json``; the paper's probe method and the oracle
run on the same trace for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from twin.fluid import Observation, simulate_closed
from twin.loop_driver import LoopDriver
from twin.policies import TwinOptions, loop_policy, make_estimator, run_policy, summary
from twin.scenarios import Scenario, build
from twin.sysctl_backend import DEMO_SOURCE_IPS, WEIGHTS_PATH, DryRunBackend


class _DemoLoop:
    """Wraps the loop driver: applies each weight change through the backend."""

    def __init__(self, inner: LoopDriver, backend: DryRunBackend, scenario: Scenario,
                 oracle: np.ndarray, table_every_s: float, out: Any) -> None:
        self.inner = inner
        self.backend = backend
        self.period_steps = inner.period_steps
        self.scenario = scenario
        self.oracle = oracle
        self.every = max(1, round(table_every_s / scenario.dt_s))
        self.out = out
        self.last: list[int] | None = None
        self.rows: list[dict[str, Any]] = []
        self.window: list[float] = []

    def start(self, scenario: Scenario) -> np.ndarray:
        w = self.inner.start(scenario)
        self._apply(w)
        return w

    def _apply(self, w: np.ndarray) -> None:
        weights = [int(x) for x in w[0]]
        if weights != self.last:
            self.backend.apply(dict(zip(self.scenario.wats, weights, strict=True)))
            self.last = weights

    def update(self, obs: Observation) -> np.ndarray:
        w = self.inner.update(obs)
        self._apply(w)
        self.window.append(float(obs.delivered_mbps[:, 0, :].sum(axis=1).mean()))
        if obs.t1 % self.every == 0 or obs.t1 == self.scenario.steps:
            t0 = obs.t1 - len(self.window) * self.period_steps
            cap = self.scenario.capacity_mbps[t0:obs.t1, 0, :].mean(axis=0)
            row = {"time_s": round(obs.t1 * self.scenario.dt_s, 1),
                   "capacity_mbps": [round(float(c), 1) for c in cap],
                   "weights": list(self.last or []),
                   "aggregate_mbps": round(float(np.mean(self.window)), 1),
                   "oracle_mbps": round(float(self.oracle[t0:obs.t1, 0].mean()), 1)}
            self.rows.append(row)
            self.window = []
            if self.out is not None:
                # tqdm.write clears the progress bar, prints the row and redraws the bar, so
                # the live table and the bar do not interleave on the terminal.
                from tqdm import tqdm

                tqdm.write(_row_text(row), file=self.out)
        return w


def _header(wats: tuple[str, ...]) -> str:
    caps = " ".join(f"{w:>6s}" for w in wats)
    ws = " ".join(f"{w:>4s}" for w in wats)
    return f"{'t(s)':>6s} | capacity Mbps {caps} | weights {ws} | aggregate / oracle"


def _row_text(r: dict[str, Any]) -> str:
    caps = " ".join(f"{c:6.0f}" for c in r["capacity_mbps"])
    ws = " ".join(f"{w:4d}" for w in r["weights"])
    ratio = r["aggregate_mbps"] / r["oracle_mbps"] if r["oracle_mbps"] > 0 else float("nan")
    return (f"{r['time_s']:6.1f} |               {caps} |         {ws} | "
            f"{r['aggregate_mbps']:6.0f} / {r['oracle_mbps']:6.0f} ({ratio:4.0%})")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Closed-loop demo on embedded defaults: the wifi-walk scenario, the EWMA capacity "
        "estimator, the weight engine and a dry-run kernel backend writing the 5G-CLARITY WRR "
        "sysctls into OUT/sysroot.  Writes OUT/demo.png and OUT/summary.json.")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--every", type=float, default=10.0, metavar="S",
                        help="print a table row every S simulated seconds (default: 10)")
    parser.add_argument("--quiet", action="store_true", help="no live table")


def run(args: argparse.Namespace) -> int:
    if args.every <= 0:
        print("mcw demo: --every must be > 0", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out is not None else Path(tempfile.mkdtemp(prefix="mcw-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    scenario = build("wifi-walk", seed=args.seed)
    opts = TwinOptions()
    oracle = run_policy(scenario, "oracle", opts)
    probe = run_policy(scenario, "probe", opts)
    probe.oracle_mbps = oracle.aggregate_mbps
    inner = LoopDriver(make_estimator("ewma"), loop_policy(opts),
                       round(opts.period_s / scenario.dt_s), radio_kpis=False)
    backend = DryRunBackend(out / "sysroot")
    stream = None if args.quiet else sys.stdout
    if stream is not None:
        print(f"wifi-walk: Wi-Fi AP carried 25 m away and back in {scenario.duration_s:.0f} s; "
              f"sysctls under {backend.root}", file=stream)
        print(_header(scenario.wats), file=stream)
    loop = _DemoLoop(inner, backend, scenario, oracle.aggregate_mbps, args.every, stream)
    res = simulate_closed(scenario, loop, "xapp", progress=not args.quiet)
    res.oracle_mbps = oracle.aggregate_mbps

    from twin.plots import plot_run

    png = plot_run(res, scenario.capacity_mbps, out / "demo.png",
                   title="wifi-walk closed loop: EWMA estimator + weight engine (xapp)")
    doc: dict[str, Any] = {
        "xapp": summary(res),
        "probe": summary(probe),
        "sysctl": {"root": str(backend.root), "writes": backend.writes,
                   "source_ips": DEMO_SOURCE_IPS,
                   "last_weights_text": (backend.root / WEIGHTS_PATH).read_text().strip()},
        "table": loop.rows,
        "plot": str(png),
    }
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    x, p = doc["xapp"], doc["probe"]
    print(f"\nxapp  {x['aggregate_mbps']:7.1f} Mbps  ({x['ratio_to_oracle']:.1%} of oracle "
          f"{x['oracle_mbps']:.1f}), {backend.writes} sysctl writes")
    print(f"probe {p['aggregate_mbps']:7.1f} Mbps  ({p['ratio_to_oracle']:.1%} of oracle), "
          f"the paper's method")
    print(f"wrote {png} and {out / 'summary.json'}")
    return 0
