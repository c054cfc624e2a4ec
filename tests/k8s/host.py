"""The host pieces the cluster is built from: setup commands, HTTP probes of the components,
the components' processes and the node's network namespace (entered with ``setns``)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.support.polling import stop_process

CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def sh(*cmd: str, timeout: float = 30) -> str:
    """Run a setup command; its stderr goes into the exception."""
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {(res.stderr or res.stdout).strip()}")
    return res.stdout


def http_body(url: str, timeout_s: float = 3.0) -> bytes:
    """The body of a 200 answer, or b"" (refused, timed out, another status)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return bytes(r.read()) if r.status == 200 else b""
    except (OSError, ValueError):
        return b""


@dataclass
class Proc:
    """One long-running component: its command, its log file, its process."""

    name: str
    cmd: list[str]
    log: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(self.cmd, stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         start_new_session=True)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise when the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with status {self.proc.returncode}")

    def stop(self, timeout_s: float = 15.0) -> None:
        stop_process(self.proc, timeout_s)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


@dataclass
class NetNs:
    """A named network namespace (``ip netns``); :meth:`enter` moves the calling thread (and
    everything it starts afterwards) into it."""

    name: str
    _home: int | None = None

    @property
    def path(self) -> Path:
        return Path("/run/netns") / self.name

    def create(self) -> NetNs:
        sh("ip", "netns", "add", self.name)
        sh("ip", "-n", self.name, "link", "set", "lo", "up")
        return self

    def enter(self) -> None:
        if self._home is None:
            self._home = os.open("/proc/self/ns/net", os.O_RDONLY)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)

    def leave(self) -> None:
        if self._home is not None:
            _setns(self._home)
            os.close(self._home)
            self._home = None

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
