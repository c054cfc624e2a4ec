"""Benchmark of several ``mcw run`` replicas sharing one fleet, against one replica, in one run.

Real parts: one redis-server (the shard leases, weight versions, state), one Mosquitto over
mTLS, ``mcw run`` processes with ``controls.sharding.enabled`` (EWMA estimator, InfluxDB left
out: KPIs come over MQTT), simulated CPEs publishing telemetry on their shard-keyed topics
from a process of its own (``tests/sharding/simulate.py``: capacities in a random walk of a
few percent a second, so weights change; each tenth of a period's messages written in bulk
over one TLS connection, a few µs a message), and an observer in this process subscribed to
every weights topic with the xApp's own MQTT client (``tests/sharding/fleet.py``).

For each replica count and fleet size: start, wait until every CPE got weights, then measure
for ``--window`` seconds.  A fleet *holds* at the period when every CPE got weights within the
window (the weights' lease is 10 s, so unchanged weights go again every 5 s) and at most 1 %
of the ticks of every replica took more than half the period (the criterion of
docs/control-loop.md).  Printed per run: ticks over half the period, mean tick,
CPU of each replica (cores, from /proc), weights messages per second, CPEs without weights,
the CPU of the harness (simulator, broker, observer) and the machine's 1-minute load.

Then, with the largest fleet three replicas held, one replica is killed (SIGKILL), the shard
lease being the shipped default (1.5 periods): the takeover time (until the others hold its
shards, read from their /ric/v1/shards) and the time until every CPE of its shards heard from
its new owner.

    python bench/bench_replicas.py [--cpes 2000 4000 8000 16000] [--replicas 1 3]
                                   [--period 1.0] [--window 15] [--json]

On 2 shared cores everything (Mosquitto, Redis, the simulator, the observer and every
replica) shares the machine: the figures are what this machine holds, not
what N pods on N nodes would.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sharding.fleet import Fleet, ProcessSimulator, Replica
from tests.support.polling import wait_until
from xapp.app.config import ShardingSettings
from xapp.core.shards import shard_of

_CLK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


def tick_stats(r: Replica) -> tuple[float, float, float]:
    """(ticks, ticks over 0.5 s, sum of tick seconds) from the replica's histogram."""
    def m(name: str, **labels: str) -> float:
        return r.metric(name, **labels) or 0.0
    return (m("mcw_tick_duration_seconds_count"),
            m("mcw_tick_duration_seconds_count") - m("mcw_tick_duration_seconds_bucket",
                                                     le="0.5"),
            m("mcw_tick_duration_seconds_sum"))


def run_one(root: Path, replicas: int, cpes: int, period_s: float, window_s: float,
            kill: bool) -> dict[str, Any]:
    # Weights unchanged are re-sent every half lease: a 10 s lease makes every CPE hear from
    # its replica at least every 5 s, so a 15 s window sees every CPE that is served.  The
    # shard lease is the shipped default (0: 1.5 control periods), so the takeover measured is
    # what a deployment gets.
    fleet = Fleet(root, control_period_s=period_s, shard_lease_s=0.0, weights_lease_s=10.0)
    out: dict[str, Any] = {"replicas": replicas, "cpes": cpes, "period_s": period_s}
    sim: ProcessSimulator | None = None
    try:
        observer = fleet.start_observer()
        rs = [fleet.start_replica(f"r{i}") for i in range(replicas)]
        sim = ProcessSimulator(fleet.broker, cpes, period_s=period_s).start()
        ids = sim.ids

        def everyone() -> bool:
            return not observer.silent_since(ids, -1.0)

        started = time.monotonic()
        if not wait_until(everyone, 60 + cpes / 100):
            out.update(holds=False, reason="not every CPE got weights at start",
                       without_weights=len(observer.silent_since(ids, -1.0)))
            return out
        out["all_weights_after_s"] = round(time.monotonic() - started, 1)
        time.sleep(2 * period_s)
        # The harness's own processes, measured like the replicas: whether the machine or the
        # harness, not the replicas, is what a fleet size runs out of.
        assert sim.proc is not None and fleet.broker.proc is not None
        harness = {"simulator": sim.proc.pid, "broker": fleet.broker.proc.pid,
                   "observer": os.getpid()}
        out["load_1min"] = round(os.getloadavg()[0], 2)
        t0 = time.monotonic()
        before = {r.replica_id: (tick_stats(r), cpu_s(r.proc.pid)) for r in rs}
        harness0 = {k: cpu_s(pid) for k, pid in harness.items()}
        n0 = observer.count()
        time.sleep(window_s)
        t1 = time.monotonic()
        n1 = observer.count()
        harness1 = {k: cpu_s(pid) for k, pid in harness.items()}
        late = observer.silent_since(ids, t0)
        per: dict[str, Any] = {}
        worst_over = 0.0
        for r in rs:
            (c0, o0, s0), cpu0 = before[r.replica_id]
            (c1, o1, s1), cpu1 = tick_stats(r), cpu_s(r.proc.pid)
            ticks = max(1.0, c1 - c0)
            over = (o1 - o0) / ticks
            worst_over = max(worst_over, over)
            per[r.replica_id] = {"shards": len(r.held()), "ticks": int(c1 - c0),
                                 "over_half_period": round(over, 4),
                                 "mean_tick_ms": round(1000 * (s1 - s0) / ticks, 1),
                                 "cpu_cores": round((cpu1 - cpu0) / (t1 - t0), 2)}
        out.update(per_replica=per, weights_per_s=round((n1 - n0) / (t1 - t0), 1),
                   harness_cpu_cores={k: round((harness1[k] - harness0[k]) / (t1 - t0), 2)
                                      for k in harness},
                   cpes_without_weights_in_window=len(late),
                   holds=not late and worst_over <= 0.01)
        if kill and replicas > 1:
            victim = rs[-1]
            shards = victim.held()
            mine = [c for c in ids if shard_of(c) in shards]
            others = rs[:-1]
            killed = time.monotonic()
            victim.kill()
            took = wait_until(lambda: shards <= set().union(*(r.held() for r in others)), 30,
                              step_s=0.02)
            takeover = time.monotonic() - killed
            heard = wait_until(lambda: not observer.silent_since(mine, killed), 30, step_s=0.05)
            out["kill"] = {"shards": len(shards), "cpes": len(mine),
                           "takeover_s": round(takeover, 2) if took else None,
                           "all_its_cpes_heard_after_s":
                               round(time.monotonic() - killed, 2) if heard else None,
                           "shard_lease_s": ShardingSettings().effective_lease_s(period_s)}
        return out
    finally:
        if sim is not None:
            sim.stop()
        fleet.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpes", type=int, nargs="+", default=[2000, 4000, 8000, 16000])
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--window", type=float, default=15.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    # A terminated bench unwinds through run_one's finally, which stops the fleet's processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    random.seed(0)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        for n in args.replicas:
            held_at: int | None = None
            for cpes in args.cpes:
                res = run_one(Path(tmp) / f"r{n}-c{cpes}", n, cpes, args.period, args.window,
                              kill=False)
                results.append(res)
                if not args.json:
                    print(json.dumps(res), flush=True)
                if not res.get("holds"):
                    break
                held_at = cpes
            if n > 1 and held_at is not None:
                res = run_one(Path(tmp) / f"r{n}-kill", n, held_at, args.period, args.window,
                              kill=True)
                results.append(res)
                if not args.json:
                    print(json.dumps(res), flush=True)
    summary = {}
    for n in args.replicas:
        held = [r["cpes"] for r in results if r["replicas"] == n and r.get("holds")
                and "kill" not in r]
        summary[str(n)] = max(held, default=0)
    kills = [r["kill"] for r in results if "kill" in r]
    doc = {"period_s": args.period, "holds_up_to": summary, "takeover": kills,
           "runs": results}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"at a {args.period:g} s period this machine holds, of the sizes tried: "
              + ", ".join(f"{n} replica(s): {c} CPEs" for n, c in summary.items()))
        for k in kills:
            print(f"kill one replica ({k['shards']} shards, {k['cpes']} CPEs): shards held by "
                  f"the others after {k['takeover_s']} s (lease {k['shard_lease_s']} s), "
                  f"every one of its CPEs heard from its new owner after "
                  f"{k['all_its_cpes_heard_after_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
