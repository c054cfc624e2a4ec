"""Benchmark of one control tick of the shipped loop, for 1,000 and 10,000 CPEs x 3 WATs x 2
directions.

Each run is a closed loop: CPE capacities drift every tick (Wi-Fi a few percent per second,
5G and LiFi less), separately in the downlink and the uplink (the uplink a fraction of the
downlink, as TDD patterns and Wi-Fi airtime make it), and every CPE reports both directions
(rows keyed (cpe, wat, direction)); the fluid model turns the weights the CPEs hold into what
their subflows
deliver and whether they were saturated, that telemetry reaches the loop, the loop ticks
(:class:`xapp.core.loop.ControlLoop`, EWMA estimator with bounded exploration, hysteresis 1 %),
and the CPEs apply the weights published (the ``dl`` set to their downlink, ``ul`` to their
uplink).  Timed: ``ControlLoop.tick`` from its call to the
return of the publisher's ``publish_many`` (wall and CPU time of the ticking thread), after
warm-up ticks; the first (cold) tick, which decides every CPE, is reported apart.

Paths:

``memory``
    In-memory intake (:class:`~xapp.core.intake.LatestKpis`) and the in-memory publisher,
    which builds and validates every weights message as the MQTT one does.
``real``
    The fleet's agents publish their telemetry over MQTT (one message per CPE a period, at
    QoS 0, from a process of their own) to a real Mosquitto over mTLS; the shipped
    :class:`~xapp.adapters.mqtt.ChannelSubscriber` and its batch worker put it into the intake
    and into a real InfluxDB 1.8, as ``mcw run`` wires them; the shipped
    :class:`~xapp.adapters.influx.intake.InfluxIntake` polls InfluxDB as in ``mcw run``
    (skipping the points this process wrote); weights published with the shipped
    :class:`~xapp.adapters.mqtt.MqttWeightPublisher` (retained, QoS 1), forecasts and weights
    written to InfluxDB.  The intake lag is the time from the first telemetry message sent to
    the last row in the intake.
``one-direction`` (``--one-direction``)
    The loop as it was before it decided both directions (commit ``aa18381``, the parent of
    the one that added them), taken from this repository's history with ``git archive`` and
    run on the same fleet sizes in the same run (its own ``bench_tick.py --no-real``, a
    subprocess): the one-direction cost the both-direction tick is compared with.
``per-cpe``
    The baseline, in the same run: the same loop with every decision made by the per-CPE
    reference :func:`xapp.core.weights.decide` (``decide=decide_per_cpe``, the previous
    design).

    python bench/bench_tick.py [--cpes 1000 10000] [--ticks 40] [--period 1.0] [--json]
                               [--no-real] [--no-baseline] [--one-direction]

``--period`` sets the control period (and the policy's update period, so every CPE is due every
tick); the output names the largest fleet measured whose tick p99 fits in half the period.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from twin.fluid import deliver  # noqa: E402
from xapp.adapters.lab import MemoryPublisher, NullSink  # noqa: E402
from xapp.adapters.sdl import SdlStateStore  # noqa: E402
from xapp.app.runner import tune_gc  # noqa: E402
from xapp.core.decisions import DecideBatch, decide_batch, decide_per_cpe  # noqa: E402
from xapp.core.ewma import EwmaEstimator  # noqa: E402
from xapp.core.forecast import KpiFrame  # noqa: E402
from xapp.core.intake import LatestKpis  # noqa: E402
from xapp.core.loop import ControlLoop, LoopSettings  # noqa: E402
from xapp.core.policy_book import PolicyBook  # noqa: E402
from xapp.core.ports import TelemetrySink, WeightPublisher  # noqa: E402

WATS = ("nr", "wifi", "lifi")
#: Targets of issue 8 (ms, one core).
TARGET_MEMORY_P99_MS = 150.0
TARGET_REAL_P99_MS = 500.0
TARGET_SPEEDUP = 10.0
#: The last commit whose loop decided one direction (the parent of a2e8bb3, which added both).
ONE_DIRECTION_COMMIT = "aa183814d71fff11c7d93d3b9a8a49c607064811"


class Fleet:
    """N CPEs whose capacities drift per direction; they hold the weights they were sent.

    Row ``i`` of the (2N, 3) arrays is CPE ``i``'s downlink, row ``N + i`` its uplink.
    """

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.n = n
        dl = np.column_stack([rng.uniform(150, 350, n), rng.uniform(200, 1200, n),
                              rng.uniform(5, 20, n)])
        ul = dl * np.column_stack([rng.uniform(0.2, 0.4, n), rng.uniform(0.3, 0.8, n),
                                   rng.uniform(0.5, 1.0, n)])
        self.base = np.concatenate([dl, ul])
        self.drift = np.zeros((2 * n, 3))
        self.weights = np.ones((2 * n, 3), dtype=np.int64)
        self.names = [f"cpe-{i:05d}" for i in range(n)]
        self.index = {c: i for i, c in enumerate(self.names)}
        self.cpe = np.tile(np.repeat(np.array(self.names), 3), 2)
        self.wat = np.tile(np.array(WATS), 2 * n)
        self.direction = np.repeat(np.array(["dl", "ul"]), 3 * n)

    @property
    def rows(self) -> int:
        """KPI rows per period: CPEs x WATs x directions."""
        return 6 * self.n

    def step(self, t: float) -> KpiFrame:
        """One control period: capacities drift, the subflows deliver under the weights held."""
        sd = np.array([0.01, 0.04, 0.05])
        self.drift = 0.95 * self.drift + self.rng.normal(0.0, 1.0, self.drift.shape) * sd
        cap = self.base * np.exp(self.drift)
        delivered, _, saturated = deliver(cap, self.weights)
        return KpiFrame(time_s=t, cpe=self.cpe, wat=self.wat, direction=self.direction, values={
            "delivered_mbps": delivered.ravel(), "saturated": saturated.astype(float).ravel(),
            "rtt_ms": (20.0 + 24.0 / np.maximum(cap, 1.0)).ravel(), "up": np.ones(self.rows)})

    def apply(self, messages: list[dict[str, Any]]) -> None:
        for doc in messages:
            i = self.index[doc["cpe_id"]]
            for k, name in enumerate(("dl", "ul")):
                self.weights[k * self.n + i] = [doc[name]["weights"].get(w, 0) for w in WATS]


def _loop(intake: LatestKpis, publisher: WeightPublisher, period_s: float,
          sink: TelemetrySink | None = None, decide: DecideBatch = decide_batch) -> ControlLoop:
    # Every CPE is due every period: the policy's update period is the control period.
    policy = {"hysteresis_pct": 1.0, "update_period_s": period_s}
    return ControlLoop(intake, EwmaEstimator(), publisher, sink or NullSink(),
                       PolicyBook(policy).resolver, SdlStateStore(),
                       settings=LoopSettings(control_period_s=period_s, kpi_max_age_s=5.0),
                       decide=decide)


def _percentiles(wall: list[float], cpu: list[float]) -> dict[str, float]:
    q = statistics.quantiles(wall, n=100, method="inclusive") if len(wall) > 1 else wall * 99
    return {"p50_ms": round(statistics.median(wall) * 1e3, 2), "p99_ms": round(q[98] * 1e3, 2),
            "cpu_ms_p50": round(statistics.median(cpu) * 1e3, 2)}


def run_memory(n: int, ticks: int, warm: int, period_s: float = 1.0,
               per_cpe: bool = False) -> dict[str, Any]:
    fleet = Fleet(n)
    intake = LatestKpis()
    publisher = MemoryPublisher()
    loop = _loop(intake, publisher, period_s,
                 decide=decide_per_cpe if per_cpe else decide_batch)
    wall: list[float] = []
    cpu: list[float] = []
    first = 0.0
    t0 = 1_800_000_000.0
    for k in range(warm + ticks):
        now = t0 + k * period_s
        intake.update(fleet.step(now))
        w, c = time.perf_counter(), time.thread_time()
        report = loop.tick(now)
        w, c = time.perf_counter() - w, time.thread_time() - c
        fleet.apply(publisher.take())
        if k == 0:
            first = w
            assert report.decided == 2 * n, "the first tick decides every CPE, both directions"
        if k >= warm:
            wall.append(w)
            cpu.append(c)
    path = "per-cpe" if per_cpe else "memory"
    return {"cpes": n, "path": path, "period_s": period_s, **_percentiles(wall, cpu),
            "first_tick_ms": round(first * 1e3, 1), "ticks": ticks}


def run_per_cpe(n: int, ticks: int, warm: int, period_s: float = 1.0) -> dict[str, Any]:
    return run_memory(n, ticks, warm, period_s, per_cpe=True)


def telemetry_messages(frame: KpiFrame, interval_ms: int = 1000) -> list[tuple[str, bytes]]:
    """The fleet's period as the agents send it: one ``mcw.telemetry.v2`` message per CPE on its
    telemetry topic (the uplink as the CPE agent measures it; the downlink beside it, as a
    CPE behind no proxy reports what it received), JSON as the agent writes it."""
    from xapp.adapters.mqtt.topics import shard_topic

    time_ms = round(frame.time_s * 1000)
    delivered, saturated = frame.column("delivered_mbps"), frame.column("saturated")
    rtt, up = frame.column("rtt_ms"), frame.column("up")
    assert frame.direction is not None
    docs: dict[str, dict[str, Any]] = {}
    for i, (cpe, wat, d) in enumerate(zip(frame.cpe.tolist(), frame.wat.tolist(),
                                          frame.direction.tolist(), strict=True)):
        doc = docs.setdefault(cpe, {"schema": "mcw.telemetry.v2", "cpe_id": cpe,
                                    "time_ms": time_ms, "interval_ms": interval_ms, "wats": {}})
        w = doc["wats"].setdefault(wat, {"up": bool(up[i]), "subflows": 1,
                                         "rtt_ms": round(float(rtt[i]), 2)})
        w[d] = {"delivered_mbps": round(float(delivered[i]), 3),
                "saturated": float(saturated[i])}
    return [(shard_topic(cpe, "telemetry"), json.dumps(doc, separators=(",", ":")).encode())
            for cpe, doc in docs.items()]


def _received(subscriber: Any, want: int) -> bool:
    return bool(subscriber.received >= want)


class _Counted:
    """The shipped telemetry callback, counting the rows it was handed: the bench waits on the
    count (the subscriber wakes its waiters after every batch) instead of polling the intake,
    whose snapshot of 60,000 rows would itself take the GIL from the path it measures."""

    def __init__(self, inner: Callable[[KpiFrame], None]) -> None:
        self.inner = inner
        self.rows = 0

    def __call__(self, frame: KpiFrame) -> None:
        self.inner(frame)
        self.rows += len(frame)


def _handed(_subscriber: Any, counted: _Counted, want: int) -> bool:
    return counted.rows >= want


def _feeder(port: int, ca: str, cert: str, key: str, conn: Any) -> None:
    """The fleet's agents, as one MQTT connection in a process of its own: each batch of
    (topic, payload) it is sent goes out as QoS 0 PUBLISH packets (as the agents send
    telemetry) in large TLS writes (:class:`tests.support.mqtt_bulk.BulkPublisher`); it
    answers once all is written. Ten thousand agents publish in parallel from their own
    devices: a paho client here would itself take most of a second per period and be measured
    as the xApp's lag."""
    from tests.support.mqtt_bulk import BulkPublisher

    publisher = BulkPublisher(port, ca, cert, key, client_id="bench-fleet")
    while True:
        batch = conn.recv()
        if batch is None:
            break
        conn.send(publisher.send_topics(batch))
    publisher.close()


def run_real(n: int, ticks: int, warm: int, work: Path, period_s: float = 1.0
             ) -> dict[str, Any]:
    """The fleet's agents publish their telemetry over MQTT (mTLS) from another process; the
    shipped subscriber and its batch worker put it into the intake and InfluxDB (as
    ``mcw run`` wires them, :class:`xapp.app.wiring.telemetry.AgentTelemetry`); the InfluxDB intake
    polls as ``mcw run``'s does (it skips the points this process wrote); the loop writes its
    forecasts and weights to InfluxDB and publishes over MQTT."""
    import multiprocessing

    from tests.support.influxd import start_influxd
    from tests.support.mosquitto import ACL_FILE, MosquittoBroker, cpe_name, make_pki
    from xapp.adapters.influx.intake import InfluxIntake
    from xapp.adapters.influx.store import InfluxConfig, InfluxStore, flush_interval_s
    from xapp.adapters.mqtt import (
        ChannelSubscriber,
        MemoryVersionStore,
        MqttSettings,
        MqttWeightPublisher,
    )
    from xapp.app.wiring.telemetry import AgentTelemetry

    influx = start_influxd(work)
    pki = make_pki(work / "pki", n_cpes=1)
    # One certificate speaks for the whole fleet here (10,000 TLS clients are bench_fanout's
    # subject); the shipped ACL plus a grant to write every CPE's telemetry.
    acl = work / "acl"
    acl.write_text(ACL_FILE.read_text(encoding="utf-8")
                   + f"\nuser {cpe_name(1)}\ntopic write mcw/v1/#\n", encoding="utf-8")
    broker = MosquittoBroker(pki, work / "broker", acl=acl).start()
    cert, key = pki.cert("mcw-xapp")
    settings = MqttSettings(host="127.0.0.1", port=broker.port, ca_file=str(pki.ca),
                            cert_file=str(cert), key_file=str(key), client_id="bench-tick")
    publisher = MqttWeightPublisher(settings, MemoryVersionStore()).start()
    # The loop's sink flushes on its own thread, as in mcw run.
    sink = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, writer="bench"))
    sink.start(flush_interval_s(period_s))
    reader = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket, writer="bench"))
    intake = LatestKpis()
    counted = _Counted(AgentTelemetry(intake, sink))
    subscriber = ChannelSubscriber(settings, on_telemetry=counted).start()
    clock = {"now": 0.0}
    influx_intake = InfluxIntake.for_period(reader, intake, period_s, clock=lambda: clock["now"])
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    fcert, fkey = pki.cert(cpe_name(1))
    feeder = ctx.Process(target=_feeder, args=(broker.port, str(pki.ca), str(fcert),
                                               str(fkey), there), daemon=True)
    feeder.start()
    try:
        assert publisher.wait_connected(10) and subscriber.wait_subscribed(10)
        fleet = Fleet(n)
        loop = _loop(intake, publisher, period_s, sink=sink)
        wall: list[float] = []
        cpu: list[float] = []
        lag: list[float] = []
        sub_cpu: list[float] = []
        t0 = time.time() - (warm + ticks) * period_s - 5
        influx_intake.start()
        first = 0.0
        for k in range(warm + ticks):
            now = t0 + k * period_s
            messages = telemetry_messages(fleet.step(now), round(period_s * 1000))
            clock["now"] = now
            # From the first message sent to every row in the intake: the KPI path's lag.
            start, c0 = time.perf_counter(), time.process_time()
            received = subscriber.received + len(messages)
            handed = counted.rows + fleet.rows
            here.send(messages)
            assert subscriber.wait_for(partial(_received, want=received), 60)
            assert subscriber.wait_for(partial(_handed, counted=counted, want=handed), 60)
            lag.append(time.perf_counter() - start)
            sub_cpu.append(time.process_time() - c0)
            frame = intake.latest(now, period_s / 2)
            assert len(frame) == fleet.rows and np.isfinite(frame.column("delivered_mbps")).all()
            assert here.recv() == n
            w, c = time.perf_counter(), time.thread_time()
            report = loop.tick(now)
            w, c = time.perf_counter() - w, time.thread_time() - c
            # the CPEs apply what was published (recorded in the loop's table)
            fleet.apply([{"cpe_id": c_, **{d: {"weights": t.in_force(t.index[c_]).weights}
                                           for d, t in loop.fleets.items()}}
                         for c_ in report.published])
            if k == 0:
                first = w
            if k >= warm:
                wall.append(w)
                cpu.append(c)
        assert publisher.flush(30), "the broker did not acknowledge every weights message"
        assert subscriber.drops.total() == 0, subscriber.drops.snapshot()
        timed_lag, timed_sub = lag[warm:], sub_cpu[warm:]
        return {"cpes": n, "path": "real", "period_s": period_s, **_percentiles(wall, cpu),
                "first_tick_ms": round(first * 1e3, 1), "ticks": ticks,
                "intake_lag_ms_p50": round(statistics.median(timed_lag) * 1e3, 1),
                "intake_lag_ms_max": round(max(timed_lag) * 1e3, 1),
                # the process's CPU while the telemetry came in (subscriber, batch worker,
                # InfluxDB writer): what 10,000 agents' telemetry a period costs the xApp
                "telemetry_cpu_ms_p50": round(statistics.median(timed_sub) * 1e3, 1),
                "telemetry_messages": n * (warm + ticks),
                "influx_intake_rows": influx_intake.rows_read,
                # history the sink could not keep (InfluxDB slower than the fleet's points)
                "influx_dropped_points": sink.counters.dropped_points,
                "influx_written_points": sink.counters.written_points,
                # telemetry, the forecasts' slice and the weights published, per period
                "history_points_per_period": round(
                    (sink.counters.written_points + sink.counters.dropped_points
                     + sink.buffered) / (warm + ticks)),
                "acked": publisher.stats.acked}
    finally:
        here.send(None)
        feeder.join(10)
        influx_intake.stop()
        subscriber.stop()
        publisher.stop()
        sink.close()
        reader.close()
        broker.stop()
        influx.stop()


def run_one_direction(n: int, ticks: int, warm: int, period_s: float, work: Path
                      ) -> dict[str, Any]:
    """The memory path of the one-direction loop (:data:`ONE_DIRECTION_COMMIT`), run by its
    own bench in a subprocess with this interpreter."""
    import subprocess

    tree = work / "one-direction"
    if not tree.exists():
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ONE_DIRECTION_COMMIT],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    out = subprocess.run(
        [sys.executable, str(tree / "bench" / "bench_tick.py"), "--cpes", str(n), "--ticks",
         str(ticks), "--warm", str(warm), "--period", str(period_s), "--no-real",
         "--no-baseline", "--json"], check=True, capture_output=True, text=True).stdout
    row: dict[str, Any] = json.loads(out)["ticks"][0]
    return {**row, "path": "one-direction", "commit": ONE_DIRECTION_COMMIT[:7]}


def profile_memory(n: int, ticks: int, warm: int, top: int = 25) -> str:
    """cProfile of ``ticks`` memory-path ticks after ``warm``: where a tick's time goes."""
    import cProfile
    import io
    import pstats

    fleet = Fleet(n)
    intake = LatestKpis()
    publisher = MemoryPublisher()
    loop = _loop(intake, publisher, 1.0)
    t0 = 1_800_000_000.0
    prof = cProfile.Profile()
    for k in range(warm + ticks):
        now = t0 + k
        intake.update(fleet.step(now))
        if k >= warm:
            prof.enable()
        loop.tick(now)
        if k >= warm:
            prof.disable()
        fleet.apply(publisher.take())
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--ticks", type=int, default=40, help="timed ticks per run")
    parser.add_argument("--warm", type=int, default=5, help="untimed ticks first")
    parser.add_argument("--no-real", action="store_true", help="skip the InfluxDB/MQTT path")
    parser.add_argument("--period", type=float, default=1.0,
                        help="control period in s (every CPE is due every period)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the per-CPE baseline (no speed-up is reported)")
    parser.add_argument("--one-direction", action="store_true",
                        help="also run the one-direction loop of the repository's history "
                             f"({ONE_DIRECTION_COMMIT[:7]}) on the same fleets (needs git)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile of the memory path's ticks instead (largest "
                             "--cpes, --ticks timed after --warm)")
    args = parser.parse_args(argv)
    tune_gc()  # the process set up as mcw run sets it up
    if args.profile:
        print(profile_memory(max(args.cpes), args.ticks, args.warm))
        return 0
    rows: list[dict[str, Any]] = []
    scratch = tempfile.TemporaryDirectory(prefix="mcw-bench-tick-")
    for n in args.cpes:
        rows.append(run_memory(n, args.ticks, args.warm, args.period))
        if args.one_direction:  # right after, on the same machine state
            rows.append(run_one_direction(n, args.ticks, args.warm, args.period,
                                          Path(scratch.name)))
        if not args.no_baseline:
            rows.append(run_per_cpe(n, max(5, args.ticks // 4), args.warm, args.period))
        if not args.no_real:
            with tempfile.TemporaryDirectory(prefix="mcw-bench-tick-") as tmp:
                rows.append(run_real(n, args.ticks, args.warm, Path(tmp), args.period))
    scratch.cleanup()
    big = max(args.cpes)
    by = {(r["cpes"], r["path"]): r for r in rows}
    mem = by[(big, "memory")]
    doc: dict[str, Any] = {
        "period_s": args.period,
        "ticks": rows,
        "targets": {"memory_p99_ms": TARGET_MEMORY_P99_MS, "real_p99_ms": TARGET_REAL_P99_MS,
                    "speedup": TARGET_SPEEDUP},
        "memory_p99_met": mem["p99_ms"] <= TARGET_MEMORY_P99_MS,
        # A period holds for a fleet when the tick's p99 takes at most half of it: the other
        # half of the core is left to the intake, the subscriber and the InfluxDB flusher.
        "largest_fleet_within_half_period": {
            path: max((r["cpes"] for r in rows if r["path"] == path
                       and r["p99_ms"] <= args.period * 500), default=0)
            for path in ("memory", "real") if any(r["path"] == path for r in rows)},
    }
    if (big, "real") in by:
        doc["real_p99_met"] = by[(big, "real")]["p99_ms"] <= TARGET_REAL_P99_MS
    if (big, "one-direction") in by:
        # Both directions against one, CPU time of the tick (wall time is the machine's load).
        doc["both_over_one_direction_cpu"] = round(
            mem["cpu_ms_p50"] / max(by[(big, "one-direction")]["cpu_ms_p50"], 1e-9), 2)
    if (big, "per-cpe") in by:
        base = by[(big, "per-cpe")]
        doc["speedup_vs_per_cpe"] = round(base["p50_ms"] / max(mem["p50_ms"], 1e-9), 1)
        doc["speedup_met"] = doc["speedup_vs_per_cpe"] >= TARGET_SPEEDUP
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    for r in rows:
        extra = f", intake lag p50 {r['intake_lag_ms_p50']} ms" if "intake_lag_ms_p50" in r else ""
        print(f"{r['cpes']:>6} CPEs {r['path']:>8}: p50 {r['p50_ms']:8.2f} ms  p99 "
              f"{r['p99_ms']:8.2f} ms  cpu p50 {r['cpu_ms_p50']:8.2f} ms  first tick "
              f"{r['first_tick_ms']:8.1f} ms{extra}")
    if "both_over_one_direction_cpu" in doc:
        print(f"both directions cost {doc['both_over_one_direction_cpu']}x the one-direction "
              f"loop's CPU per tick at {big} CPEs")
    if "speedup_vs_per_cpe" in doc:
        print(f"speed-up of the batched loop over per-CPE decisions at {big} CPEs: "
              f"{doc['speedup_vs_per_cpe']}x (target {TARGET_SPEEDUP:g}x)")
    for path, n in doc["largest_fleet_within_half_period"].items():
        print(f"period {args.period:g} s, {path}: the largest fleet measured whose tick p99 "
              f"fits in half the period is {n} CPEs")
    return 0

if __name__ == "__main__":
    sys.exit(main())
