"""Start a real InfluxDB 1.8 (``influxd``) for tests: loopback only, temp dirs, Flux on.

Usage::

    server = start_influxd(tmp_path)      # waits for /ping, creates database "mcw"
    server.url, server.bucket             # http://127.0.0.1:PORT, "mcw/autogen"
    server.stop(); server.start()         # same port and data: simulate an outage
    server.stop()

The binary is ``$INFLUXD`` or ``influxd`` on PATH (the Makefile installs it into .tools/bin);
:func:`influxd_binary` returns None when it is absent so tests can skip with a reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.support.polling import free_port, stop_process, wait_until

DATABASE = "mcw"

_CONFIG = """\
reporting-disabled = true
bind-address = "127.0.0.1:{rpc_port}"

[meta]
  dir = "{root}/meta"

[data]
  dir = "{root}/data"
  wal-dir = "{root}/wal"
  query-log-enabled = false

[http]
  enabled = true
  bind-address = "{bind}:{port}"
  auth-enabled = false
  flux-enabled = true
  log-enabled = false

[logging]
  level = "warn"

[monitor]
  store-enabled = false

[continuous_queries]
  enabled = false

[subscriber]
  enabled = false
"""


def influxd_binary() -> str | None:
    """Path of influxd, or None."""
    env = os.environ.get("INFLUXD")
    if env and Path(env).exists():
        return env
    found = shutil.which("influxd")
    if found:
        return found
    local = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "influxd"
    return str(local) if local.exists() else None


@dataclass
class InfluxServer:
    """A running (or stopped) influxd bound to 127.0.0.1."""

    root: Path
    port: int
    rpc_port: int
    binary: str
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    database: str = DATABASE
    #: The HTTP bind address; ``url`` stays on 127.0.0.1, which 0.0.0.0 includes.
    bind: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def bucket(self) -> str:
        return f"{self.database}/autogen"

    def with_database(self, name: str) -> InfluxServer:
        """The same running server seen through a new, empty database ``name``.

        Lets tests share one influxd (starting one costs seconds) without seeing each other's
        points; the returned handle must not be stopped (the owner of the server stops it).
        """
        if not name.isidentifier():
            raise ValueError(f"database name {name!r} must be an identifier")
        self.query(f"CREATE DATABASE {name}")
        return replace(self, database=name)

    def empty_database(self) -> None:
        """Drop the database and create it again: every point gone, in milliseconds where a new
        influxd takes seconds."""
        for q in (f"DROP DATABASE {self.database}", f"CREATE DATABASE {self.database}"):
            errors = [r["error"] for r in json.loads(self.query(q)).get("results", [])
                      if "error" in r]
            if errors:
                raise RuntimeError(f"{q}: {errors}")

    def start(self, timeout_s: float = 60.0) -> None:
        """Start influxd (if stopped) and wait until /ping answers."""
        if self.proc is not None and self.proc.poll() is None:
            return
        conf = self.root / "influxdb.conf"
        conf.write_text(_CONFIG.format(root=self.root, port=self.port, rpc_port=self.rpc_port,
                                       bind=self.bind))
        log = (self.root / "influxd.log").open("ab")
        self.proc = subprocess.Popen([self.binary, "run", "-config", str(conf)],
                                     stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "INFLUXDB_REPORTING_DISABLED": "true"})
        log.close()
        proc = self.proc

        def answering() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"influxd exited with {proc.returncode}; see "
                                   f"{self.root / 'influxd.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=1.0) as resp:
                    return bool(resp.status == 204)
            except OSError:
                return False

        if not wait_until(answering, timeout_s, 0.1):
            self.stop()
            raise RuntimeError("influxd did not answer /ping in time")
        self.query(f"CREATE DATABASE {self.database}")

    def query(self, q: str) -> bytes:
        """Run an InfluxQL statement (POST /query) and return the raw JSON answer."""
        data = urllib.parse.urlencode({"q": q}).encode()
        with urllib.request.urlopen(f"{self.url}/query", data=data, timeout=10.0) as resp:
            return bytes(resp.read())

    def stop(self) -> None:
        """Stop influxd (SIGTERM, then SIGKILL after 10 s); data stays in ``root``."""
        stop_process(self.proc)
        self.proc = None


def start_influxd(tmp_path: Path, binary: str | None = None, *, port: int | None = None,
                  bind: str = "127.0.0.1") -> InfluxServer:
    """Start influxd with its data under ``tmp_path/influxd`` on free loopback ports (or HTTP on
    ``bind``:``port``)."""
    exe = binary or influxd_binary()
    if exe is None:
        raise FileNotFoundError("influxd not found (run 'make deps-tools' or set $INFLUXD)")
    root = Path(tmp_path) / "influxd"
    root.mkdir(parents=True, exist_ok=True)
    server = InfluxServer(root=root, port=port or free_port(), rpc_port=free_port(), binary=exe,
                          bind=bind)
    server.start()
    return server
