"""A TCP relay on loopback that a test can cut into a black hole and heal: a partition from
a server (Redis), as opposed to the server going away."""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class CuttableProxy:
    """A TCP relay to ``target``; :meth:`cut` turns it into a black hole (connections stay
    open, nothing passes, new ones are accepted and hang): a partition, not a refusal.
    :meth:`heal` relays again, for connections made after it (those cut stay dead, as a
    client that timed out on them drops them anyway)."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.cut_event = threading.Event()
        self.stopped = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(client)
            if self.cut_event.is_set():
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            self.held.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        while not self.stopped.is_set() and not self.cut_event.is_set():
            try:
                ready, _, _ = select.select([a, b], [], [], 0.05)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    if self.cut_event.is_set():
                        return  # swallowed: the other side never hears of it
                    peers[s].sendall(data)
            except OSError:
                return

    def cut(self) -> None:
        self.cut_event.set()

    def heal(self) -> None:
        self.cut_event.clear()

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        for s in self.held:
            with contextlib.suppress(OSError):
                s.close()
