"""Small helpers every server-backed test needs: a free loopback port, waiting for a state,
stopping a server process."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable

#: Ports :func:`free_port` handed out in this process: the kernel may give a port back as soon
#: as its probe socket closes, before the server it was meant for binds it.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that this process has not been
    given before."""
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
