"""Two netns measurements never overlap: the bench waits for the lock another one holds."""

from __future__ import annotations

import fcntl
import io
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.netns_lock import netns_bench_lock

# The holder takes the lock, says so, and keeps it until its standard input closes.
HOLDER = """
import fcntl, sys
fh = open(sys.argv[1], "a")
fcntl.flock(fh, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


class _Said(io.StringIO):
    """stderr that tells a waiting test when something was written."""

    def __init__(self) -> None:
        super().__init__()
        self.written = threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        self.written.set()
        return n


def test_waits_for_the_holder_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    lock = tmp_path / "netns.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "held"
    said = _Said()
    monkeypatch.setattr(sys, "stderr", said)
    inside = threading.Event()

    def measure() -> None:
        with netns_bench_lock(str(lock)):
            inside.set()

    t = threading.Thread(target=measure)
    t.start()
    assert said.written.wait(timeout=10)
    assert "another netns measurement runs" in said.getvalue()
    assert not inside.is_set()  # it said it waits, and waits: the holder still holds
    holder.stdin.close()  # the holder ends, and its lock with it
    t.join(timeout=10)
    assert inside.is_set() and holder.wait(timeout=10) == 0
    with open(lock, "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after the block


def test_a_free_lock_is_taken_without_a_word(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with netns_bench_lock(str(tmp_path / "netns.lock")):
        pass
    assert capsys.readouterr().err == ""
