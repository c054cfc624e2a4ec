"""The twin's rate-caps model against the netns measurement of the mptcp-shares backend.

Runs ``TestNetnsShares`` (``kernel-agent/integration``: real namespaces, tbf-shaped paths,
the real agent with the ``mptcp-shares`` backend, bulk MPTCP transfers), which writes what it
measured to ``$MCW_SHARES_REPORT`` (``mcw.netns-shares-report.v1``), then predicts every
scenario of the report with :mod:`twin.rate_caps` on the same paths, weights and caps, and
prints measured against predicted: aggregate and per-path rates with their ratio, byte shares
with their difference in points, the caps the agent applied against the caps the model sets,
and the default scheduler's baseline measured in the same run.  Target (issue 12): the
prediction within 15 % of the measurement.

The model is not fitted to these figures: its efficiency is 1 from first principles (see
:mod:`twin.rate_caps`), so a ratio below 1 is what the transport loses to what the fluid model
leaves out (slow start and joins inside the window, receive-window stalls, the slow path's
bufferbloat).

Usage (as root, Linux with MPTCP; one run takes about a minute)::

    python bench/bench_shares.py                 # one run of the netns test
    python bench/bench_shares.py --runs 3 --json
    python bench/bench_shares.py --report r.json # a report written earlier, no test run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.netns_lock import NETNS_LOCK
from twin.rate_caps import predict, predict_default

REPORT_SCHEMA = "mcw.netns-shares-report.v1"
#: The prediction's target: within 15 % of the measurement.
TARGET = 0.15
#: Bounds on what a report may hold (it comes from a file).
MAX_BYTES = 1 << 20
MAX_PATHS = 8
MAX_SCENARIOS = 64
KERNEL_AGENT = Path(__file__).resolve().parent.parent / "kernel-agent"


class ReportError(ValueError):
    """A report that is not a ``mcw.netns-shares-report.v1`` this bench can read."""


@dataclass(frozen=True)
class Comparison:
    """One measured scenario and the model's prediction for it."""

    topology: str
    scenario: str
    direction: str
    backend: str
    mode: str
    weights: Mapping[str, int]
    caps_sent: Mapping[str, float]
    measured_mbps: Mapping[str, float]
    predicted_mbps: Mapping[str, float]
    measured_shares: Mapping[str, float]
    predicted_shares: Mapping[str, float]
    applied_caps: Mapping[str, float]
    model_caps: Mapping[str, float | None]
    measured_total: float
    predicted_total: float
    settle_s: float | None
    #: The window the scenario's rates were measured over (None: not reported).
    window_s: float | None = None

    @property
    def ratio(self) -> float | None:
        """Measured over predicted aggregate."""
        return self.measured_total / self.predicted_total if self.predicted_total > 0 else None

    @property
    def within_target(self) -> bool | None:
        r = self.ratio
        return None if r is None else abs(r - 1.0) <= TARGET

    def path_ratio(self, wat: str) -> float | None:
        p = self.predicted_mbps.get(wat, 0.0)
        return self.measured_mbps.get(wat, 0.0) / p if p > 0 else None

    def to_dict(self) -> dict[str, Any]:
        wats = list(self.predicted_mbps)
        return {
            "topology": self.topology, "scenario": self.scenario, "direction": self.direction,
            "backend": self.backend, "mode": self.mode, "weights": dict(self.weights),
            "caps_mbps_sent": dict(self.caps_sent),
            "aggregate": {"measured_mbps": round(self.measured_total, 3),
                          "predicted_mbps": round(self.predicted_total, 3),
                          "ratio": None if self.ratio is None else round(self.ratio, 4),
                          "within_15pct": self.within_target},
            "paths": {w: {"measured_mbps": round(self.measured_mbps.get(w, 0.0), 3),
                          "predicted_mbps": round(self.predicted_mbps[w], 3),
                          "ratio": (None if (r := self.path_ratio(w)) is None
                                    else round(r, 4)),
                          "measured_share": round(self.measured_shares.get(w, 0.0), 4),
                          "predicted_share": round(self.predicted_shares[w], 4),
                          "applied_cap_mbps": self.applied_caps.get(w),
                          "model_cap_mbps": (None if (c := self.model_caps.get(w)) is None
                                             else round(c, 3))}
                      for w in wats},
            "settle_s": self.settle_s,
            "window_s": self.window_s,
        }


def _number(v: object, what: str, lo: float = 0.0, hi: float = 1e6) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= float(v) <= hi:
        raise ReportError(f"{what}: {v!r} is not a number in [{lo}, {hi}]")
    return float(v)


def _rates(doc: object, what: str, wats: Sequence[str]) -> dict[str, float]:
    if doc is None:
        return {}
    if not isinstance(doc, dict) or not set(doc) <= set(wats):
        raise ReportError(f"{what}: want an object keyed by the topology's WATs {list(wats)}")
    return {str(k): _number(v, f"{what}.{k}") for k, v in doc.items()}


def load_report(data: bytes) -> dict[str, Any]:
    """The parsed report; ReportError for anything this bench cannot read."""
    if len(data) > MAX_BYTES:
        raise ReportError(f"report of {len(data)} bytes, at most {MAX_BYTES}")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ReportError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != REPORT_SCHEMA:
        raise ReportError(f"not a {REPORT_SCHEMA} report")
    tops = doc.get("topologies")
    if not isinstance(tops, list) or not tops:
        raise ReportError("no topologies")
    return doc


def compare(report: Mapping[str, Any]) -> list[Comparison]:
    """Every scenario of a report against the model's prediction."""
    out: list[Comparison] = []
    for t, top in enumerate(report["topologies"]):
        if not isinstance(top, dict):
            raise ReportError(f"topologies[{t}] is not an object")
        paths = top.get("paths")
        if not isinstance(paths, list) or not 0 < len(paths) <= MAX_PATHS:
            raise ReportError(f"topologies[{t}].paths: want 1..{MAX_PATHS} paths")
        link: dict[str, float] = {}
        for p in paths:
            if not isinstance(p, dict) or not isinstance(p.get("wat"), str):
                raise ReportError(f"topologies[{t}].paths: a path without a WAT")
            link[p["wat"]] = _number(p.get("mbps"), f"{p['wat']}.mbps", 1e-3)
        wats = list(link)
        scenarios = top.get("scenarios")
        if not isinstance(scenarios, list) or len(scenarios) > MAX_SCENARIOS:
            raise ReportError(f"topologies[{t}].scenarios: want a list of at most "
                              f"{MAX_SCENARIOS}")
        for s in scenarios:
            if not isinstance(s, dict) or not isinstance(s.get("name"), str):
                raise ReportError(f"topologies[{t}]: a scenario without a name")
            what = f"{top.get('name', t)}/{s['name']}"
            backend = str(s.get("backend", ""))
            raw_w = s.get("weights") or {}
            if not isinstance(raw_w, dict) or not set(raw_w) <= set(wats):
                raise ReportError(f"{what}.weights: want an object keyed by {wats}")
            weights = {str(k): int(_number(v, f"{what}.weights.{k}", 0, 255))
                       for k, v in raw_w.items()}
            sent = _rates(s.get("caps_mbps_sent"), f"{what}.caps_mbps_sent", wats)
            if backend == "default" or not weights:
                # The default scheduler alone: nothing capped, every path used.
                pred = predict_default(link)
            else:
                try:
                    pred = predict(link, weights, sent or None)
                except ValueError as exc:
                    raise ReportError(f"{what}: {exc}") from None
            measured = _rates(s.get("path_mbps"), f"{what}.path_mbps", wats)
            settle = s.get("settle_s")
            window = s.get("window_s")
            out.append(Comparison(
                topology=str(top.get("name", t)), scenario=s["name"],
                direction=str(s.get("direction", "ul")), backend=backend,
                mode=str(s.get("mode", "")), weights=weights, caps_sent=sent,
                measured_mbps=measured, predicted_mbps=pred.mbps,
                measured_shares=_rates(s.get("byte_shares"), f"{what}.byte_shares", wats),
                predicted_shares={w: pred.share(w) for w in wats},
                applied_caps=_rates(s.get("applied_caps_mbps"), f"{what}.applied_caps_mbps",
                                    wats),
                model_caps=pred.caps_mbps,
                measured_total=_number(s.get("aggregate_mbps"), f"{what}.aggregate_mbps"),
                predicted_total=pred.total,
                settle_s=None if settle is None else _number(settle, f"{what}.settle_s"),
                window_s=None if window is None else _number(window, f"{what}.window_s")))
    return out


def run_netns_test(timeout_s: float) -> dict[str, Any]:
    """One run of ``TestNetnsShares``; its report."""
    with tempfile.TemporaryDirectory(prefix="mcw-shares-") as tmp:
        path = Path(tmp) / "report.json"
        env = {**os.environ, "MCW_SHARES_REPORT": str(path)}
        # Serialised with the other netns throughput runs on this machine (netns.md's lock).
        proc = subprocess.run(
            ["flock", NETNS_LOCK, "go", "test", "-count=1", "-run", "TestNetnsShares$",
             "./integration/"],
            cwd=KERNEL_AGENT, env=env, capture_output=True, text=True, timeout=timeout_s,
            check=False)
        if not path.exists():
            raise RuntimeError(f"the netns test wrote no report (exit {proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        if proc.returncode != 0:
            # Its assertions failed, but what it measured is still the measurement.
            print(f"note: the netns test failed (exit {proc.returncode}); comparing what it "
                  "measured", file=sys.stderr)
        return load_report(path.read_bytes())


def _fmt_rates(values: Mapping[str, float], wats: Sequence[str]) -> str:
    return " ".join(f"{w} {values.get(w, 0.0):6.2f}" for w in wats)


def render(runs: Sequence[list[Comparison]]) -> str:
    """The text table: per scenario, each run's measured and predicted figures."""
    lines = []
    keys = [(c.topology, c.scenario, c.direction) for c in runs[0]]
    for key in keys:
        rows = [c for run in runs for c in run if (c.topology, c.scenario, c.direction) == key]
        first = rows[0]
        wats = list(first.predicted_mbps)
        lines.append(f"{key[0]} / {key[1]} ({key[2]}, {first.backend}"
                     f"{', ' + first.mode if first.mode else ''}) weights {dict(first.weights)}"
                     f"{' caps sent ' + str(dict(first.caps_sent)) if first.caps_sent else ''}")
        lines.append(f"  predicted   {_fmt_rates(first.predicted_mbps, wats)}   total "
                     f"{first.predicted_total:6.2f}   shares "
                     + " ".join(f"{w} {100 * first.predicted_shares[w]:5.1f}%" for w in wats))
        for i, c in enumerate(rows):
            ratio = "  n/a" if c.ratio is None else f"{c.ratio:5.3f}"
            mark = "" if c.within_target is None else (" ok" if c.within_target else " OUT")
            lines.append(
                f"  run {i + 1:<2d}     {_fmt_rates(c.measured_mbps, wats)}   total "
                f"{c.measured_total:6.2f}   shares "
                + " ".join(f"{w} {100 * c.measured_shares.get(w, 0.0):5.1f}%" for w in wats)
                + f"   ratio {ratio}{mark}"
                + ("" if c.settle_s is None else f"   settled {c.settle_s:.2f} s")
                + ("" if c.window_s is None else f"   over {c.window_s:g} s"))
            if c.applied_caps or any(v is not None for v in c.model_caps.values()):
                lines.append("              caps applied " + str(dict(c.applied_caps))
                             + "  model " + str({w: v for w, v in c.model_caps.items()
                                                 if v is not None}))
        ratios = [c.ratio for c in rows if c.ratio is not None]
        if len(ratios) > 1:
            lines.append(f"  ratio over {len(ratios)} runs: median "
                         f"{statistics.median(ratios):.3f}, {min(ratios):.3f}-"
                         f"{max(ratios):.3f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1, help="netns test runs (default: 1)")
    ap.add_argument("--report", type=Path, action="append", default=None, metavar="FILE",
                    help="compare a report written earlier instead of running the test "
                         "(repeatable)")
    ap.add_argument("--timeout", type=float, default=900.0, metavar="S",
                    help="per netns test run (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    try:
        if args.report:
            reports = [load_report(p.read_bytes()) for p in args.report]
        else:
            if os.geteuid() != 0:
                print("bench_shares: the netns test needs root", file=sys.stderr)
                return 2
            reports = [run_netns_test(args.timeout) for _ in range(args.runs)]
        runs = [compare(r) for r in reports]
    except (OSError, ReportError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"bench_shares: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({
            "target": TARGET,
            "runs": [{"kernel": r.get("kernel"), "loadavg": r.get("loadavg"),
                      "window_s": r.get("window_s"),
                      "scenarios": [c.to_dict() for c in run]}
                     for r, run in zip(reports, runs, strict=True)]}, indent=2))
    else:
        for i, r in enumerate(reports):
            print(f"run {i + 1}: kernel {r.get('kernel')}, load average at its end "
                  f"{r.get('loadavg')}")
        print(render(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
