"""Bulk traffic both ways on ONE MPTCP connection, delivered throughput per second.

Run in a namespace (``ip netns exec``): ``serve`` at the proxy (the passive end, as the CPE's
in-kernel path manager opens the subflows), ``connect`` at the CPE.  Each end sends as fast as
the connection takes and counts what it *receives*, so the proxy's file is the delivered uplink
and the CPE's the delivered downlink.  Each line of ``--out`` is ``{"t": wall clock s, "mbps":
delivered over the last second}``, flushed at once so the orchestrator reads it live."""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import threading
import time
from pathlib import Path

from tests.support.polling import wait_until

CHUNK = 64 * 1024


def _send(sock: socket.socket, stop: threading.Event) -> None:
    data = b"\0" * CHUNK
    try:
        while not stop.is_set():
            sock.sendall(data)
    except OSError as e:
        print(f"mptcp_bulk: send: {e}", file=sys.stderr)
        stop.set()


def _receive(sock: socket.socket, out: Path, stop: threading.Event, until: float) -> None:
    """Count received bytes per whole second of wall clock until ``until`` or the peer closes;
    a second without data is written as 0 (a path outage must show, not vanish)."""
    buf = bytearray(CHUNK)
    second, count = int(time.time()), 0
    with out.open("a") as f:
        while not stop.is_set() and time.time() < until:
            # select, not a socket timeout: a timeout would also apply to the sender's sendall.
            n = -1
            if select.select([sock], [], [], 0.5)[0]:
                try:
                    n = sock.recv_into(buf)
                except OSError as e:
                    print(f"mptcp_bulk: receive: {e}", file=sys.stderr)
                    break
                if n == 0:
                    print("mptcp_bulk: the peer closed", file=sys.stderr)
                    break
            now = int(time.time())
            while second < now:
                f.write(json.dumps({"t": second + 1, "mbps": round(count * 8 / 1e6, 3)}) + "\n")
                second, count = second + 1, 0
            f.flush()
            count += max(n, 0)
    stop.set()


def run(sock: socket.socket, out: Path, seconds: float) -> None:
    stop = threading.Event()
    sender = threading.Thread(target=_send, args=(sock, stop), daemon=True)
    sender.start()
    _receive(sock, out, stop, time.time() + seconds)
    sock.close()


#: The congestion control of every connection the e2e and real-stack runs open: mainline's
#: default.  Set per socket because a host may default to another one, and the one this
#: project is measured on defaults to BBR: with BBR, a connection over a 16 and a 40 Mbit/s
#: path swung between 1 and 65 Mbit/s, second by second, for every scheduling policy (a
#: subflow starved by the connection's shared send buffer sampled an app-limited bandwidth
#: and paced itself at a quarter of its path for seconds); with CUBIC the same connection held
#: 50-51 of 56 Mbit/s (docs/realstack.md).
CONGESTION_CONTROL = "cubic"


def congestion_control(sock: socket.socket, cc: str) -> socket.socket:
    """``sock`` with ``cc`` as its congestion control (MPTCP passes it on to every subflow)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    return sock


def mptcp_socket(cc: str = CONGESTION_CONTROL) -> socket.socket:
    return congestion_control(
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_MPTCP), cc)


def connect(addr: str, port: int, timeout_s: float,
            cc: str = CONGESTION_CONTROL) -> socket.socket | None:
    """An MPTCP connection to ``addr:port`` once its server listens (it starts in parallel),
    within ``timeout_s``; None if it never did."""
    socks: list[socket.socket] = []

    def connected() -> bool:
        # A fresh socket each time: one whose connect failed may fall back to plain TCP.
        sock = mptcp_socket(cc)
        try:
            sock.connect((addr, port))
        except OSError:
            sock.close()
            return False
        socks.append(sock)
        return True

    return socks[0] if wait_until(connected, timeout_s, 0.1) else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("mode", choices=["serve", "connect"])
    ap.add_argument("--addr", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--cc", default=CONGESTION_CONTROL,
                    help=f"the subflows' congestion control (default {CONGESTION_CONTROL})")
    args = ap.parse_args(argv)
    if args.mode == "serve":
        with mptcp_socket(args.cc) as ls:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind((args.addr, args.port))
            ls.listen(1)
            conn, _ = ls.accept()
            # The listener stays open: the CPE's joins (one per further WAT) arrive on it.
            run(conn, args.out, args.seconds)
        return 0
    sock = connect(args.addr, args.port, 5.0, args.cc)
    if sock is None:
        return 1
    run(sock, args.out, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
