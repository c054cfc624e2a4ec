"""Trying a steering policy before applying it (``mcw twin --a1-policy FILE``).

The twin runs the shipped loop twice on the same scenario and traffic mix, with the rate-caps
agents: under the operator's A1 policy (type 20101, rules and all: :mod:`twin.a1_file`), and
under the same policy without its ``rules`` (one rule for all traffic, the policy's own
steering).  For each direction and flow it reports what the flow got (Mbit/s, in all and per
WAT, and the class it went to) and, for a flow of finite demand (a control loop), its packets'
RTT: p50/p95/p99 over the run, the share over the 20 ms deadline, and per WAT it used the share
of the time and the RTT and queueing delay there (:mod:`twin.class_stats`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from twin.a1_file import without_rules
from twin.policies import TwinOptions, TwinPolicyError, run_policy
from twin.scenarios import Scenario

#: The two runs: under the policy, and under it without its rules.
RUNS: Final = ("rules", "no_rules")
_NAMES: Final = {"dl": "downlink (proxy to CPE)", "ul": "uplink (CPE to proxy)"}


def trial(scenario: Scenario, payload: Mapping[str, Any], opts: TwinOptions
          ) -> dict[str, Any]:
    """Both runs' figures (the ``--json`` document)."""
    if scenario.traffic is None:
        raise TwinPolicyError("trying a policy needs a traffic mix (flows for its classes)")
    if opts.backend != "rate-caps":
        raise TwinPolicyError("traffic classes are applied by the rate-caps agents "
                              "(mptcp-shares): use backend rate-caps")
    out: dict[str, Any] = {
        "scenario": scenario.name, "n_cpes": scenario.n_cpes,
        "duration_s": round(scenario.duration_s, 3), "backend": opts.backend,
        "estimator": opts.estimator, "traffic": scenario.traffic.name,
        "buffer_ms": scenario.traffic.buffer_ms,
        "rules": [str(r.get("name")) for r in payload.get("rules", [])
                  if isinstance(r, Mapping)],
        "directions": {d: {} for d in scenario.directions}}
    for run, policy in zip(RUNS, (dict(payload), without_rules(payload)), strict=True):
        res = run_policy(scenario, "xapp", replace(opts, a1_policy=policy))
        results = res.extra["directions"]
        assert isinstance(results, dict)
        for d, r in results.items():
            out["directions"][d][run] = {
                "aggregate_mbps": round(float(r.aggregate_mbps.mean()), 3),
                "flows": r.extra["flows"]}
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _cells(doc: Mapping[str, Any], flow: str) -> dict[str, str]:
    """One run's lines of a flow, by label."""
    f = doc["flows"][flow]
    out = {"class": f["class"], "Mbit/s": f"{f['mbps']:.3f}" if f["mbps"] < 10
           else f"{f['mbps']:.1f}",
           "  per WAT": " ".join(f"{w} {v:.1f}" if v >= 10 or v == 0 else f"{w} {v:.3f}"
                                 for w, v in f["per_wat_mbps"].items())}
    if f.get("rtt_ms") is not None:
        r = f["rtt_ms"]
        out["RTT p50/p95/p99 ms"] = f"{_ms(r['p50'])} / {_ms(r['p95'])} / {_ms(r['p99'])}"
        miss = f["over_deadline_pct"]
        out[f"RTT over {f['deadline_ms']:g} ms"] = "-" if miss is None else f"{miss:.1f} %"
        for w, x in f["wats"].items():
            out[f"  on {w}: time; RTT p50 p95; queue p50 p95"] = (
                f"{x['time_pct']:.1f} %; {_ms(x['rtt_ms']['p50'])} {_ms(x['rtt_ms']['p95'])}; "
                f"{_ms(x['queue_ms']['p50'])} {_ms(x['queue_ms']['p95'])}")
    return out


def format_trial(doc: Mapping[str, Any]) -> list[str]:
    """The table ``mcw twin --a1-policy`` prints."""
    lines = [f"scenario {doc['scenario']}  CPEs {doc['n_cpes']}  {doc['duration_s']:.0f} s  "
             f"backend {doc['backend']}  estimator {doc['estimator']}  traffic "
             f"{doc['traffic']} (path buffers {doc['buffer_ms']:g} ms)",
             f"rules: {', '.join(doc['rules']) or '(none: both runs are the same)'}"]
    width, cell = 44, 30
    for d, runs in doc["directions"].items():
        lines.append("")
        lines.append(f"{_NAMES.get(d, d):{width}s} {'with rules':>{cell}s} "
                     f"{'without rules':>{cell}s}")
        total = [f"{runs[r]['aggregate_mbps']:.1f}" for r in RUNS]
        lines.append(f"  {'aggregate Mbit/s':{width - 2}s} {total[0]:>{cell}s} "
                     f"{total[1]:>{cell}s}")
        for flow in runs[RUNS[0]]["flows"]:
            cells = [_cells(runs[r], flow) for r in RUNS]
            labels = list(dict.fromkeys([*cells[0], *cells[1]]))
            lines.append(f"  {flow}")
            for label in labels:
                a, b = (c.get(label, "-") for c in cells)
                lines.append(f"    {label:{width - 4}s} {a:>{cell}s} {b:>{cell}s}")
    return lines
