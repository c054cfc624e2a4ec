"""The connection probes of tests/k8s/netpol.py, run here against loopback: the bash probe the
probe pods run and the Python one run inside the xApp's container tell a listening port from a
closed one, and every target gets its line."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.k8s import netpol


@pytest.fixture
def ports() -> Iterator[tuple[str, str]]:
    """A listening loopback port and one nothing listens on."""
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        yield (f"127.0.0.1:{listening.getsockname()[1]}",
               f"127.0.0.1:{closed.getsockname()[1]}")


def test_bash_probe(ports: tuple[str, str]) -> None:
    open_, closed = ports
    res = subprocess.run(["bash", "-c", netpol.probe_script(tries=1), "probe", open_, closed],
                         capture_output=True, text=True, timeout=30, check=True)
    seen = netpol.Seen.of(res.stdout, [open_, closed])
    assert seen.reached == {open_: True, closed: False} and seen.tries == {open_: 1}


def test_python_probe(ports: tuple[str, str]) -> None:
    open_, closed = ports
    res = subprocess.run([sys.executable, "-c", netpol.CONNECT, open_, closed],
                         capture_output=True, text=True, timeout=30, check=True)
    assert netpol.parse(res.stdout, [open_, closed]) == {open_: True, closed: False}


def test_a_target_without_an_answer_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no answer"):
        netpol.parse("10.0.0.1:1 reached 1\n", ["10.0.0.1:1", "10.0.0.2:2"])
