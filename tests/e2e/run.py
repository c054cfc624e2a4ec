"""The whole loop as operators run it, with the faults a site has: ``make e2e``.

Starts, each for real and on loopback: Redis, InfluxDB 1.8, Mosquitto (test PKI, mTLS, the
shipped ACL), ``mcw run`` (through :mod:`tests.e2e.xapp_host`, which adds the loopback A1
entry point), one dry-run Go agent per CPE, Prometheus scraping the xApp and every agent, and a
feeder replaying a twin scenario's KPIs in real time.  Then it runs the fault story
(:data:`STORY`), prints the timeline and the report, and writes ``OUT/report.json``,
``OUT/report.txt``, ``OUT/e2e.png`` and ``OUT/figures.json``, nothing outside ``OUT`` (a
clean checkout stays clean; ``bench/e2e.json`` is refreshed by hand).  Exit status 0 only
when every check passed (a check marked
expected-pending -- a detection another part owns and has not built yet -- is reported but does
not fail the run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dashboards import DASHBOARDS, dashboard_json
from tests.e2e.dashboard_queries import check_dashboards
from tests.e2e.dashboard_render import render
from tests.e2e.feeder import ScenarioFeeder
from tests.e2e.observer import Observer
from tests.e2e.prometheus import Prometheus, prometheus_binary
from tests.e2e.reallink import RealLink, proxy_acl
from tests.e2e.report import (
    Check,
    FaultResult,
    kpis_in_influx,
    lease_kept,
    to_json,
    to_text,
    versions_in_order,
    weights_in_influx,
)
from tests.integration.stack import (
    AGENT_BINARY,
    REPO,
    Stack,
    XappRun,
    http_get,
    influx_rows,
    influx_write,
    operator_env,
    write_config,
)
from tests.support.influxd import influxd_binary, start_influxd
from tests.support.mosquitto import (
    MosquittoBroker,
    connect_client,
    cpe_name,
    make_pki,
    mosquitto_binary,
)
from tests.support.polling import free_port, wait_until
from tests.support.redis_server import RedisServer, redis_binary
from xapp.adapters.mqtt import shard_topic

LEASE_S = 6.0
#: Agent telemetry period: every agent scans its sockets this often.
TELEMETRY_MS = 2000
A1_TYPE = "20100"


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


def readiness_failure(run: Run) -> str | None:
    """How a fault shows: /alive unreachable or failing, or readiness naming the failed check."""
    if not run.alive():
        return "/alive"
    ok, checks = run.ready()
    if not ok:
        failed = sorted(k for k, v in checks.items() if not v) or ["unreachable"]
        return "/ready: " + ",".join(failed)
    return None


@dataclass
class Fault:
    """One fault of the story: inject, hold, restore; detection and recovery are measured."""

    name: str
    inject: Callable[[Run], None]
    restore: Callable[[Run], None]
    hold_s: float
    #: Returns how the fault was detected (None while it is not).
    detect: Callable[[Run], str | None] = readiness_failure
    #: Whether detection is another part's job not built yet (report, do not fail).
    detect_pending_ok: bool = False
    checks: Callable[[Run, FaultResult], list[Check]] | None = None
    recover_timeout_s: float = 90.0


def run_fault(run: Run, f: Fault) -> FaultResult:
    since = run.observer.latest_versions()
    res = FaultResult(f.name, injected_s=round(run.now(), 2), restored_s=0.0)
    run.mark(f"inject {f.name}")
    f.inject(run)
    t_inj = time.monotonic()
    deadline = t_inj + f.hold_s
    while time.monotonic() < deadline:
        if res.detect_s is None:
            how = f.detect(run)
            if how is not None:
                res.detect_s, res.detected_by = round(time.monotonic() - t_inj, 2), how
                run.mark(f"detected {f.name} by {how}")
        time.sleep(0.2)
    run.mark(f"restore {f.name}")
    f.restore(run)
    res.restored_s = round(run.now(), 2)
    t_res = time.monotonic()
    since = {c: max(v, since.get(c, 0)) for c, v in run.observer.latest_versions().items()}
    ok = wait_until(lambda: run.ready()[0] and run.all_refreshed(since), f.recover_timeout_s, 0.2)
    if ok:
        res.recover_s = round(time.monotonic() - t_res, 2)
        run.mark(f"recovered {f.name}")
    res.checks.append(Check("detected", res.detect_s is not None,
                            res.detected_by or "no readiness or liveness change",
                            expected_pending=f.detect_pending_ok and res.detect_s is None))
    refreshed = sum(run.observer.latest_versions().get(c, 0) > since.get(c, 0)
                    for c in run.cpes)
    res.checks.append(Check("recovered: ready, every agent applied newer weights", ok,
                            f"{refreshed}/{len(run.cpes)} agents refreshed"))
    if f.checks is not None:
        res.checks.extend(f.checks(run, res))
    return res


# --- the faults -------------------------------------------------------------------------------

SPLIT = {"mode": "fixed_split", "excluded_wats": ["lifi"],
         "wats": {"nr": {"split_pct": 50}, "wifi": {"split_pct": 50}}}


def _a1_create(run: Run) -> None:
    run.scratch["split_wall0"] = time.time()
    resp = run.a1({"operation": "CREATE", "policy_type_id": A1_TYPE,
                   "policy_instance_id": "e2e-split", "payload": json.dumps(SPLIT)})
    run.mark(f"A1 CREATE fixed_split 50/50: {resp.get('status')}")


def _a1_delete(run: Run) -> None:
    run.scratch["split_wall1"] = time.time()
    resp = run.a1({"operation": "DELETE", "policy_type_id": A1_TYPE,
                   "policy_instance_id": "e2e-split", "payload": "{}"})
    run.mark(f"A1 DELETE fixed_split: {resp.get('status')}")


def _split_applied(run: Run) -> str | None:
    latest = run.latest()
    n = sum(1 for c in run.cpes if (w := latest.get(c)) and w.get("nr") == w.get("wifi")
            and w.get("nr", 0) > 0 and w.get("lifi", 0) == 0)
    return f"{n} agents applied 50/50" if n == len(run.cpes) else None


def _unequal(run: Run) -> int:
    return sum(1 for w in run.latest().values() if w.get("nr") != w.get("wifi"))


def _split_checks(run: Run, res: FaultResult) -> list[Check]:
    back = wait_until(lambda: _unequal(run) >= 0.9 * len(run.cpes), 30)
    return [Check("every agent applied 50/50 through A1", res.detect_s is not None,
                  f"in {res.detect_s}s" if res.detect_s is not None else "not all agents"),
            Check("load balancing back after DELETE on >= 90% of agents", back,
                  f"{_unequal(run)}/{len(run.cpes)} agents with unequal nr/wifi weights")]


def _broker_stop(run: Run) -> None:
    run.stack.broker.stop()


def _broker_start(run: Run) -> None:
    run.stack.broker.start()


def _broker_hang(run: Run) -> None:
    assert run.stack.broker.proc is not None
    os.kill(run.stack.broker.proc.pid, signal.SIGSTOP)


def _broker_resume(run: Run) -> None:
    assert run.stack.broker.proc is not None
    os.kill(run.stack.broker.proc.pid, signal.SIGCONT)


def _xapp_kill(run: Run) -> None:
    assert run.stack.xapp.proc is not None
    run.stack.xapp.proc.kill()
    run.stack.xapp.proc.wait()
    run.stack.xapp.proc = None


def _xapp_start(run: Run) -> None:
    run.stack.xapp.start()


def _redis_stop(run: Run) -> None:
    run.stack.redis.stop()


def _redis_start(run: Run) -> None:
    run.stack.redis.start()


def _influx_stop(run: Run) -> None:
    run.stack.influx.stop()


def _influx_start(run: Run) -> None:
    run.stack.influx.start()


def _agent_stop(run: Run) -> None:
    cpe = run.cpes[0]
    proc = run.stack.agents[0]
    proc.terminate()
    proc.wait(timeout=10)
    run.mark(f"agent {cpe} stopped")


def _agent_start(run: Run) -> None:
    cpe = run.cpes[0]
    run.stack.agents[0] = run.stack.start_agent(cpe, telemetry_ms=TELEMETRY_MS,
                                                metrics_port=run.agent_ports[cpe])
    run.stack.agents.pop()  # start_agent appends; the restarted agent takes the old slot


def _agent_detect(run: Run) -> str | None:
    cpe = run.cpes[0]
    last = [r for r in run.observer.snapshot() if r.cpe == cpe]
    return "agent's last will (online=false)" if last and not last[-1].online else None


def _agent_checks(run: Run, res: FaultResult) -> list[Check]:
    cpe = run.cpes[0]
    recs = [r for r in run.observer.snapshot() if r.cpe == cpe and r.online and r.version > 0]
    before = [r.version for r in recs if r.t < res.injected_s]
    after = [r.version for r in recs if r.t > res.restored_s]
    ok = bool(before and after and after[0] >= before[-1])
    return [Check("restarted agent resumed from its state file (first version >= last before)",
                  ok, f"before {before[-1:]}, first after {after[:1]}")]


def _malformed(run: Run) -> None:
    results: list[str] = []
    resp = run.a1({"operation": "UPDATE", "policy_type_id": A1_TYPE,
                   "policy_instance_id": "e2e-bad", "payload": json.dumps({"max_weight": 0})})
    run.scratch["a1_refused"] = float(resp.get("status") == "ERROR")
    results.append(f"A1: {resp.get('status')}")
    run.scratch["dropped_before"] = _dropped(run)
    client = connect_client(run.stack.broker, run.cpes[-1], client_id="e2e-bad-cpe")
    client.publish(shard_topic(run.cpes[-1], "telemetry"), b'{"schema": "garbage"')
    client.close()
    results.append("MQTT telemetry: truncated JSON published")
    run.scratch["skipped_before"] = _skipped_unknown_wat(run)
    ok = influx_write(run.stack.influx, [f"wat_kpi,cpe={run.cpes[-1]},wat=bogus,cell=x "
                                         f"delivered_mbps=1.0 {time.time_ns()}"])
    results.append(f"InfluxDB: a KPI row of an unknown WAT, acknowledged={ok}")
    code = http_get(run.stack.xapp.http_port, "/ric/v1/health/ready?" + "x" * 5000)[0]
    results.append(f"HTTP: oversized query answered {code}")
    run.mark("malformed inputs: " + "; ".join(results))


def _dropped(run: Run) -> float:
    """Telemetry payloads the xApp dropped, every reason."""
    return sum(v for (name, labels), v in run.stack.xapp.metrics().items()
               if name == "mcw_mqtt_subscriber_dropped_payloads_total"
               and ("kind", "telemetry") in labels)


def _skipped_unknown_wat(run: Run) -> float:
    return run.stack.xapp.metrics().get(
        ("mcw_kpi_rows_skipped_total", (("reason", "unknown_wat"),)), 0.0)


def _malformed_checks(run: Run, _res: FaultResult) -> list[Check]:
    counted = wait_until(lambda: _dropped(run) > run.scratch["dropped_before"], 10)
    skipped = wait_until(lambda: _skipped_unknown_wat(run) > run.scratch["skipped_before"], 10)
    return [Check("A1: an invalid policy refused with status ERROR",
                  run.scratch["a1_refused"] == 1.0, ""),
            Check("MQTT: malformed telemetry dropped and counted", counted,
                  f"mcw_mqtt_subscriber_dropped_payloads_total{{kind=telemetry}} = "
                  f"{_dropped(run)}"),
            Check("InfluxDB: a KPI row of an unknown WAT skipped and counted", skipped,
                  f"mcw_kpi_rows_skipped_total{{reason=unknown_wat}} = "
                  f"{_skipped_unknown_wat(run)}"),
            Check("xApp alive and ready after every malformed input",
                  run.alive() and run.ready()[0], "")]


def _nothing(_run: Run) -> None:
    return None


def _wat_down(run: Run) -> None:
    assert run.link is not None
    run.scratch["wat_down_wall"] = time.time()
    run.scratch["wat_down_t"] = run.now()
    run.link.topo.set_link("wifi", False)


def _wat_up(run: Run) -> None:
    assert run.link is not None
    run.scratch["wat_up_wall"] = time.time()
    run.link.topo.set_link("wifi", True)


def _wat_down_seen(run: Run) -> str | None:
    """The real CPE agent reported the WAT down (its link-down state message)."""
    assert run.link is not None
    cpe = run.link.cpe_id
    # Taken before the interface went down: the agent's state can beat the timeline's mark.
    t_inj = run.scratch["wat_down_t"]
    hit = any(r.cpe == cpe and r.event == "link-down" and r.t >= t_inj
              for r in run.observer.snapshot())
    return "the CPE agent's link-down state" if hit else None


def _wat_checks(run: Run, _res: FaultResult) -> list[Check]:
    """Delivered back above the fastest path alone in both directions after the WAT returned
    (the subflow that stood through the outage first waits out its backed-off timer)."""
    assert run.link is not None
    up = run.scratch["wat_up_wall"]
    best = max(p.mbit for p in run.link.topo.paths)
    back = run.link.recovered_at(up, best, 40)
    dl = [r for r in run.observer.proxy_snapshot()
          if r.cpe == run.link.cpe_id and r.online and r.version > 0]
    # From 2 s after the link went down (the queued second drains) to its return.
    during = run.link.mean("ul", run.scratch["wat_down_wall"] + 2, up)
    run.scratch["wat_link_recover_s"] = -1.0 if back is None else round(back - up, 1)
    return [Check("real connection: both directions above the fastest path after the WAT "
                  "returned", back is not None,
                  f"after {run.scratch['wat_link_recover_s']} s (-1: never within 40 s)"),
            Check("real connection: the uplink during the outage within the remaining path",
                  during is not None and during <= run.link.topo.paths[0].mbit * 1.05,
                  f"{during} Mbit/s"),
            Check("real connection: the proxy agent applied the CPE's downlink weights",
                  bool(dl) and any(dl[-1].weights.values()),
                  f"{len(dl)} proxy states; last v{dl[-1].version} {dl[-1].weights} "
                  f"caps {dl[-1].caps or 'not reported'}" if dl else "no proxy state for the CPE")]


STORY: list[Fault] = [
    Fault("A1 fixed_split 50/50 and back", _a1_create, _a1_delete, 20.0,
          detect=_split_applied, checks=_split_checks),
    Fault("broker restarted", _broker_stop, _broker_start, 3.0),
    Fault("broker hung (SIGSTOP) 15 s", _broker_hang, _broker_resume, 15.0),
    Fault("mcw run killed and restarted", _xapp_kill, _xapp_start, 2.0),
    Fault("Redis restarted", _redis_stop, _redis_start, 3.0),
    Fault("InfluxDB away 30 s", _influx_stop, _influx_start, 30.0),
    Fault("agent restarted with its state file", _agent_stop, _agent_start, 2.0,
          detect=_agent_detect, checks=_agent_checks),
    Fault("malformed input on every interface", _malformed, _nothing, 2.0,
          detect=lambda _r: None, detect_pending_ok=True, checks=_malformed_checks),
    Fault("WAT down on the real MPTCP connection (wifi link down 10 s)", _wat_down, _wat_up,
          10.0, detect=_wat_down_seen, checks=_wat_checks),
]


# --- the run ----------------------------------------------------------------------------------

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


def link_figures(run: Run, steady_wall: tuple[float, float]) -> dict[str, Any]:
    """Delivered Mbit/s per direction on the real connection against the sum of the path
    rates: the steady phase (load_balancing) and the A1 fixed_split hold; the WAT down's
    recovery on the connection itself."""
    assert run.link is not None
    lk = run.link

    def phase(t0: float, t1: float) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for d in ("ul", "dl"):
            m = lk.mean(d, t0, t1)
            out[f"{d}_mbps"] = None if m is None else round(m, 2)
            out[f"{d}_of_sum"] = None if m is None else round(m / lk.sum_mbit, 3)
        return out

    # The split's first 5 s are the agents taking it up and the queues draining.
    split = (run.scratch.get("split_wall0", 0.0) + 5, run.scratch.get("split_wall1", 0.0))
    return {"paths_mbit": {p.wat: p.mbit for p in lk.topo.paths}, "sum_mbit": lk.sum_mbit,
            "load_balancing_steady": phase(*steady_wall), "fixed_split_50_50": phase(*split),
            "wat_down_link_recover_s": run.scratch.get("wat_link_recover_s")}


def proc_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
               .splitlines() if line.startswith("VmRSS:")) / 1024
    return cpu, rss


def ticks(run: Run) -> float:
    return sum(v for (name, _), v in run.stack.xapp.metrics().items() if name == "mcw_ticks_total")


def steady(run: Run, seconds: float) -> dict[str, float]:
    """The steady phase: the xApp's CPU and RSS per tick at this fleet size."""
    run.mark("steady phase")
    assert run.stack.xapp.proc is not None
    pid = run.stack.xapp.proc.pid
    cpu0, _ = proc_usage(pid)
    n0 = ticks(run)
    time.sleep(seconds)
    cpu1, rss = proc_usage(pid)
    n = ticks(run) - n0
    return {"steady_s": seconds, "ticks": n, "cpu_ms_per_tick": round(1000 * (cpu1 - cpu0)
                                                                       / max(n, 1), 2),
            "rss_mib": round(rss, 1)}


def stored_weight_versions(run: Run) -> dict[str, set[int]]:
    rows = influx_rows(run.stack.influx, "SELECT distinct(version) FROM mcw.autogen.wat_weight "
                                         "GROUP BY cpe")
    out: dict[str, set[int]] = {}
    for r in rows:
        out.setdefault(str(r["cpe"]), set()).add(int(r["distinct"]))
    return out


def stored_kpis(run: Run) -> int:
    rows = influx_rows(run.stack.influx, "SELECT count(rsrp_dbm) FROM mcw.autogen.wat_kpi")
    return int(rows[0]["count"]) if rows else 0


def timeline_text(run: Run, n_cpes: int = 2) -> str:
    """The story's marks and, for the first agents, every change they applied."""
    lines = [f"{t:7.2f}s  {what}" for t, what in run.timeline]
    for cpe in run.cpes[:n_cpes]:
        prev: dict[str, int] | None = None
        for r in run.observer.snapshot():
            if r.cpe != cpe or (r.weights == prev and r.online):
                continue
            lines.append(f"{r.t:7.2f}s  {cpe} {'online' if r.online else 'OFFLINE'} "
                         f"v{r.version} {r.weights} {r.event}".rstrip())
            prev = r.weights
    return "\n".join(sorted(lines))


def write_outputs(out: Path, doc: dict[str, Any], text: str, figures: dict[str, Any]
                  ) -> list[Path]:
    """The report and the figures, written under ``out`` and nowhere else: a run must not
    leave a tracked file changed (``bench/e2e.json`` is the hand-kept record docs/e2e.md
    quotes)."""
    written = []
    for name, body in (("report.json", json.dumps(doc, indent=2)), ("report.txt", text),
                       ("figures.json", json.dumps(figures, indent=2))):
        path = out / name
        path.write_text(body + "\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "e2e", metavar="DIR",
                        help="output directory (default: out/e2e); emptied first")
    parser.add_argument("--agents", type=int, default=50,
                        help="dry-run Go agents, one per CPE (default: 50; every agent is a "
                             "process, so a few hundred want more than 2 cores)")
    parser.add_argument("--cpes", type=int, default=0,
                        help="CPEs in the KPI feed (default: as many as agents)")
    parser.add_argument("--steady-s", type=float, default=20.0,
                        help="seconds of steady phase before the faults (default: 20)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.agents < 1 or args.steady_s < 5:
        parser.error("--agents must be >= 1 and --steady-s >= 5")
    n_cpes = max(args.cpes, args.agents)
    missing = missing_tools()
    if missing:
        print("e2e: missing " + ", ".join(missing), file=sys.stderr)
        return 2
    args.out = args.out.resolve()
    if args.out.exists():
        shutil.rmtree(args.out)
    wall0 = time.monotonic()
    run = start(args.out / "run", args.agents, n_cpes)
    assert run.prom is not None
    try:
        late = wait_all_applied(run)
        if late is not None:
            print(f"e2e: the system never became ready: {run.ready()}; agents without "
                  f"weights: {late[:10]}", file=sys.stderr)
            return 1
        run.mark(f"ready: {len(run.cpes)} agents applied weights")
        steady_wall = (time.time(), time.time() + args.steady_s)
        figures: dict[str, Any] = {"agents": len(run.cpes), "cpes": n_cpes,
                                   "steady": steady(run, args.steady_s)}
        results: list[FaultResult] = []
        outages: list[tuple[float, float]] = []
        for fault in tqdm(STORY, desc="faults", unit="fault"):
            res = run_fault(run, fault)
            results.append(res)
            outages.append((res.injected_s, res.restored_s + (res.recover_s or 0.0)))
            tqdm.write(f"{res.name}: {'PASS' if res.ok else 'FAIL'} detect {res.detect_s} "
                       f"recover {res.recover_s}")
        # The xApp buffers what InfluxDB could not take; compare once the buffer drained.
        drained = wait_until(lambda: run.stack.xapp.metrics().get(
            ("mcw_influx_buffered_points", ()), 1.0) == 0.0, 60, 0.5)
        run.mark(f"xApp's InfluxDB buffer drained: {drained}")
        end = run.now()
        records = run.observer.snapshot()
        with (args.out / "states.jsonl").open("w") as fh:
            for r in records:
                fh.write(json.dumps(asdict(r)) + "\n")
        up = run.prom.targets_up()
        invariants = [versions_in_order(records),
                      weights_in_influx(records, stored_weight_versions(run),
                                        crashes=[r.injected_s for r in results
                                                 if r.name.startswith("mcw run killed")]),
                      kpis_in_influx(run.feeder.acked_points(), stored_kpis(run)),
                      lease_kept(records, end, LEASE_S, outages),
                      Check("Prometheus scrapes the xApp and every agent",
                            up.get("mcw-xapp") == 1
                            and up.get("mcw-agent") == len(run.cpes) + 2,
                            f"targets up: {up}"),
                      *check_dashboards(run.prom, run.stack.influx, run.cpes[1],
                                        e2_running=False)]
        _, drawn = render(dashboard_json(DASHBOARDS["mcw-xapp.json"]()), run.prom,
                          run.stack.influx, run.cpes[1], time.time() - run.now(), time.time(),
                          args.out / "dashboard.png")
        run.mark(f"dashboard drawn: {sum(1 for n in drawn.values() if n)} of {len(drawn)} "
                 "panels with data")
        figures["faults"] = {r.name: {"detect_s": r.detect_s, "recover_s": r.recover_s}
                             for r in results}
        figures["real_mptcp"] = link_figures(run, steady_wall)
        figures["wall_s"] = round(time.monotonic() - wall0, 1)
        doc = to_json(results, invariants, {"figures": figures,
                                            "timeline": run.timeline})
        from tests.e2e.picture import plot

        png = plot(run, results, args.out / "e2e.png")
        doc["png"] = str(png)
    finally:
        run.observer.stop()
        run.prom.stop()
        if run.link is not None:
            run.link.stop()
        run.stack.stop()
    text = timeline_text(run) + "\n\n" + to_text(doc)
    write_outputs(args.out, doc, text, figures)
    print(json.dumps(doc, indent=2) if args.json else text)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
