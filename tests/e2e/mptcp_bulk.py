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


def mptcp_socket() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_MPTCP)


def connect(addr: str, port: int, timeout_s: float) -> socket.socket | None:
    """An MPTCP connection to ``addr:port`` once its server listens (it starts in parallel),
    within ``timeout_s``; None if it never did."""
    socks: list[socket.socket] = []

    def connected() -> bool:
        # A fresh socket each time: one whose connect failed may fall back to plain TCP.
        sock = mptcp_socket()
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
    args = ap.parse_args(argv)
    if args.mode == "serve":
        with mptcp_socket() as ls:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind((args.addr, args.port))
            ls.listen(1)
            conn, _ = ls.accept()
            # The listener stays open: the CPE's joins (one per further WAT) arrive on it.
            run(conn, args.out, args.seconds)
        return 0
    sock = connect(args.addr, args.port, 5.0)
    if sock is None:
        return 1
    run(sock, args.out, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
