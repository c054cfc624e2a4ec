"""Fan-out benchmark: one Mosquitto, N simulated CPEs over mTLS, one full tick of weights.

What it does
------------
1. Makes (or reuses) a test PKI with one real EC P-256 client certificate per CPE
   (``broker/make-test-pki.sh``), starts Mosquitto with the shipped test config and ACL.
2. Connects N simulated CPE agents over mutual TLS from a few worker processes (asyncio, a
   minimal MQTT 5 client: CONNECT, SUBSCRIBE QoS 1 to its own ``.../weights``, PUBACK).
3. The xApp's real ``MqttWeightPublisher`` publishes one tick of weights to all N CPEs
   (retained, QoS 1), ``--ticks`` times. Timed from the first ``publish()`` call to (a) every
   PUBACK from the broker and (b) the last CPE receiving its message.
4. Verifies that every CPE holds exactly its own latest version (and nothing for another CPE).
5. Baseline in the same run, same broker and connections: the same tick to only the first
   ``--baseline-clients`` CPEs; reported as per-message cost ratio.

Target (issue 5): N = 10,000 and a full tick delivered in <= 1 s.

Examples
--------
    nice python bench/bench_fanout.py                 # 10,000 CPEs
    nice python bench/bench_fanout.py --clients 1000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import resource
import shutil
import ssl
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.mosquitto import MosquittoBroker, Pki, cpe_name, make_pki  # noqa: E402
from xapp.channel import MemoryVersionStore, MqttSettings, MqttWeightPublisher  # noqa: E402
from xapp.weights import WeightDecision  # noqa: E402

# --- a minimal MQTT 5 client for the simulated CPEs -----------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


async def _read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first = (await reader.readexactly(1))[0]
    mult, length = 1, 0
    while True:
        b = (await reader.readexactly(1))[0]
        length += (b & 0x7F) * mult
        if not b & 0x80:
            break
        mult *= 128
    return first, await reader.readexactly(length) if length else b""


def _decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    mult, value = 1, 0
    while True:
        b = buf[pos]
        pos += 1
        value += (b & 0x7F) * mult
        if not b & 0x80:
            return value, pos
        mult *= 128


@dataclass
class _Cpe:
    cpe_id: str
    version: int = 0
    received_at: float = 0.0
    foreign: int = 0
    messages: int = 0


async def _run_cpe(cpe: _Cpe, port: int, ctx: ssl.SSLContext, ready: asyncio.Event,
                   stop: asyncio.Event, keepalive: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                  server_hostname="localhost")
    props = b"\x00"
    connect = (_str("MQTT") + bytes([5, 0x02]) + struct.pack("!H", keepalive) + props
               + _str(f"sim-{cpe.cpe_id}"))
    writer.write(_packet(0x10, connect))
    first, body = await _read_packet(reader)
    if first >> 4 != 2 or body[1] != 0:
        raise RuntimeError(f"{cpe.cpe_id}: CONNACK refused: {body!r}")
    sub = struct.pack("!H", 1) + b"\x00" + _str(f"mcw/v1/cpe/{cpe.cpe_id}/weights") + b"\x01"
    writer.write(_packet(0x82, sub))
    first, body = await _read_packet(reader)
    if first >> 4 != 9 or body[-1] >= 0x80:
        raise RuntimeError(f"{cpe.cpe_id}: SUBACK refused: {body!r}")
    ready.set()
    own_topic = f"mcw/v1/cpe/{cpe.cpe_id}/weights"

    async def ping() -> None:
        while True:
            await asyncio.sleep(keepalive / 2)
            writer.write(b"\xc0\x00")

    pinger = asyncio.create_task(ping())
    try:
        while not stop.is_set():
            first, body = await _read_packet(reader)
            if first >> 4 != 3:
                continue  # PINGRESP and friends
            qos = (first >> 1) & 3
            tlen = struct.unpack_from("!H", body, 0)[0]
            topic = body[2:2 + tlen].decode()
            pos = 2 + tlen
            if qos:
                mid = body[pos:pos + 2]
                pos += 2
                writer.write(b"\x40\x02" + mid)
            plen, pos = _decode_varint(body, pos)
            payload = json.loads(body[pos + plen:])
            now = time.monotonic()
            cpe.messages += 1
            if topic != own_topic or payload.get("cpe_id") != cpe.cpe_id:
                cpe.foreign += 1
                continue
            cpe.version = max(cpe.version, int(payload["version"]))
            cpe.received_at = now
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        pinger.cancel()
        writer.close()


def _worker(ids: list[str], port: int, pki_root: str, conn: Connection, progress: Any,
            concurrency: int, keepalive: int) -> None:
    """One process: connect its CPEs, report readiness, answer ``report`` / ``stop``."""
    pki = Pki(Path(pki_root))

    async def main() -> None:
        cpes = [_Cpe(c) for c in ids]
        stop = asyncio.Event()
        sem = asyncio.Semaphore(concurrency)
        tasks = []

        async def start(cpe: _Cpe) -> None:
            cert, key = pki.cert(cpe.cpe_id)
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(pki.ca))
            ctx.load_cert_chain(str(cert), str(key))
            ready = asyncio.Event()
            async with sem:
                task = asyncio.create_task(_run_cpe(cpe, port, ctx, ready, stop, keepalive))
                tasks.append(task)
                done, _ = await asyncio.wait([task, asyncio.create_task(ready.wait())],
                                            return_when=asyncio.FIRST_COMPLETED)
                if task in done:
                    task.result()  # raises the connection error
            with progress.get_lock():
                progress.value += 1

        await asyncio.gather(*(start(c) for c in cpes))
        conn.send(("ready", len(cpes)))
        loop = asyncio.get_running_loop()
        while True:
            cmd = await loop.run_in_executor(None, conn.recv)
            if cmd == "report":
                conn.send(("report", [(c.cpe_id, c.version, c.received_at, c.foreign,
                                       c.messages) for c in cpes]))
            else:
                stop.set()
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                conn.send(("stopped", None))
                return

    try:
        asyncio.run(main())
    except Exception as exc:  # report instead of dying silently
        conn.send(("error", repr(exc)))


# --- the benchmark ------------------------------------------------------------------------------


@dataclass
class TickResult:
    clients: int
    publish_calls_s: float
    acked_s: float
    delivered_s: float
    delivery_p50_s: float
    delivery_p99_s: float
    msgs_per_s: float


def raise_nofile(need: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return int(target)


def _decision(i: int, tick: int) -> WeightDecision:
    w = {"nr": 1 + (i + tick) % 60, "wifi": 100, "lifi": 1}
    return WeightDecision(weights=w, shares={}, aggregate_mbps=0.0, usable=frozenset(w),
                          changed=True, reason=f"bench tick {tick}")


def _collect(conns: list[Connection]) -> dict[str, tuple[int, float, int, int]]:
    for c in conns:
        c.send("report")
    out: dict[str, tuple[int, float, int, int]] = {}
    for c in conns:
        kind, rows = c.recv()
        if kind != "report":
            raise RuntimeError(f"worker failed: {rows}")
        for cpe_id, version, at, foreign, messages in rows:
            out[cpe_id] = (version, at, foreign, messages)
    return out


def run_tick(pub: MqttWeightPublisher, ids: list[str], tick: int, conns: list[Connection],
             expected: dict[str, int], timeout_s: float) -> TickResult:
    pub.prepare(ids)  # one version-store write for the whole tick
    t0 = time.monotonic()
    for i, cpe_id in enumerate(ids):
        expected[cpe_id] = pub.publish(cpe_id, _decision(i, tick), mode="load_balancing",
                                       lease_s=30)
    t_calls = time.monotonic()
    if not pub.flush(timeout_s):
        raise RuntimeError(f"tick {tick}: broker did not acknowledge within {timeout_s} s")
    t_acked = time.monotonic()
    # Wait for delivery: poll the workers until every CPE holds its expected version.
    deadline = time.monotonic() + timeout_s
    while True:
        seen = _collect(conns)
        missing = [c for c in ids if seen[c][0] != expected[c]]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if missing:
        raise RuntimeError(f"tick {tick}: {len(missing)} CPEs lack their latest version, "
                           f"e.g. {missing[:3]}")
    lat = sorted(seen[c][1] - t0 for c in ids)
    delivered = lat[-1]
    return TickResult(
        clients=len(ids), publish_calls_s=t_calls - t0, acked_s=t_acked - t0,
        delivered_s=delivered, delivery_p50_s=lat[len(lat) // 2],
        delivery_p99_s=lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        msgs_per_s=len(ids) / delivered if delivered > 0 else float("inf"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=10_000, help="simulated CPEs (default 10000)")
    ap.add_argument("--workers", type=int, default=4,
                    help="client processes (default 4; asyncio inside each)")
    ap.add_argument("--ticks", type=int, default=3, help="full ticks to publish (default 3)")
    ap.add_argument("--baseline-clients", type=int, default=100,
                    help="CPEs in the baseline tick (default 100)")
    ap.add_argument("--concurrency", type=int, default=64,
                    help="TLS handshakes in progress per worker (default 64)")
    ap.add_argument("--workdir", type=Path,
                    default=Path(tempfile.gettempdir()) / "mcw-bench-fanout",
                    help="PKI cache and broker files (the PKI is reused between runs)")
    ap.add_argument("--target-s", type=float, default=1.0, help="tick target (default 1.0 s)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.clients < 1 or args.workers < 1 or args.ticks < 1 or args.baseline_clients < 1:
        ap.error("--clients, --workers, --ticks and --baseline-clients must be >= 1")
    quiet = args.json

    nofile = raise_nofile(args.clients + 1024)
    if nofile < args.clients + 256:
        print(f"open-file limit {nofile} is too low for {args.clients} clients", file=sys.stderr)
        return 2

    t = time.monotonic()
    pki = make_pki(args.workdir / "pki", n_cpes=args.clients)
    pki_s = time.monotonic() - t
    ids = [cpe_name(i) for i in range(1, args.clients + 1)]
    broker_dir = args.workdir / f"broker-{os.getpid()}"
    broker = MosquittoBroker(pki, broker_dir).start()
    procs: list[mp.process.BaseProcess] = []
    conns: list[Connection] = []
    ctx = mp.get_context("spawn")
    try:
        progress = ctx.Value("i", 0)
        chunks = [ids[i::args.workers] for i in range(args.workers)]
        t = time.monotonic()
        for chunk in chunks:
            if not chunk:
                continue
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(chunk, broker.port, str(pki.root), child,
                                                  progress, args.concurrency, 300), daemon=True)
            p.start()
            procs.append(p)
            conns.append(parent)
        with tqdm(total=args.clients, desc="mTLS connect+subscribe", unit="cpe",
                  disable=quiet, file=sys.stderr) as bar:
            pending = set(range(len(conns)))
            while pending:
                for i in list(pending):
                    if conns[i].poll():
                        kind, info = conns[i].recv()
                        if kind != "ready":
                            raise RuntimeError(f"worker {i} failed: {info}")
                        pending.discard(i)
                bar.update(progress.value - bar.n)
                time.sleep(0.1)
            bar.update(progress.value - bar.n)
        connect_s = time.monotonic() - t

        cert, key = pki.cert("mcw-xapp")
        settings = MqttSettings(host="127.0.0.1", port=broker.port, ca_file=str(pki.ca),
                                cert_file=str(cert), key_file=str(key), client_id="bench-xapp")
        pub = MqttWeightPublisher(settings, MemoryVersionStore(), version_block=1000).start()
        if not pub.wait_connected(30):
            raise RuntimeError("publisher did not connect")
        expected: dict[str, int] = {}
        timeout = max(30.0, args.clients / 200)
        # Warm-up: the baseline clients once (JIT-free Python, but caches and TLS buffers).
        base_ids = ids[:min(args.baseline_clients, len(ids))]
        run_tick(pub, base_ids, 0, conns, expected, timeout)
        ticks = [run_tick(pub, ids, k, conns, expected, timeout)
                 for k in tqdm(range(1, args.ticks + 1), desc="full ticks", disable=quiet,
                               file=sys.stderr)]
        baselines = [run_tick(pub, base_ids, 100 + k, conns, expected, timeout)
                     for k in range(3)]
        final = _collect(conns)
        wrong = [c for c in ids if final[c][0] != expected[c]]
        foreign = sum(v[2] for v in final.values())
        pub.stop()
    finally:
        for c in conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                c.send("stop")
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        broker.stop()
        shutil.rmtree(broker_dir, ignore_errors=True)

    best = min(ticks, key=lambda r: r.delivered_s)
    median_delivered = statistics.median(r.delivered_s for r in ticks)
    base = min(baselines, key=lambda r: r.delivered_s)
    per_msg_full = median_delivered / args.clients
    per_msg_base = base.delivered_s / base.clients
    result = {
        "clients": args.clients, "workers": args.workers, "ticks": args.ticks,
        "pki_s": round(pki_s, 2), "connect_s": round(connect_s, 2),
        "connect_rate_per_s": round(args.clients / connect_s, 1),
        "tick_delivered_median_s": round(median_delivered, 4),
        "tick_delivered_best_s": round(best.delivered_s, 4),
        "target_s": args.target_s,
        "meets_target": median_delivered <= args.target_s,
        "every_cpe_has_its_latest_version": not wrong,
        "wrong_versions": len(wrong), "foreign_messages": foreign,
        "baseline_clients": base.clients,
        "baseline_tick_s": round(base.delivered_s, 4),
        "per_message_us_full": round(per_msg_full * 1e6, 1),
        "per_message_us_baseline": round(per_msg_base * 1e6, 1),
        "per_message_cost_ratio_full_vs_baseline": round(per_msg_full / per_msg_base, 2),
        "ticks_detail": [asdict(r) for r in ticks],
        "baseline_detail": [asdict(r) for r in baselines],
        "publisher": asdict(pub.stats),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"fan-out over mTLS, one mosquitto, {args.clients} CPE clients "
              f"({args.workers} worker processes)")
        print(f"  PKI ready in {pki_s:.1f} s; connect+subscribe {connect_s:.1f} s "
              f"({result['connect_rate_per_s']}/s)")
        for k, r in enumerate(ticks, 1):
            print(f"  tick {k}: publish() calls {r.publish_calls_s:.3f} s, broker acks "
                  f"{r.acked_s:.3f} s, all delivered {r.delivered_s:.3f} s "
                  f"(p50 {r.delivery_p50_s:.3f}, p99 {r.delivery_p99_s:.3f})")
        print(f"  full tick (median) {median_delivered:.3f} s vs target {args.target_s} s: "
              f"{'MET' if result['meets_target'] else 'MISSED'}")
        print(f"  every CPE holds its own latest version: {not wrong} "
              f"(wrong {len(wrong)}, foreign messages {foreign})")
        print(f"  baseline: same tick to {base.clients} CPEs in {base.delivered_s:.4f} s; "
              f"per-message {result['per_message_us_full']} us (full) vs "
              f"{result['per_message_us_baseline']} us (baseline), ratio "
              f"{result['per_message_cost_ratio_full_vs_baseline']}")
    return 0 if not wrong and foreign == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
