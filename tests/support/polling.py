"""Small helpers every server-backed test needs: a free loopback port, waiting for a state,
stopping a server process."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from collections.abc import Callable

#: Ports :func:`free_port` handed out in this process: the kernel may give a port back as soon
#: as its probe socket closes, before the server it was meant for binds it.
_HANDED_OUT: set[int] = set()


def _worker_slot() -> tuple[int, int]:
    """This pytest-xdist worker's index and the number of workers ((0, 1) when serial)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker.startswith("gw") and worker[2:].isdigit() and count > 1:
        return int(worker[2:]) % count, count
    return 0, 1


#: Under pytest-xdist, the ports below the kernel's ephemeral range (32768-60999 here) cut into
#: one block per worker.
_XDIST_PORTS = range(20000, 32768)
#: Its own generator: hypothesis fails a test whose example uses the global ``random``.
_RANDOM = random.Random()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that this process has not been
    given before.

    Under pytest-xdist each worker takes ports from its own block (tried by binding them):
    another worker's probe may release a port a moment before its server binds it, and a port
    the kernel picks (bind to port 0) could be handed to two workers in between."""
    index, count = _worker_slot()
    if count > 1:
        size = len(_XDIST_PORTS) // count
        block = range(_XDIST_PORTS.start + index * size, _XDIST_PORTS.start + (index + 1) * size)
        for port in _RANDOM.sample(block, len(block)):
            if port in _HANDED_OUT:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
        raise RuntimeError(f"no free port left in {block}")
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_until(cond: Callable[[], bool], timeout_s: float = 40.0, step_s: float = 0.05) -> bool:
    """Poll ``cond`` until it holds or ``timeout_s`` passes; the last answer is returned."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step_s)
    return cond()


def stop_process(proc: subprocess.Popen[bytes] | None, timeout_s: float = 10.0) -> None:
    """SIGTERM ``proc`` (a server saves its state on it), SIGKILL after ``timeout_s``."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
