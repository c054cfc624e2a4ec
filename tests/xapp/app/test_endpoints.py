"""The HTTP server of health, config and metrics when its clients misbehave."""

from __future__ import annotations

import logging
import socket
import struct
import time
import urllib.request

import pytest

from xapp.app.endpoints import Health, HttpServer
from xapp.app.metrics import Metrics


def test_a_client_that_hangs_up_costs_one_debug_line(caplog: pytest.LogCaptureFixture,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    """A probe whose timeout fired resets the connection before the answer is written: the
    server logs it at debug level, prints no traceback, and goes on serving."""
    big = {f"k{i}": "x" * 100 for i in range(20_000)}  # an answer larger than socket buffers
    http = HttpServer(Health({}), lambda: big, Metrics(), host="127.0.0.1", port=0)
    http.start()
    caplog.set_level(logging.DEBUG, logger="xapp.app.endpoints")
    try:
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", http.port))
            s.sendall(b"GET /ric/v1/config HTTP/1.1\r\nHost: x\r\n\r\n")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # RST: the server's write fails
        time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/ric/v1/health/alive",
                                    timeout=5) as r:
            assert r.status == 200
    finally:
        http.stop()
    assert "Traceback" not in capfd.readouterr().err
    assert any("went away" in r.getMessage() for r in caplog.records), caplog.records
