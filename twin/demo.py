"""``mcw demo``: the closed loop on embedded defaults, with a dry-run kernel backend.

The wifi-walk scenario (paper 000, section 6.5) drives one CPE; every control period (1 s) the
twin's agents report the subflow KPIs and radio KPIs of each direction, and the shipped control
loop (:class:`xapp.core.loop.ControlLoop`, through :class:`twin.loop_driver.LoopDriver`)
forecasts each WAT's capacity per direction with the shipped model (``models/default``, loaded
only when its Ed25519 signature verifies against ``keys/model-signing.pub``, wrapped in the
exploring estimator exactly as ``mcw run`` wraps it), decides WRR weights (hysteresis 1 %) and
publishes a validated weights message with both sets.  The same loop with the EWMA estimator and
the lagged oracle (the best weights one control period late) run on the same trace as
references.  The table, the plot and the
comparison are the downlink's (the paper's direction: the proxy's agent applies ``dl``); the
CPE's agent applies the uplink set, and each new one is written in the 5G-CLARITY sysctl format
by :class:`twin.sysctl_backend.DryRunBackend` under ``OUT/sysroot`` (source addresses of the
example CPE: :data:`twin.sysctl_backend.DEMO_SOURCE_IPS`, destination 0.0.0.0 = any).  Prints
a live table and writes ``OUT/demo.png`` and ``OUT/summary.json``; the paper's probe method and
the oracle run on the same downlink trace for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from twin.fluid import Observation, simulate_duplex
from twin.loop_driver import LoopDriver
from twin.policies import (
    TwinOptions,
    TwinPolicyError,
    loop_policy,
    make_estimator,
    run_policy,
    summary,
)
from twin.scenarios import Scenario, build
from twin.sysctl_backend import DEMO_SOURCE_IPS, WEIGHTS_PATH, DryRunBackend
from xapp.model import default_model_path


class _DemoLoop:
    """Wraps the loop driver: the CPE's agent applies each uplink change through the backend;
    the table follows the downlink."""

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
        self.dl: list[int] = []
        self.rows: list[dict[str, Any]] = []
        self.window: list[float] = []

    def start(self, scenario: Scenario) -> dict[str, np.ndarray]:
        w = self.inner.start(scenario)
        self._apply(w)
        return w

    def _apply(self, w: Mapping[str, np.ndarray]) -> None:
        self.dl = [int(x) for x in w["dl"][0]]
        weights = [int(x) for x in w["ul"][0]]
        if weights != self.last:
            self.backend.apply(dict(zip(self.scenario.wats, weights, strict=True)))
            self.last = weights

    def update(self, obs: Mapping[str, Observation]) -> dict[str, np.ndarray]:
        w = self.inner.update(obs)
        self._apply(w)
        dl = obs["dl"]
        self.window.append(float(dl.delivered_mbps[:, 0, :].sum(axis=1).mean()))
        if dl.t1 % self.every == 0 or dl.t1 == self.scenario.steps:
            t0 = dl.t1 - len(self.window) * self.period_steps
            cap = self.scenario.capacity("dl")[t0:dl.t1, 0, :].mean(axis=0)
            row = {"time_s": round(dl.t1 * self.scenario.dt_s, 1),
                   "capacity_mbps": [round(float(c), 1) for c in cap],
                   "weights": list(self.dl),
                   "ul_weights": list(self.last or []),
                   "aggregate_mbps": round(float(np.mean(self.window)), 1),
                   "oracle_mbps": round(float(self.oracle[t0:dl.t1, 0].mean()), 1)}
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
    return f"{'t(s)':>6s} | dl capacity Mbps {caps} | dl weights {ws} | aggregate / oracle"


def _row_text(r: dict[str, Any]) -> str:
    caps = " ".join(f"{c:6.0f}" for c in r["capacity_mbps"])
    ws = " ".join(f"{w:4d}" for w in r["weights"])
    ratio = r["aggregate_mbps"] / r["oracle_mbps"] if r["oracle_mbps"] > 0 else float("nan")
    return (f"{r['time_s']:6.1f} |                  {caps} |            {ws} | "
            f"{r['aggregate_mbps']:6.0f} / {r['oracle_mbps']:6.0f} ({ratio:4.0%})")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Closed-loop demo on embedded defaults: the wifi-walk scenario, the shipped capacity "
        "model (models/default, signature checked), the weight engine for both directions and "
        "a dry-run kernel backend writing the CPE's (uplink) 5G-CLARITY WRR sysctls into "
        "OUT/sysroot; the table and plot are the downlink's.  The EWMA estimator and the "
        "lagged oracle run beside it as references.  Writes OUT/demo.png and OUT/summary.json.")
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
    try:
        # The model the xApp ships, checked as `mcw run` checks it: a missing, unsigned or
        # tampered artifact stops the demo instead of quietly falling back to the EWMA.
        estimator = make_estimator("model")
    except TwinPolicyError as exc:
        print(f"mcw demo: {exc}", file=sys.stderr)
        return 1
    oracle = run_policy(scenario, "oracle", opts)
    lagged = run_policy(scenario, "lagged-oracle", opts)
    lagged.oracle_mbps = oracle.aggregate_mbps
    probe = run_policy(scenario, "probe", opts)
    probe.oracle_mbps = oracle.aggregate_mbps
    period_steps = round(opts.period_s / scenario.dt_s)
    ewma = simulate_duplex(scenario, LoopDriver(make_estimator("ewma"), loop_policy(opts),
                                                period_steps, radio_kpis=False),
                           "xapp-ewma", progress=False)["dl"]
    ewma.oracle_mbps = oracle.aggregate_mbps
    ewma.extra["estimator"] = "ewma"
    inner = LoopDriver(estimator, loop_policy(opts), period_steps, radio_kpis=True)
    backend = DryRunBackend(out / "sysroot")
    stream = None if args.quiet else sys.stdout
    version = str(getattr(estimator, "version", ""))
    if stream is not None:
        print(f"wifi-walk: Wi-Fi AP carried 25 m away and back in {scenario.duration_s:.0f} s; "
              f"model {version} (signature verified); sysctls under {backend.root}",
              file=stream)
        print(_header(scenario.wats), file=stream)
    loop = _DemoLoop(inner, backend, scenario, oracle.aggregate_mbps, args.every, stream)
    results = simulate_duplex(scenario, loop, "xapp", progress=not args.quiet)
    res = results["dl"]
    res.oracle_mbps = oracle.aggregate_mbps
    res.extra["estimator"] = "model"
    ul = results["ul"]
    ul.oracle_mbps = run_policy(scenario.toward("ul"), "oracle", opts).aggregate_mbps

    from twin.plots import plot_run

    png = plot_run(res, scenario.capacity_mbps, out / "demo.png",
                   title=f"wifi-walk closed loop, downlink: shipped model {version} + weight "
                   "engine (xapp)")
    doc: dict[str, Any] = {
        "model": {"version": version, "path": str(default_model_path()),
                  "signature": "verified"},
        "xapp": summary(res),
        "xapp_ul": summary(ul),
        "ewma": summary(ewma),
        "lagged_oracle": summary(lagged),
        "probe": summary(probe),
        "sysctl": {"root": str(backend.root), "writes": backend.writes, "direction": "ul",
                   "source_ips": DEMO_SOURCE_IPS,
                   "last_weights_text": (backend.root / WEIGHTS_PATH).read_text().strip()},
        "table": loop.rows,
        "plot": str(png),
    }
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    x, u, p = doc["xapp"], doc["xapp_ul"], doc["probe"]
    e, lo = doc["ewma"], doc["lagged_oracle"]
    print(f"\nxapp (model)   {x['aggregate_mbps']:7.1f} Mbps  ({x['ratio_to_oracle']:.1%} of "
          f"oracle {x['oracle_mbps']:.1f}) downlink")
    print(f"xapp (model)   {u['aggregate_mbps']:7.1f} Mbps  ({u['ratio_to_oracle']:.1%} of "
          f"oracle {u['oracle_mbps']:.1f}) uplink, {backend.writes} sysctl writes on the CPE")
    print(f"xapp (EWMA)    {e['aggregate_mbps']:7.1f} Mbps  ({e['ratio_to_oracle']:.1%} of "
          f"oracle), reference: the loop without the model")
    print(f"lagged oracle  {lo['aggregate_mbps']:7.1f} Mbps  ({lo['ratio_to_oracle']:.1%} of "
          f"oracle), reference: the best weights one period late")
    print(f"probe          {p['aggregate_mbps']:7.1f} Mbps  ({p['ratio_to_oracle']:.1%} of "
          f"oracle), the paper's method")
    print(f"wrote {png} and {out / 'summary.json'}")
    return 0
