"""A real redis-server for tests, on a free loopback port in a temp dir, with no persistence.

Usage::

    with RedisServer(tmp_path / "redis") as redis:
        env = redis.dbaas_env()          # DBAAS_SERVICE_HOST/PORT for ricsdl
        redis.stop()                     # Redis goes away (data is lost: no persistence)
        redis.start()                    # ... and comes back on the same port

The server runs with ``--save "" --appendonly no`` so a restart comes back empty, which is what
a Redis pod without persistence does and the hardest case for the xApp's catch-up.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from types import TracebackType

from tests.support.polling import free_port, stop_process, wait_until


def redis_binary() -> str | None:
    """Path of redis-server, or None when it is not installed."""
    found = shutil.which("redis-server")
    if found:
        return found
    return "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None




class RedisServer:
    """One redis-server process; :meth:`stop` / :meth:`start` simulate an outage."""

    def __init__(self, workdir: str | os.PathLike[str], port: int | None = None,
                 host: str = "127.0.0.1") -> None:
        """``host``: the bind address; anything but loopback turns protected mode off (the
        server then answers clients of other addresses without a password: only for an address
        of a network namespace of the test's own, as ``make e2e-k8s`` uses it)."""
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.host = host
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = self.workdir / "redis.log"

    def dbaas_env(self) -> dict[str, str]:
        """The environment ricsdl reads to find this server."""
        return {"DBAAS_SERVICE_HOST": self.host, "DBAAS_SERVICE_PORT": str(self.port)}

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float = 30.0) -> RedisServer:
        if self.running:
            return self
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", self.host,
                 "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
                 "--protected-mode", "yes" if self.host == "127.0.0.1" else "no",
                 "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        proc = self._proc

        def answering() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self._log.read_text()[-2000:]}")
            return self.ping()

        if wait_until(answering, timeout_s):
            return self
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def ping(self) -> bool:
        """True when the server answers PING (raw RESP, no client library needed)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def flush(self) -> None:
        """Delete every key (``FLUSHALL``): the server as it started, without restarting it."""
        with socket.create_connection((self.host, self.port), timeout=5.0) as s:
            s.sendall(b"FLUSHALL\r\n")
            reply = s.recv(64)
        if not reply.startswith(b"+OK"):
            raise RuntimeError(f"FLUSHALL answered {reply!r}")

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        stop_process(proc, timeout_s)

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

