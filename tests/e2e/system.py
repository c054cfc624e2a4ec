"""The system ``make e2e`` runs, started for real on loopback: Redis, InfluxDB 1.8, Mosquitto
(test PKI, mTLS, the shipped ACL), ``mcw run`` (through :mod:`tests.e2e.xapp_host`, which adds
the loopback A1 entry point), the Go agents, Prometheus and the KPI feeder (:func:`start`), and
:class:`Run`, how the story and the checks reach them."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tests.e2e.feeder import ScenarioFeeder
from tests.e2e.observer import Observer
from tests.e2e.prometheus import Prometheus, prometheus_binary
from tests.e2e.reallink import RealLink, proxy_acl
from tests.integration.stack import (
    AGENT_BINARY,
    Stack,
    XappRun,
    http_get,
    operator_env,
    write_config,
)
from tests.support.influxd import influxd_binary, start_influxd
from tests.support.mosquitto import MosquittoBroker, cpe_name, make_pki, mosquitto_binary
from tests.support.polling import free_port, wait_until
from tests.support.redis_server import RedisServer, redis_binary

LEASE_S = 6.0
#: Agent telemetry period: every agent scans its sockets this often.
TELEMETRY_MS = 2000


@dataclass
class Run:
    """The running system and what the story needs to reach it."""

    stack: Stack
    cpes: list[str]
    agent_ports: dict[str, int]
    a1_port: int
    observer: Observer
    feeder: ScenarioFeeder
    #: None when started without ``scrape``.
    prom: Prometheus | None
    t0: float
    timeline: list[tuple[float, str]]
    #: Values one step of the story leaves for its checks.
    scratch: dict[str, float] = field(default_factory=dict)
    #: The real MPTCP connection (its CPE is not in ``cpes``: those are the dry-run fleet).
    link: RealLink | None = None

    def now(self) -> float:
        return time.monotonic() - self.t0

    def mark(self, what: str) -> None:
        self.timeline.append((round(self.now(), 2), what))

    def a1(self, msg: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.a1_port}/a1",
                                     data=json.dumps(msg).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out

    def ready(self) -> tuple[bool, dict[str, bool]]:
        return self.stack.xapp.ready()

    def alive(self) -> bool:
        return http_get(self.stack.xapp.http_port, "/ric/v1/health/alive", 2.0)[0] == 200

    def latest(self) -> dict[str, dict[str, int]]:
        """Each CPE's latest applied weights (online messages only)."""
        out: dict[str, dict[str, int]] = {}
        for r in self.observer.snapshot():
            if r.online and r.version > 0:
                out[r.cpe] = r.weights
        return out

    def all_refreshed(self, since: dict[str, int]) -> bool:
        now = self.observer.latest_versions()
        return all(now.get(c, 0) > since.get(c, 0) for c in self.cpes)


def missing_tools() -> list[str]:
    out = []
    for name, found in (("influxd (make deps-tools)", influxd_binary()),
                        ("mosquitto", mosquitto_binary()), ("redis-server", redis_binary()),
                        ("prometheus", prometheus_binary())):
        if found is None:
            out.append(name)
    if not AGENT_BINARY.exists():
        out.append(f"{AGENT_BINARY} (make agent)")
    return out


def start(root: Path, n_agents: int, n_cpes: int, *, real_link: bool = True,
          scrape: bool = True, host: Sequence[str] = ("-m", "tests.e2e.xapp_host")) -> Run:
    """Every server, ``mcw run``, the agents, Prometheus and the feeder, ready to go.

    Without ``real_link`` (no namespaces) every one of the ``n_agents`` is a dry-run agent;
    without ``scrape`` no Prometheus runs (``bench/soak.py``: neither is what it measures).
    ``host``: the interpreter's arguments that run :mod:`tests.e2e.xapp_host` (the soak's
    tracemalloc wrapper takes its place)."""
    root.mkdir(parents=True, exist_ok=True)
    pki = make_pki(root / "pki", n_cpes=n_cpes, jobs=2)
    cpes = [cpe_name(i) for i in range(1, n_cpes + 1)]
    # The shipped ACL plus the proxy's grants for the real connection's CPE (cpes[0]) and each
    # CPE's own shard.
    broker = MosquittoBroker(pki, root / "broker",
                             acl=proxy_acl(root / "acl", cpes[0], cpes)).start()
    try:
        influx = start_influxd(root)
    except BaseException:
        broker.stop()
        raise
    try:
        redis = RedisServer(root / "redis").start()
    except BaseException:
        broker.stop()
        influx.stop()
        raise
    config = root / "config-file.json"
    write_config(config)
    env = {**operator_env(root, pki, broker, influx, redis), "CONFIG_FILE": str(config),
           "MCW_LOOP_LEASE_S": str(int(LEASE_S)), "MCW_LOG_LEVEL": "WARNING"}
    port, a1_port = free_port(), free_port()
    # With the real link cpes[0] is its CPE; the others up to n_agents run dry-run agents.
    agent_cpes = cpes[1:n_agents] if real_link else cpes[:n_agents]
    # free_port never hands out a port twice in one process: the agents bind theirs later.
    free = [free_port() for _ in range(len(agent_cpes) + 2)]
    ports = dict(zip(agent_cpes, free[:-2], strict=True))
    # The real connection's two agents are scraped too, through the relay out of their netns.
    link = RealLink(root / "mptcp", pki, broker.port, cpes[0],
                    metrics_ports={"cpe": free[-2], "proxy": free[-1]}) if real_link else None
    scenario_feeder = ScenarioFeeder(influx, cpes,
                                     real=None if link is None else (cpes[0], link.topo))
    feeder = scenario_feeder.start()
    stack = Stack(root=root, pki=pki, broker=broker, influx=influx, redis=redis,
                  config_path=config, env=env, xapp=XappRun([], env, port, root / "xapp.log"),
                  feeder=feeder)
    stack.xapp.cmd = [sys.executable, *host, "--a1-port", str(a1_port),
                      *stack.xapp_cmd(port)[4:]]
    stack.xapp.start()
    t0 = time.monotonic()
    observer = Observer(broker.pki, broker.port, t0).start()
    prom = None
    try:
        if link is not None:
            link.start()
        for c in tqdm(agent_cpes, desc="agents", unit="agent"):
            stack.start_agent(c, telemetry_ms=TELEMETRY_MS, metrics_port=ports[c])
        if scrape:
            prom = Prometheus(root / "prometheus", port,
                              [*ports.values(),
                               *([] if link is None else link.metrics_ports.values())]).start()
    except BaseException:
        observer.stop()
        if link is not None:
            link.stop()
        stack.stop()
        raise
    return Run(stack=stack, cpes=agent_cpes, agent_ports=ports, a1_port=a1_port,
               observer=observer, feeder=scenario_feeder, prom=prom, t0=t0, timeline=[],
               link=link)


def wait_all_applied(run: Run, timeout_s: float = 180.0) -> list[str] | None:
    """Wait until the xApp is ready and every agent applied weights; None then, else the
    agents still without weights."""
    if wait_until(lambda: run.ready()[0] and all(
            v > 0 for v in run.observer.latest_versions().values())
            and set(run.cpes) <= set(run.observer.latest_versions()), timeout_s, 0.5):
        return None
    return sorted(set(run.cpes) - set(run.observer.latest_versions()))


def proc_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
               .splitlines() if line.startswith("VmRSS:")) / 1024
    return cpu, rss

