"""The full stack for the integration tests: real servers, ``mcw run``, CPE clients, the agent.

:class:`Stack` owns a test PKI, a Mosquitto with the shipped ACL, an influxd, a redis-server and
the ``mcw run`` subprocess, configured as an operator would: a ``config-file.json`` with
in-cluster defaults, overridden by ``MCW_*`` environment variables and ``DBAAS_SERVICE_*``.
A :class:`KpiFeeder` thread writes ``wat_kpi`` line protocol into InfluxDB every half second.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.influxd import InfluxServer
from tests.support.mosquitto import MosquittoBroker, Pki
from tests.support.polling import free_port, wait_until
from tests.support.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
AGENT_BINARY = REPO / "kernel-agent" / "bin" / "mcw-agent"

#: Radio KPIs and delivered throughput per WAT, roughly the paper's testbed (5G 342 Mbps,
#: Wi-Fi 1.19 Gbps, LiFi 12 Mbps); ``saturated`` 1 marks the throughput as a capacity sample;
#: ``rtt_ms`` and ``retrans_pct`` are what the steering thresholds and the dashboard read.
BASE_KPIS: dict[str, dict[str, float]] = {
    "nr": {"rsrp_dbm": -85.0, "rsrq_db": -10.0, "sinr_db": 20.0, "cqi": 12.0, "mcs": 22.0,
           "prb_util": 0.3, "bler": 0.02, "delivered_mbps": 342.0, "rtt_ms": 18.0,
           "saturated": 1.0, "retrans_pct": 0.1},
    "wifi": {"rssi_dbm": -50.0, "snr_db": 40.0, "mcs": 9.0, "nss": 2.0, "channel_busy": 0.2,
             "retries": 0.05, "phy_rate_mbps": 1800.0, "delivered_mbps": 1190.0,
             "rtt_ms": 6.0, "saturated": 1.0, "retrans_pct": 0.3},
    "lifi": {"snr_db": 25.0, "rx_optical_dbm": -20.0, "delivered_mbps": 12.0, "rtt_ms": 4.0,
             "saturated": 1.0, "retrans_pct": 0.2},
}

#: Wi-Fi after the AP got busy and the station moved away.
POOR_WIFI: dict[str, float] = {
    "rssi_dbm": -78.0, "snr_db": 12.0, "mcs": 2.0, "nss": 1.0, "channel_busy": 0.85,
    "retries": 0.4, "phy_rate_mbps": 150.0, "delivered_mbps": 60.0, "rtt_ms": 40.0,
    "saturated": 1.0, "retrans_pct": 4.0}


def http_get(port: int, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), bytes(e.read())
    except OSError:
        return 0, b""




def influx_write(server: InfluxServer, lines: list[str]) -> bool:
    """POST line protocol to /write (ns precision); False when InfluxDB is unreachable."""
    url = f"{server.url}/write?" + urllib.parse.urlencode(
        {"db": "mcw", "rp": "autogen", "precision": "ns"})
    try:
        with urllib.request.urlopen(url, data="\n".join(lines).encode(), timeout=5) as r:
            return int(r.status) == 204
    except OSError:
        return False


def influx_rows(server: InfluxServer, q: str) -> list[dict[str, Any]]:
    """InfluxQL result rows as dicts (column -> value), tags included when grouped."""
    doc = json.loads(server.query(q))
    errors = [r["error"] for r in doc.get("results", []) if "error" in r]
    assert not errors, (q, errors)
    rows: list[dict[str, Any]] = []
    for result in doc.get("results", []):
        for series in result.get("series", []) or []:
            tags = series.get("tags", {})
            for values in series["values"]:
                rows.append({**tags, **dict(zip(series["columns"], values, strict=True))})
    return rows


class KpiFeeder:
    """Writes one ``wat_kpi`` point per (cpe, wat) every ``period_s`` until stopped.

    :attr:`kpis` may be changed while it runs (under :attr:`lock`); writes that fail while
    InfluxDB is down are simply lost, like a real KPI exporter's.
    """

    def __init__(self, server: InfluxServer, cpes: list[str], period_s: float = 0.5) -> None:
        self.server = server
        self.period_s = period_s
        self.lock = threading.Lock()
        self.kpis: dict[str, dict[str, dict[str, float]]] = {
            cpe: {wat: dict(v) for wat, v in BASE_KPIS.items()} for cpe in cpes}
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kpi-feeder", daemon=True)

    def set_wat(self, cpe: str, wat: str, values: Mapping[str, float]) -> None:
        with self.lock:
            self.kpis[cpe][wat] = dict(values)

    def lines(self, time_ns: int) -> list[str]:
        with self.lock:
            out = []
            for cpe, wats in self.kpis.items():
                for wat, fields in wats.items():
                    text = ",".join(f"{k}={v!r}" for k, v in fields.items())
                    out.append(f"wat_kpi,cpe={cpe},wat={wat},cell={wat}-cell-1 {text} {time_ns}")
            return out

    def _run(self) -> None:
        while not self._stop.is_set():
            if influx_write(self.server, self.lines(time.time_ns())):
                self.written += 1
            self._stop.wait(self.period_s)

    def start(self) -> KpiFeeder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@dataclass
class XappRun:
    """``mcw run`` as a subprocess; its JSON log lines go to ``log_path``."""

    cmd: list[str]
    env: dict[str, str]
    http_port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> XappRun:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=REPO)
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM and wait; the exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return None
        return proc.returncode

    def log_lines(self) -> list[dict[str, Any]]:
        """The JSON log lines (mdclogpy) written so far; non-JSON lines are returned as msg."""
        out: list[dict[str, Any]] = []
        for raw in self.log_path.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = {"msg": raw, "not_json": True}
            out.append(doc if isinstance(doc, dict) else {"msg": raw, "not_json": True})
        return out

    def model_loaded(self) -> bool:
        """Whether the shipped model loaded (else ``auto`` fell back to the EWMA baseline)."""
        return any("capacity model" in str(d.get("msg")) and "loaded from" in str(d.get("msg"))
                   for d in self.log_lines())

    def get(self, path: str) -> tuple[int, bytes]:
        return http_get(self.http_port, path)

    def json(self, path: str) -> Any:
        code, body = self.get(path)
        assert code in (200, 503), (path, code, body[:200])
        return json.loads(body)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """``{(sample name, sorted labels): value}`` from /metrics."""
        code, body = self.get("/metrics")
        if code != 200:
            return {}
        out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for fam in text_string_to_metric_families(body.decode()):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
        return out

    def ready(self) -> tuple[bool, dict[str, bool]]:
        code, body = self.get("/ric/v1/health/ready")
        if code == 0:
            return False, {}
        doc = json.loads(body)
        return code == 200 and bool(doc["ready"]), dict(doc["checks"])


def metric(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float:
    """One sample's value (0 when absent)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@dataclass
class Stack:
    """Everything one integration module runs; see the module docstring."""

    root: Path
    pki: Pki
    broker: MosquittoBroker
    influx: InfluxServer
    redis: RedisServer
    config_path: Path
    env: dict[str, str]
    xapp: XappRun
    feeder: KpiFeeder
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def xapp_cmd(self, http_port: int) -> list[str]:
        return [sys.executable, "-m", "xapp.cli", "run", "--config", str(self.config_path),
                "--http-host", "127.0.0.1", "--http-port", str(http_port), "--rmr", "off",
                "--sdl", "redis", "--estimator", "auto", "--grace-s", "10",
                "--config-poll-s", "0.5"]

    def redis_keys(self) -> dict[str, str]:
        """Every key of the SDL Redis with its value (ricsdl stores ``{ns},key``)."""
        cli = shutil.which("redis-cli")
        assert cli is not None, "redis-cli is needed to inspect SDL"
        keys = subprocess.run([cli, "-h", "127.0.0.1", "-p", str(self.redis.port), "--scan"],
                              capture_output=True, check=True, timeout=10).stdout.decode()
        out: dict[str, str] = {}
        for key in filter(None, keys.splitlines()):
            value = subprocess.run([cli, "-h", "127.0.0.1", "-p", str(self.redis.port), "GET",
                                    key], capture_output=True, check=True, timeout=10)
            out[key] = value.stdout.decode(errors="replace").strip()
        return out

    def start_agent(self, cpe_id: str, *, telemetry_ms: int = 500,
                    metrics_port: int | None = None) -> subprocess.Popen[bytes]:
        """The real Go agent (dry-run backend) for ``cpe_id`` with its own certificate; with
        ``metrics_port`` it serves Prometheus metrics on that loopback port.  A restart reuses
        the agent's directory, so its state file survives."""
        proc = start_dry_run_agent(
            self.root, cpe_id, self.broker.port, self.pki, telemetry_ms=telemetry_ms,
            metrics_listen="" if metrics_port is None else f"127.0.0.1:{metrics_port}",
            log_level="debug")
        self.agents.append(proc)
        return proc

    def agent_log(self, cpe_id: str) -> str:
        return dry_run_agent_log(self.root, cpe_id)

    def stop(self) -> None:
        for proc in self.agents:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.xapp.stop()
        self.feeder.stop()
        self.broker.stop()
        self.influx.stop()
        self.redis.stop()


def start_dry_run_agent(root: Path, cpe_id: str, broker_port: int, pki: Pki,
                        **config: Any) -> subprocess.Popen[bytes]:
    """The real Go agent (dry-run backend) for ``cpe_id`` in ``root/agent-{cpe_id}``, its
    output in that directory's ``agent.log``; a restart reuses the directory, so its state file
    survives. ``config``: :func:`dry_run_agent_config`'s keyword arguments."""
    workdir = root / f"agent-{cpe_id}"
    (workdir / "state").mkdir(parents=True, exist_ok=True)
    (workdir / "agent.yaml").write_text(
        dry_run_agent_config(cpe_id, broker_port, pki, workdir / "state", **config))
    with (workdir / "agent.log").open("ab") as log:
        return subprocess.Popen([str(AGENT_BINARY), "-config", str(workdir / "agent.yaml")],
                                stdout=log, stderr=subprocess.STDOUT)


def dry_run_agent_log(root: Path, cpe_id: str) -> str:
    """What :func:`start_dry_run_agent`'s agent for ``cpe_id`` wrote so far."""
    path = root / f"agent-{cpe_id}" / "agent.log"
    return path.read_text(errors="replace") if path.exists() else ""


def dry_run_agent_config(cpe_id: str, broker_port: int, pki: Pki, state_dir: Path, *,
                         telemetry_ms: int = 1000, metrics_listen: str = "",
                         log_level: str = "info") -> str:
    """The Go agent's YAML for ``cpe_id`` with the dry-run backend, through the broker on
    loopback with the CPE's own certificate."""
    cert, key = pki.cert(cpe_id)
    # The agent wants one interface per WAT. It only reads their state here (the dry-run
    # backend records weights, telemetry reads sock_diag): loopback for NR, and any other
    # interface that is up for Wi-Fi.
    wats = agent_interfaces()
    return (
        f"cpe_id: {cpe_id}\n"
        "mqtt:\n"
        f"  broker_url: mqtts://127.0.0.1:{broker_port}\n"
        f"  ca_file: {pki.ca}\n  cert_file: {cert}\n  key_file: {key}\n"
        "  keepalive_s: 5\n"
        "wats:\n" + "".join(f"  {w}: {{interface: {i}}}\n" for w, i in wats.items())
        + "backend: dry-run\n"
        "safe_weights: {" + ", ".join(f"{w}: 1" for w in wats) + "}\n"
        f"state_dir: {state_dir}\n"
        f"metrics_listen: \"{metrics_listen}\"\n"
        f"telemetry:\n  interval_ms: {telemetry_ms}\n  mptcp_only: false\n"
        f"log_level: {log_level}\n")


def agent_interfaces() -> dict[str, str]:
    """WAT -> interface for the agent: ``lo`` for nr, another up interface for wifi if any."""
    wats = {"nr": "lo"}
    for dev in sorted(Path("/sys/class/net").iterdir()):
        try:
            up = (dev / "operstate").read_text().strip() == "up"
        except OSError:
            continue
        if dev.name != "lo" and up:
            wats["wifi"] = dev.name
            break
    return wats


def write_config(path: Path) -> None:
    """A descriptor as shipped (in-cluster addresses); the test's values come from env."""
    doc = json.loads((REPO / "config-file.json").read_text())
    # forecasts of each CPE every other tick: the sliced write-back, at test speed
    doc["controls"]["loop"].update(control_period_s=0.5, kpi_max_age_s=3.0,
                                   forecast_history_s=1.0)
    path.write_text(json.dumps(doc, indent=2))


def operator_env(root: Path, pki: Pki, broker: MosquittoBroker, influx: InfluxServer,
                 redis: RedisServer) -> dict[str, str]:
    """Environment overrides an operator (or the chart) would set."""
    cert, key = pki.cert("mcw-xapp")
    token = root / "influx-token"
    token.write_text("")  # InfluxDB 1.8 without auth: an empty token
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MCW_", "DBAAS_", "RMR_", "CONFIG_FILE"))}
    env.update(redis.dbaas_env())
    env.update({
        "MCW_INFLUXDB_URL": influx.url,
        "MCW_INFLUXDB_BUCKET": influx.bucket,
        "MCW_INFLUXDB_TOKEN_FILE": str(token),
        "MCW_MQTT_HOST": "127.0.0.1",
        "MCW_MQTT_PORT": str(broker.port),
        "MCW_MQTT_CA_FILE": str(pki.ca),
        "MCW_MQTT_CERT_FILE": str(cert),
        "MCW_MQTT_KEY_FILE": str(key),
        "MCW_MQTT_CLIENT_ID": "mcw-xapp-it",
        # Unchanged weights are re-sent every half lease: 3 s keeps the restart test short.
        "MCW_LOOP_LEASE_S": "6",
        "MCW_MODEL_PATH": str(REPO / "models" / "default"),
        "MCW_MODEL_PUBLIC_KEY_FILE": str(REPO / "keys" / "model-signing.pub"),
        "MCW_SDL_NAMESPACE": "mcw-it",
        "MCW_LOG_LEVEL": "INFO",
        "HOSTNAME": "mcw-xapp-it",
        "PYTHONUNBUFFERED": "1",
    })
    return env


__all__ = ["BASE_KPIS", "POOR_WIFI", "KpiFeeder", "Stack", "XappRun", "free_port",
           "http_get", "influx_rows", "influx_write", "metric", "operator_env", "wait_until",
           "write_config"]
