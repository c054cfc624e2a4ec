"""The real-stack bench's small flows, run inside a namespace with ``ip netns exec``.

``echo-serve`` / ``echo-connect``: a request/response flow on its own MPTCP connection beside
the bulk transfer (a control loop: ``--size`` bytes every ``--every-ms``); the client writes
``{"t": wall clock s, "rtt_ms": ...}`` per answer to ``--out``.  A request waits for the answer
to the one before, so a stall shows as one long RTT, not as lost samples.

``probe-sink`` / ``probe-send``: the paper's capacity probe (section 6.5: iperf3 with parallel
TCP flows on one WAT).  The sender opens ``--flows`` plain TCP connections from one WAT's
address, sends for ``--seconds`` and prints the Mbit/s the peer acknowledged (bytes written
minus what is still in the socket's send queue, ``SIOCOUTQ``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import select
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from tests.e2e.mptcp_bulk import CONGESTION_CONTROL, congestion_control, connect, mptcp_socket

SIOCOUTQ = 0x5411
CHUNK = 64 * 1024


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("the peer closed")
        buf += part
    return buf


def echo_serve(addr: str, port: int, size: int, cc: str) -> int:
    with mptcp_socket(cc) as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(1)
        conn, _ = ls.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                conn.sendall(_read_exactly(conn, size))
        except (ConnectionError, OSError):
            return 0


def echo_connect(addr: str, port: int, size: int, every_ms: float, out: Path,
                 seconds: float, cc: str) -> int:
    sock = connect(addr, port, 10.0, cc)
    if sock is None:
        return 1
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = b"r" * size
    until = time.time() + seconds
    with out.open("a") as f:
        nxt = time.monotonic()
        while time.time() < until:
            t0 = time.monotonic()
            try:
                sock.sendall(payload)
                _read_exactly(sock, size)
            except (ConnectionError, OSError) as exc:
                print(f"flows: echo: {exc}", file=sys.stderr)
                return 1
            f.write(json.dumps({"t": round(time.time(), 3),
                                "rtt_ms": round((time.monotonic() - t0) * 1000, 3)}) + "\n")
            f.flush()
            nxt = max(nxt + every_ms / 1000, time.monotonic())
            time.sleep(max(0.0, nxt - time.monotonic()))  # the flow's pace: one every every_ms
    return 0


def probe_sink(addr: str, port: int) -> int:
    """Accept and discard, many connections at once, until killed."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(64)
    socks: list[socket.socket] = [ls]
    buf = bytearray(CHUNK)
    while True:
        ready, _, _ = select.select(socks, [], [], 1.0)
        for s in ready:
            if s is ls:
                socks.append(ls.accept()[0])
                continue
            try:
                n = s.recv_into(buf)
            except OSError:
                n = 0
            if n == 0:
                socks.remove(s)
                s.close()


def probe_send(src: str, dst: str, port: int, flows: int, seconds: float, cc: str) -> int:
    """``flows`` TCP connections from ``src``; prints the acknowledged Mbit/s of all."""
    written = [0] * flows
    socks: list[socket.socket] = []
    for _ in range(flows):
        s = congestion_control(socket.socket(socket.AF_INET, socket.SOCK_STREAM), cc)
        s.bind((src, 0))
        s.settimeout(2.0)
        try:
            s.connect((dst, port))
        except OSError as exc:
            print(json.dumps({"mbps": 0.0, "error": str(exc)}))
            return 0
        socks.append(s)
    stop = time.monotonic() + seconds
    data = b"\0" * CHUNK

    def pump(i: int) -> None:
        s = socks[i]
        s.settimeout(0.2)
        while time.monotonic() < stop:
            try:
                written[i] += s.send(data)
            except TimeoutError:
                continue
            except OSError:
                return

    t0 = time.monotonic()
    threads = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(flows)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 1)
    elapsed = time.monotonic() - t0
    unacked = 0
    for s in socks:
        with contextlib.suppress(OSError):
            unacked += struct.unpack("i", fcntl.ioctl(s.fileno(), SIOCOUTQ, b"\0" * 4))[0]
        s.close()
    print(json.dumps({"mbps": round(max(0, sum(written) - unacked) * 8 / 1e6 / elapsed, 3)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["echo-serve", "echo-connect", "probe-sink", "probe-send"])
    ap.add_argument("--addr", required=True, help="listen or connect address")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--src", help="probe-send: the WAT's own address")
    ap.add_argument("--size", type=int, default=200, help="echo: bytes a request (200)")
    ap.add_argument("--every-ms", type=float, default=20.0, help="echo: request period (20)")
    ap.add_argument("--flows", type=int, default=10, help="probe-send: parallel flows (10)")
    ap.add_argument("--seconds", type=float, default=3600.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cc", default=CONGESTION_CONTROL,
                    help=f"the connections' congestion control (default {CONGESTION_CONTROL})")
    a = ap.parse_args(argv)
    if a.mode == "echo-serve":
        return echo_serve(a.addr, a.port, a.size, a.cc)
    if a.mode == "echo-connect":
        if a.out is None:
            ap.error("echo-connect needs --out")
        return echo_connect(a.addr, a.port, a.size, a.every_ms, a.out, a.seconds, a.cc)
    if a.mode == "probe-sink":
        return probe_sink(a.addr, a.port)
    if a.src is None:
        ap.error("probe-send needs --src")
    return probe_send(a.src, a.addr, a.port, a.flows, a.seconds, a.cc)


if __name__ == "__main__":
    raise SystemExit(main())
