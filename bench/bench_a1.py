"""Benchmark of A1 round trips through the shipped RMR glue, and of health checks sent during
them (issue 22).

Each request goes in through :meth:`xapp.adapters.rmr.RmrGlue.dispatch`, what RMR's dispatch
thread does with every received message, and out through the glue's return-to-sender; RMR's
library itself is replaced by :class:`xapp.adapters.lab.LoopbackGlue`, which keeps the answer
and the time it left.  In between everything is shipped code: the bounded A1 queue, the
``mcw-a1`` worker, :class:`~xapp.adapters.a1.A1Handler` with the policy type's schema.

Requests:

``issue-22``
    ``scope.cpes = [0, "c0", ..., "c29999"]`` (282 KiB): answered after 50 s before issue 22.
``valid-30k``
    30,000 valid CPE ids (applied).
``small``
    A policy of a few keys (applied).

After each request a health check (100) is dispatched at once; its figure is the time from
dispatch to its answer leaving, while the A1 worker handles the request.

Then the ``small`` request's round trip while E2 indications arrive (issue 21): a feeder
dispatches RIC indications (12050) of ``bench_kpm``'s format 3 case, 100 UEs x 4 measurements,
at ``--ue-rate`` UE measurements per second (default 10,000: 25 indications/s) through the same
glue, into what ``mcw run`` puts behind it: the E2 decoder process
(:class:`~xapp.adapters.e2.decoder_process.DecoderProcess`: E2AP + KPM decoded in a child
process, ``KpmIngest.apply`` mapping the answers into the sink on its ``mcw-e2-decoder``
thread), while A1 requests are answered; the idle figure is measured in the same run, just
before, with the decoder process started and idle.  ``--in-thread`` puts ``KpmIngest.handle``
on a worker thread of this process instead (what the glue did before: the decoding holds the
interpreter lock), for comparison.

    python bench/bench_a1.py [--runs 30] [--load-runs 1000] [--ue-rate 10000] [--in-thread]
                             [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from xapp.adapters.a1 import A1Handler
from xapp.adapters.a1_types import load_policy_types
from xapp.adapters.e2.decoder_process import DecoderProcess
from xapp.adapters.lab import LoopbackGlue
from xapp.core.policy_book import PolicyBook

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kpm import NODE, make_case, make_ingest

A1_POLICY_REQ, HEALTH_REQ, RIC_INDICATION = 20010, 100, 12050
DEFAULTS = {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
            "capacity_floor_mbps": 1.0}


def requests() -> dict[str, bytes]:
    def req(iid: str, payload: dict[str, Any]) -> bytes:
        return json.dumps({"operation": "CREATE", "policy_type_id": 20100,
                           "policy_instance_id": iid, "payload": payload}).encode()

    return {
        "issue-22": req("p-big", {"scope": {"cpes": [0] + [f"c{i}" for i in range(30000)]}}),
        "valid-30k": req("p-30k", {"scope": {"cpes": [f"c{i}" for i in range(30000)]}}),
        "small": req("p-small", {"max_weight": 40, "excluded_wats": ["lifi"]}),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(runs: int) -> dict[str, dict[str, float]]:
    handler = A1Handler(PolicyBook(DEFAULTS), load_policy_types(), "bench")
    glue = LoopbackGlue(handler, lambda: True)
    glue.start_handlers()
    out: dict[str, dict[str, float]] = {}
    try:
        for name, raw in requests().items():
            a1_ms, health_ms = [], []
            status = ""
            for i in range(runs + 2):
                sent = glue.send(A1_POLICY_REQ, raw, ("a1", i))
                health_sent = glue.send(HEALTH_REQ, b"ping", ("hc", i))
                health_at, _, body = glue.answer(("hc", i))
                a1_at, _, answer = glue.answer(("a1", i))
                status = json.loads(answer)["status"]
                if body != b"OK\n":
                    raise RuntimeError(f"health check answered {body!r}")
                if i >= 2:  # warm-up
                    a1_ms.append((a1_at - sent) * 1e3)
                    health_ms.append((health_at - health_sent) * 1e3)
            out[name] = {"bytes": len(raw), "status": status,  # type: ignore[dict-item]
                         "a1_p50_ms": statistics.median(a1_ms),
                         "a1_p99_ms": percentile(a1_ms, 0.99), "a1_max_ms": max(a1_ms),
                         "health_p50_ms": statistics.median(health_ms),
                         "health_max_ms": max(health_ms)}
    finally:
        for worker in glue.workers():
            worker.stop(timeout_s=2)
    return out


def round_trips(glue: LoopbackGlue, raw: bytes, runs: int, tag: str) -> list[float]:
    """Milliseconds from dispatch to answer of ``runs`` A1 requests, one at a time."""
    out = []
    for i in range(runs + 2):
        sent = glue.send(A1_POLICY_REQ, raw, (tag, i))
        at, _, answer = glue.answer((tag, i))
        if json.loads(answer)["status"] != "OK":
            raise RuntimeError(f"A1 answered {answer!r}")
        if i >= 2:
            out.append((at - sent) * 1e3)
        time.sleep(0.002)  # requests spread over the load, not queued back to back
    return out


def under_indications(runs: int, ue_rate: float, in_thread: bool = False,
                      blocks: int = 5) -> dict[str, Any]:
    """A1 round trips idle and while indications arrive at ``ue_rate`` UE measurements/s:
    ``blocks`` alternating blocks of each (``runs`` round trips in all per side), so that
    both sides share whatever else the machine is doing."""
    case = make_case(100)
    ingest, sink = make_ingest(case)
    handler = A1Handler(PolicyBook(DEFAULTS), load_policy_types(), "bench")
    if in_thread:
        glue = LoopbackGlue(handler, lambda: True, on_indication=ingest.handle)
    else:
        glue = LoopbackGlue(handler, lambda: True, indications=DecoderProcess(ingest))
    glue.start_handlers()
    e2 = glue.e2_worker
    assert e2 is not None
    if isinstance(e2, DecoderProcess):
        deadline = time.monotonic() + 60
        while not e2.healthy() and time.monotonic() < deadline:
            time.sleep(0.01)  # the process has loaded its codecs
    raw = requests()["small"]
    period_s = case.values_per_indication / ue_rate
    sent = [0]

    def feed(stop: threading.Event) -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            glue.send(RIC_INDICATION, case.payload, ("e2", sent[0]), meid=NODE.encode())
            sent[0] += 1
            next_at += period_s
            stop.wait(max(0.0, next_at - time.monotonic()))

    def drained(frames: int) -> None:
        deadline = time.monotonic() + 30
        while (e2.pending() or sink.frames < frames) and time.monotonic() < deadline:
            time.sleep(0.01)

    idle: list[float] = []
    loaded: list[float] = []
    took = fed = idle_took = 0.0
    cpu = {"idle": 0.0, "load": 0.0}  # this process's CPU seconds in each kind of block
    try:
        # Dialect detection and caches, outside the clock: once here, once in the process.
        ingest.handle(case.payload, NODE)
        glue.send(RIC_INDICATION, case.payload, ("e2", -1), meid=NODE.encode())
        drained(2)
        frames_before = sink.frames
        per_block = max(1, runs // blocks)
        for block in range(blocks):
            started, cpu0 = time.monotonic(), time.process_time()
            idle += round_trips(glue, raw, per_block, f"idle{block}")
            idle_took += time.monotonic() - started
            cpu["idle"] += time.process_time() - cpu0
            stop = threading.Event()
            feeder = threading.Thread(target=feed, args=(stop,), name="e2-feeder", daemon=True)
            started, cpu0 = time.monotonic(), time.process_time()
            feeder.start()
            loaded += round_trips(glue, raw, per_block, f"load{block}")
            stop.set()
            feeder.join(timeout=5)
            fed += time.monotonic() - started
            drained(frames_before + sent[0] - e2.dropped)
            took += time.monotonic() - started
            cpu["load"] += time.process_time() - cpu0
        decoded, dropped = sink.frames - frames_before, e2.dropped
    finally:
        e2.stop(timeout_s=5)
        for worker in glue.workers():
            worker.stop(timeout_s=2)
    # What the indications cost this process (the interpreter A1 runs in): CPU per second
    # of load blocks above that of idle blocks, per indication.
    extra = cpu["load"] / took - cpu["idle"] / idle_took
    return {"decoding": "in-thread" if in_thread else "decoder-process",
            "blocks": blocks, "ue_rate_asked": ue_rate,
            "ue_rate_dispatched": sent[0] * case.values_per_indication / fed,
            "main_cpu_ms_per_indication": extra * took / max(1, sent[0]) * 1e3,
            "indications_sent": sent[0], "indications_decoded": decoded,
            "indications_dropped": dropped,
            "idle_p50_ms": statistics.median(idle), "idle_p99_ms": percentile(idle, 0.99),
            "load_p50_ms": statistics.median(loaded), "load_p99_ms": percentile(loaded, 0.99),
            "p99_ratio": percentile(loaded, 0.99) / percentile(idle, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--load-runs", type=int, default=1000,
                        help="small A1 requests idle and under indication load (default 1000)")
    parser.add_argument("--ue-rate", type=float, default=10_000.0,
                        help="UE measurements per second the E2 feeder dispatches (10000)")
    parser.add_argument("--blocks", type=int, default=5,
                        help="alternating idle and loaded blocks the round trips are split "
                             "into (default 5)")
    parser.add_argument("--in-thread", action="store_true",
                        help="decode indications on a thread of this process, not in the "
                             "decoder process (the glue before issue 21's fix)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.ERROR)  # each refusal of the issue-22 request is logged, by design
    started = time.perf_counter()
    result = run(args.runs)
    load = under_indications(args.load_runs, args.ue_rate, args.in_thread, args.blocks)
    if args.json:
        print(json.dumps({"requests": result, "under_indications": load}, indent=2))
        return
    print(f"A1 round trips through RmrGlue in-process, {args.runs} runs each "
          f"({time.perf_counter() - started:.1f} s)")
    print(f"{'request':<10} {'KiB':>6} {'answer':>7} {'A1 p50':>8} {'p99':>8} {'max':>8} "
          f"{'health p50':>11} {'max':>7}")
    for name, r in result.items():
        print(f"{name:<10} {r['bytes'] / 1024:>6.0f} {r['status']:>7} {r['a1_p50_ms']:>6.1f}ms "
              f"{r['a1_p99_ms']:>6.1f}ms {r['a1_max_ms']:>6.1f}ms {r['health_p50_ms']:>9.2f}ms "
              f"{r['health_max_ms']:>5.2f}ms")
    print(f"\nsmall A1 request idle and under E2 load ({args.load_runs} round trips each, in "
          f"{args.blocks} alternating blocks): indications "
          f"of 100 UEs x 4 at {load['ue_rate_dispatched']:,.0f} UE meas/s "
          f"({load['indications_decoded']}/{load['indications_sent']} decoded, "
          f"{load['indications_dropped']} dropped; {load['decoding']})")
    print(f"idle  p50 {load['idle_p50_ms']:.2f} ms  p99 {load['idle_p99_ms']:.2f} ms")
    print(f"load  p50 {load['load_p50_ms']:.2f} ms  p99 {load['load_p99_ms']:.2f} ms  "
          f"(p99 {load['p99_ratio']:.2f}x idle)")
    print(f"this process's CPU per indication: {load['main_cpu_ms_per_indication']:.2f} ms")


if __name__ == "__main__":
    main()
