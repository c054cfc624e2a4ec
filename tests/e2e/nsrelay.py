"""The broker's loopback port, reachable from inside a network namespace, and the agents'
metrics ports reachable from outside.

``make e2e``'s Mosquitto listens on 127.0.0.1 of the initial namespace; the agents of the real
MPTCP connection live in their own namespaces, whose loopback is their own.  This process opens a
listener on 127.0.0.1:PORT *inside* the namespace (``setns`` for the moment of ``bind``), then
carries every connection's bytes to 127.0.0.1:PORT outside.  It only copies bytes: TLS, the
client certificate and the ACL are between the agent and Mosquitto, as on a site where a NAT or
a load balancer stands between them.

``--expose NETNS=INNER:OUTER`` is the other way round: a listener on 127.0.0.1:OUTER outside
carries each connection to 127.0.0.1:INNER inside ``NETNS`` (Prometheus scraping an agent)."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import socket
import threading
from collections.abc import Callable
from functools import partial

CLONE_NEWNET = 0x40000000


def setns(fd: int) -> None:
    # os.setns is Python 3.12; the venv is 3.11.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def _in_netns(netns: str, make: Callable[[], socket.socket]) -> socket.socket:
    """A socket made inside ``netns`` (a socket keeps the namespace it was made in); the
    caller stays where it was."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        setns(target)
        try:
            return make()
        finally:
            setns(home)
    finally:
        os.close(home)
        os.close(target)


def _listener(port: int) -> socket.socket:
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    return ls


def listen_in(netns: str, port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:port of ``netns``."""
    return _in_netns(netns, lambda: _listener(port))


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        # Half-close so the other direction drains; then both go when both pumps end.
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _serve(conn: socket.socket, connect: Callable[[], socket.socket]) -> None:
    try:
        up = connect()
    except OSError:
        conn.close()  # the far end is down (a fault of the story): the client sees a refusal
        return
    up.settimeout(None)
    t = threading.Thread(target=_pump, args=(up, conn), daemon=True)
    t.start()
    _pump(conn, up)
    t.join()
    conn.close()
    up.close()


def _connect_in(netns: str, port: int) -> socket.socket:
    s = _in_netns(netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        raise
    return s


def _accept(ls: socket.socket, connect: Callable[[], socket.socket]) -> None:
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=_serve, args=(conn, connect), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--netns", action="append", default=[],
                    help="a namespace whose 127.0.0.1:PORT reaches ours")
    ap.add_argument("--port", type=int, required=True, help="the broker's port")
    ap.add_argument("--expose", action="append", default=[], metavar="NETNS=INNER:OUTER",
                    help="our 127.0.0.1:OUTER reaches NETNS's 127.0.0.1:INNER")
    args = ap.parse_args(argv)
    broker = partial(socket.create_connection, ("127.0.0.1", args.port), 5)
    serving = [(listen_in(ns, args.port), broker) for ns in args.netns]
    for spec in args.expose:
        ns, _, ports = spec.partition("=")
        inner, _, outer = ports.partition(":")
        serving.append((_listener(int(outer)), partial(_connect_in, ns, int(inner))))
    if not serving:
        ap.error("nothing to relay: give --netns or --expose")
    for ls, connect in serving[1:]:
        threading.Thread(target=_accept, args=(ls, connect), daemon=True).start()
    _accept(*serving[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
