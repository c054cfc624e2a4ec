"""Fan-out benchmark: one Mosquitto, N simulated CPEs over mTLS, one full tick of weights.

What it does
------------
1. Makes (or reuses) a test PKI with one real EC P-256 client certificate per CPE
   (``broker/make-test-pki.sh``), starts Mosquitto with the shipped test config and ACL.
2. Connects N simulated CPE agents over mutual TLS from a few worker processes (a minimal
   MQTT 5 client on one epoll loop per process: CONNECT, SUBSCRIBE QoS 1 to its own
   ``.../weights``, PUBACK per message), kept lean so the figures measure the publisher and
   the broker rather than the simulation.
3. The xApp's real ``MqttWeightPublisher`` publishes one tick of weights to all N CPEs
   (retained, QoS 1), ``--ticks`` times, with one ``publish_many()`` call per tick
   (``--api single``: one ``publish()`` call per CPE). Timed from the first publish call to
   (a) every PUBACK from the broker and (b) the last CPE receiving its message; each worker
   reports as soon as all its CPEs hold the tick's message, so nothing polls during a tick.
   CPU seconds of the publisher process, the broker and the client processes are measured
   per tick from ``/proc``.
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
import contextlib
import json
import multiprocessing as mp
import os
import resource
import select
import shutil
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.mosquitto import MosquittoBroker, Pki, cpe_name, make_pki  # noqa: E402
from xapp.adapters.mqtt import MemoryVersionStore, MqttSettings, MqttWeightPublisher  # noqa: E402
from xapp.adapters.mqtt.connection import (  # noqa: E402
    PacketReader,
    connect_packet,
    encode_varint,
    parse_properties,
)
from xapp.core.ports import WeightBatch  # noqa: E402
from xapp.core.weights import WeightDecision  # noqa: E402

# --- the simulated CPEs: lean, so the figures measure the publisher and the broker --------------
#
# Each worker process connects its CPEs with blocking TLS handshakes from a small thread pool
# (the handshake releases the GIL), then serves every socket from one epoll loop: read what is
# there, split MQTT packets, answer each PUBLISH with its PUBACK. No asyncio streams (their
# TLS layer is pure Python and cost the clients more CPU than the broker used).


def _subscribe_packet(topic: str) -> bytes:
    """SUBSCRIBE (packet id 1, no properties) to ``topic`` at QoS 1."""
    t = topic.encode()
    body = struct.pack("!H", 1) + b"\x00" + struct.pack("!H", len(t)) + t + b"\x01"
    return b"\x82" + encode_varint(len(body)) + body


def _recv_packet(sock: ssl.SSLSocket, reader: PacketReader,
                 pending: list[tuple[int, bytes]]) -> tuple[int, bytes]:
    """The next packet (blocking); what arrived with it waits in ``pending``."""
    while not pending:
        data = sock.recv(4096)
        if not data:
            raise ConnectionError("broker closed the connection")
        pending.extend(reader.feed(data))
    return pending.pop(0)


@dataclass
class _Cpe:
    cpe_id: str
    version: int = 0
    received_at: float = 0.0
    foreign: int = 0
    messages: int = 0
    tick: int = -1
    #: [tick, CPEs still missing it] shared by the CPEs a tick waits for, else None.
    awaited: list[int] | None = None
    sock: ssl.SSLSocket | None = None
    reader: PacketReader | None = None
    topic: bytes = b""


def _connect_cpe(cpe: _Cpe, port: int, pki: Pki, keepalive: int) -> None:
    cert, key = pki.cert(cpe.cpe_id)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(pki.ca))
    ctx.load_cert_chain(str(cert), str(key))
    raw = socket.create_connection(("127.0.0.1", port), timeout=60)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock = ctx.wrap_socket(raw, server_hostname="localhost")
    reader, pending = PacketReader(), list[tuple[int, bytes]]()
    sock.sendall(connect_packet(f"sim-{cpe.cpe_id}", keepalive))
    first, body = _recv_packet(sock, reader, pending)
    if first >> 4 != 2 or body[1] != 0:
        raise RuntimeError(f"{cpe.cpe_id}: CONNACK refused: {body!r}")
    cpe.topic = f"mcw/v1/cpe/{cpe.cpe_id}/weights".encode()
    sock.sendall(_subscribe_packet(cpe.topic.decode()))
    first, body = _recv_packet(sock, reader, pending)
    if first >> 4 != 9 or body[-1] >= 0x80:
        raise RuntimeError(f"{cpe.cpe_id}: SUBACK refused: {body!r}")
    if pending:
        raise RuntimeError(f"{cpe.cpe_id}: unexpected packets before any weights: {pending!r}")
    sock.setblocking(False)
    cpe.sock, cpe.reader = sock, reader


def _on_publish(cpe: _Cpe, first: int, body: bytes, now: float) -> bytes:
    """Record one PUBLISH; the PUBACK to send (empty for QoS 0)."""
    tlen = (body[0] << 8) | body[1]
    topic = body[2:2 + tlen]
    pos = 2 + tlen
    ack = b""
    if first & 0x06:
        ack = b"\x40\x02" + body[pos:pos + 2]
        pos += 2
    _, pos = parse_properties(body, pos)
    doc = json.loads(body[pos:])
    cpe.messages += 1
    if topic != cpe.topic or doc.get("cpe_id") != cpe.cpe_id:
        cpe.foreign += 1
        return ack
    cpe.version = max(cpe.version, int(doc["version"]))
    cpe.received_at = now
    reason = doc["ul"].get("reason", "")  # the CPE agent's set (mcw.weights.v2)
    if reason.startswith("bench tick "):
        cpe.tick = max(cpe.tick, int(reason[11:]))
        if cpe.awaited and cpe.tick >= cpe.awaited[0]:
            cpe.awaited[1] -= 1  # one CPE fewer that the current tick waits for
            cpe.awaited = None
    return ack


def _worker(ids: list[str], port: int, pki_root: str, conn: Connection, progress: Any,
            concurrency: int, keepalive: int) -> None:
    """One process: connect its CPEs, then serve them; answers ``expect`` / ``report`` / stop.

    ``("expect", tick, ids)``: reply ``("done", [(cpe_id, version, received_at), ...])`` as
    soon as every listed CPE received the message of that tick (or at once if they have).
    """
    try:
        pki = Pki(Path(pki_root))
        cpes = {c: _Cpe(c) for c in ids}

        def one(cpe: _Cpe) -> None:
            _connect_cpe(cpe, port, pki, keepalive)
            with progress.get_lock():
                progress.value += 1

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for fut in [pool.submit(one, c) for c in cpes.values()]:
                fut.result()
        # epoll directly (no selectors layer): fd -> CPE, None for the command pipe.
        poller = select.epoll()
        by_fd: dict[int, Any] = {conn.fileno(): None}
        poller.register(conn.fileno(), select.EPOLLIN)
        for cpe in cpes.values():
            assert cpe.sock is not None
            by_fd[cpe.sock.fileno()] = cpe
            poller.register(cpe.sock.fileno(), select.EPOLLIN)
        conn.send(("ready", len(cpes)))
        waiting: tuple[list[int], list[_Cpe]] | None = None
        last_ping = time.monotonic()
        while True:
            for fd, _ in poller.poll(1.0):
                cpe = by_fd[fd]
                if cpe is None:
                    cmd = conn.recv()
                    if cmd[0] == "expect":
                        # A counter, not a scan of every CPE after every event (that was
                        # quadratic and cost the clients more than the messages).
                        members = [cpes[c] for c in cmd[2]]
                        awaited = [cmd[1], 0]
                        for c in members:
                            c.awaited = awaited if c.tick < cmd[1] else None
                            awaited[1] += c.awaited is not None
                        waiting = (awaited, members)
                    elif cmd[0] == "report":
                        conn.send(("report", [(c.cpe_id, c.version, c.received_at, c.foreign,
                                               c.messages) for c in cpes.values()]))
                    else:
                        for c in cpes.values():
                            if c.sock is not None:
                                c.sock.close()
                        conn.send(("stopped", None))
                        return
                    continue
                now = time.monotonic()
                sock, reader = cpe.sock, cpe.reader
                # One read per readiness event (epoll is level-triggered: what is left in
                # the kernel wakes us again), then only what OpenSSL already decrypted.
                try:
                    data = sock.recv(65536)
                    while sock.pending():
                        data += sock.recv(65536)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                if not data:
                    raise ConnectionError(f"{cpe.cpe_id}: broker closed the connection")
                acks = b"".join([_on_publish(cpe, f, b, now) for f, b in reader.feed(data)
                                 if f >> 4 == 3])
                if acks:
                    try:
                        sock.send(acks)  # a few bytes into an idle socket: does not block
                    except (ssl.SSLWantWriteError, BlockingIOError):
                        sock.setblocking(True)
                        sock.sendall(acks)
                        sock.setblocking(False)
            if waiting is not None and waiting[0][1] == 0:
                conn.send(("done", [(c.cpe_id, c.version, c.received_at) for c in waiting[1]]))
                waiting = None
            if time.monotonic() - last_ping > keepalive / 3:
                last_ping = time.monotonic()
                for c in cpes.values():
                    assert c.sock is not None
                    c.sock.setblocking(True)
                    c.sock.sendall(b"\xc0\x00")
                    c.sock.setblocking(False)
    except Exception as exc:  # report instead of dying silently
        conn.send(("error", repr(exc)))


# --- the benchmark ------------------------------------------------------------------------------


@dataclass
class TickResult:
    clients: int
    #: First publish call until the calls returned (payloads built, validated, queued).
    publish_calls_s: float
    #: First publish call until the broker acknowledged every message.
    acked_s: float
    #: First publish call until the last CPE received its message (the target figure).
    delivered_s: float
    delivery_p50_s: float
    delivery_p99_s: float
    msgs_per_s: float
    #: CPU seconds used during the tick by the publisher process, the broker, the clients.
    cpu_publisher_s: float
    cpu_broker_s: float
    cpu_clients_s: float


def raise_nofile(need: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return int(target)


def _decision(i: int, tick: int) -> WeightDecision:
    w = {"nr": 1 + (i + tick) % 60, "wifi": 100, "lifi": 1}
    return WeightDecision(weights=w, shares={}, aggregate_mbps=0.0, usable=frozenset(w),
                          changed=True, reason=f"bench tick {tick}")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (``/proc/PID/stat``), children excluded."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _collect(conns: list[Connection]) -> dict[str, tuple[int, float, int, int]]:
    for c in conns:
        c.send(("report",))
    out: dict[str, tuple[int, float, int, int]] = {}
    for c in conns:
        kind, rows = c.recv()
        if kind != "report":
            raise RuntimeError(f"worker failed: {rows}")
        for cpe_id, version, at, foreign, messages in rows:
            out[cpe_id] = (version, at, foreign, messages)
    return out


@dataclass
class Fleet:
    """The worker processes and which CPEs each one serves."""

    conns: list[Connection]
    pids: list[int]
    owner: dict[str, int]  # cpe_id -> index into conns
    broker_pid: int


def run_tick(pub: MqttWeightPublisher, ids: list[str], tick: int, fleet: Fleet,
             expected: dict[str, int], timeout_s: float, api: str) -> TickResult:
    """Publish one tick to ``ids``; wait until each of them holds this tick's version."""
    pub.prepare(ids)  # one version-store write for the whole tick
    per_worker: dict[int, list[str]] = {}
    for c in ids:
        per_worker.setdefault(fleet.owner[c], []).append(c)
    for w, chunk in per_worker.items():
        fleet.conns[w].send(("expect", tick, chunk))
    items = [(cpe_id, _decision(i, tick), "load_balancing", 30.0)
             for i, cpe_id in enumerate(ids)]
    batch = WeightBatch.same([(c, d, m) for c, d, m, _ in items], lease_s=30.0)
    cpu0 = (os.times(), _cpu_s(fleet.broker_pid), sum(_cpu_s(p) for p in fleet.pids))
    t0 = time.monotonic()
    if api == "many":
        result = pub.publish_many(batch)
        if result.errors:
            raise RuntimeError(f"refused: {list(result.errors.items())[:3]}")
        expected.update(result.versions)
    else:
        for cpe_id, decision, mode, lease in items:
            expected[cpe_id] = pub.publish(cpe_id, decision, mode=mode, lease_s=lease)
    t_calls = time.monotonic()
    if not pub.flush(timeout_s):
        raise RuntimeError(f"tick {tick}: broker did not acknowledge within {timeout_s} s")
    t_acked = time.monotonic()
    rows: list[tuple[str, int, float]] = []
    for w in per_worker:
        if not fleet.conns[w].poll(timeout_s):
            raise RuntimeError(f"tick {tick}: worker {w} saw no delivery within {timeout_s} s")
        kind, got = fleet.conns[w].recv()
        if kind != "done":
            raise RuntimeError(f"worker {w} failed: {got}")
        rows += got
    t1 = os.times()
    cpu_pub = (t1.user + t1.system) - (cpu0[0].user + cpu0[0].system)
    cpu_broker = _cpu_s(fleet.broker_pid) - cpu0[1]
    cpu_clients = sum(_cpu_s(p) for p in fleet.pids) - cpu0[2]
    wrong = [c for c, v, _ in rows if v != expected[c]]
    if wrong:
        raise RuntimeError(f"tick {tick}: {len(wrong)} CPEs lack their latest version, "
                           f"e.g. {wrong[:3]}")
    lat = sorted(at - t0 for _, _, at in rows)
    delivered = lat[-1]
    return TickResult(
        clients=len(ids), publish_calls_s=t_calls - t0, acked_s=t_acked - t0,
        delivered_s=delivered, delivery_p50_s=lat[len(lat) // 2],
        delivery_p99_s=lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        msgs_per_s=len(ids) / delivered if delivered > 0 else float("inf"),
        cpu_publisher_s=round(cpu_pub, 3), cpu_broker_s=round(cpu_broker, 3),
        cpu_clients_s=round(cpu_clients, 3))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=10_000, help="simulated CPEs (default 10000)")
    ap.add_argument("--workers", type=int, default=2,
                    help="client processes (default 2, one per core; one epoll loop inside "
                         "each: more processes cost more CPU in switching)")
    ap.add_argument("--ticks", type=int, default=5,
                    help="full ticks to publish; the median is reported (default 5)")
    ap.add_argument("--baseline-clients", type=int, default=100,
                    help="CPEs in the baseline tick (default 100)")
    ap.add_argument("--concurrency", type=int, default=16,
                    help="TLS handshakes in progress per worker (default 16)")
    ap.add_argument("--api", choices=("many", "single"), default="many",
                    help="publish a tick with one publish_many() call (default) or one "
                         "publish() call per CPE")
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
        owner = {c: w for w, chunk in enumerate(chunks) for c in chunk}
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
        assert broker.proc is not None
        fleet = Fleet(conns, [p.pid for p in procs if p.pid is not None], owner,
                      broker.proc.pid)

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
        run_tick(pub, base_ids, 0, fleet, expected, timeout, args.api)
        ticks = [run_tick(pub, ids, k, fleet, expected, timeout, args.api)
                 for k in tqdm(range(1, args.ticks + 1), desc="full ticks", disable=quiet,
                               file=sys.stderr)]
        baselines = [run_tick(pub, base_ids, 100 + k, fleet, expected, timeout, args.api)
                     for k in range(3)]
        final = _collect(conns)
        wrong = [c for c in ids if final[c][0] != expected[c]]
        foreign = sum(v[2] for v in final.values())
        pub.stop()
    finally:
        for c in conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                c.send(("stop",))
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
        "api": args.api,
        "cpu_median_s": {
            part: round(statistics.median(getattr(r, f"cpu_{part}_s") for r in ticks), 3)
            for part in ("publisher", "broker", "clients")},
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
            print(f"  tick {k}: publish calls {r.publish_calls_s:.3f} s, broker acks "
                  f"{r.acked_s:.3f} s, all delivered {r.delivered_s:.3f} s "
                  f"(p50 {r.delivery_p50_s:.3f}, p99 {r.delivery_p99_s:.3f}); CPU s: "
                  f"publisher {r.cpu_publisher_s}, broker {r.cpu_broker_s}, "
                  f"clients {r.cpu_clients_s}")
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
