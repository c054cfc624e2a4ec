"""The broker's loopback port, reachable from inside a network namespace.

``make e2e``'s Mosquitto listens on 127.0.0.1 of the initial namespace; the agents of the real
MPTCP connection live in their own namespaces, whose loopback is their own.  This process opens a
listener on 127.0.0.1:PORT *inside* the namespace (``setns`` for the moment of ``bind``), then
carries every connection's bytes to 127.0.0.1:PORT outside.  It only copies bytes: TLS, the
client certificate and the ACL are between the agent and Mosquitto, as on a site where a NAT or
a load balancer stands between them."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000


def setns(fd: int) -> None:
    # os.setns is Python 3.12; the venv is 3.11.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def listen_in(netns: str, port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:port of ``netns``; the caller stays where it was."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        setns(target)
        try:
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", port))
            ls.listen(16)
        finally:
            setns(home)
    finally:
        os.close(home)
        os.close(target)
    return ls


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


def _serve(conn: socket.socket, port: int) -> None:
    try:
        up = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        conn.close()  # the broker is down (a fault of the story): the agent sees a refusal
        return
    up.settimeout(None)
    t = threading.Thread(target=_pump, args=(up, conn), daemon=True)
    t.start()
    _pump(conn, up)
    t.join()
    conn.close()
    up.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--netns", action="append", required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    listeners = [listen_in(ns, args.port) for ns in args.netns]
    for ls in listeners[1:]:
        threading.Thread(target=_accept, args=(ls, args.port), daemon=True).start()
    _accept(listeners[0], args.port)
    return 0


def _accept(ls: socket.socket, port: int) -> None:
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=_serve, args=(conn, port), daemon=True).start()


if __name__ == "__main__":
    raise SystemExit(main())
