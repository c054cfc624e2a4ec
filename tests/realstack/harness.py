"""One policy on one path trace, on a real MPTCP connection: the real-stack bench's run.

The network is :class:`tests.realstack.shaping.ShapedTopology` (CPE, router and proxy
namespaces, one path per WAT): each path's router egress, in both directions, is a netem
(one-way delay, loss) with a tbf (rate, buffer) under it, changed every control period with one
``tc -batch`` and cut at an outage's own time (``drop``: netem loses every packet; ``down``:
the CPE's interface loses carrier, what the agent's link watcher reacts to).  On it, one MPTCP
connection carries bulk traffic both ways (:mod:`tests.e2e.mptcp_bulk`) and a second one a
small request/response flow (:mod:`tests.realstack.flows`).

The policies (:data:`POLICIES`):

* ``default``: no agent, no xApp: mainline's default scheduler alone;
* ``fixed_best``, ``equal``, ``probe``, ``oracle``: the real agents (``mptcp-shares``, role
  ``cpe`` for the uplink, role ``proxy`` for the downlink) apply ``mcw.weights.v2`` messages
  this harness publishes with the xApp's identity: weights from the engine
  (:func:`xapp.core.weights.optimal_weights_batch`) and caps from the xApp's rule
  (:func:`xapp.core.caps.rate_caps`), for the mean capacities of the whole trace
  (``fixed_best``, chosen in hindsight), all 1 (``equal``, no caps: the agent caps every WAT at
  the slowest link, round-robin's meaning), the paper's probes (``probe``: every 10 s, 5 s of
  10 TCP flows per WAT and direction beside the connection; weights from the last finished
  probe) or the trace's true capacities of the coming period, in force at its start
  (``oracle``: the engine's weights and the split rule's caps for the truth, so a WAT cut for
  a whole period is off);
* ``ewma``, ``model``: ``mcw run`` with that estimator (the shipped signed model for
  ``model``), its KPIs the agents' telemetry over MQTT plus the trace's radio KPIs written to
  InfluxDB as a KPI writer would;
* ``rules_priority``, ``rules_smallest_delay``: ``model`` with a policy of two classes (issue
  35): the small flow's port in a rule of that mode, urgent (priority in each WAT's queue),
  and the bulk in the default rule, ``load_balancing`` (:func:`rules_policy`).
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

import numpy as np

from tests.e2e.mptcp_bulk import CONGESTION_CONTROL
from tests.e2e.netns import PROXY_ADDR, Path
from tests.e2e.observer import Applied, Observer
from tests.e2e.reallink import PROXY_ID, agent_config, proxy_acl
from tests.integration.stack import AGENT_BINARY, REPO, XappRun, influx_write, operator_env
from tests.realstack import history
from tests.realstack.publishing import Publisher, plan
from tests.realstack.replay import save_applied
from tests.realstack.shaping import ShapedTopology
from tests.support.influxd import InfluxServer, start_influxd
from tests.support.mosquitto import MosquittoBroker, Pki, connect_client, make_pki
from tests.support.polling import free_port, stop_process, wait_until
from tests.support.redis_server import RedisServer
from twin.path_traces import PathTrace
from xapp.adapters.mqtt import topics

POLICIES = ("default", "fixed_best", "equal", "probe", "ewma", "model", "oracle",
            "rules_priority", "rules_smallest_delay")
#: The policies that run ``mcw run``, and the estimator each uses.
XAPP_POLICIES = {"ewma": "ewma", "model": "model", "rules_priority": "model",
                 "rules_smallest_delay": "model"}
CPE_ID = "cpe-0001"
BULK_PORT, ECHO_PORT, PROBE_PORT = 5301, 5302, 5303
#: The small flow: a control loop's 200-byte request every 10 ms (issue 35's), each after the
#: answer to the one before; an answer later than DEADLINE_MS is a missed deadline.
ECHO_SIZE, ECHO_EVERY_MS, DEADLINE_MS = 200, 10.0, 20.0
LEASE_S = 6.0
#: The oracle's weights are published this long before the period they are for, so they are
#: in force at its start (an agent applies a message in well under a millisecond).
ORACLE_LEAD_S = 0.1
PROBE_EVERY_S, PROBE_S, PROBE_FLOWS = 10.0, 5.0, 10
#: An xApp policy's first weights may take the xApp's start-up and one KPI period.
XAPP_READY_S = 40.0


@dataclass
class Servers:
    """The servers one bench invocation shares across its runs."""

    root: FsPath
    pki: Pki
    broker: MosquittoBroker
    influx: InfluxServer
    redis: RedisServer

    @classmethod
    def start(cls, root: FsPath) -> Servers:
        root.mkdir(parents=True, exist_ok=True)
        pki = make_pki(root / "pki", n_cpes=1)
        stack = contextlib.ExitStack()
        try:
            broker = MosquittoBroker(pki, root / "broker", acl=proxy_acl(root / "acl", CPE_ID)
                                     ).start()
            stack.callback(broker.stop)
            influx = start_influxd(root)
            stack.callback(influx.stop)
            redis = RedisServer(root / "redis").start()
        except BaseException:
            stack.close()
            raise
        stack.pop_all()
        return cls(root, pki, broker, influx, redis)

    def stop(self) -> None:
        self.broker.stop()
        self.influx.stop()
        self.redis.stop()

    def reset(self) -> None:
        """Leave nothing of the run before for the next: its retained weights, its InfluxDB
        points (KPIs, forecasts, weights an xApp would read back as history) and its Redis keys
        (SDL: the last weights, versions and state an xApp restores).  Each run's xApp then
        starts as a first deployment does, and runs stay independent of their order.  The
        servers themselves stay up: a new influxd takes seconds, emptying it milliseconds."""
        c = connect_client(self.broker, "mcw-xapp", client_id="realstack-clear")
        try:
            c.client.publish(topics.weights_topic(CPE_ID), b"", qos=1, retain=True
                             ).wait_for_publish(5)
        finally:
            c.client.disconnect()
            c.client.loop_stop()
        self.influx.empty_database()
        self.redis.flush()


@dataclass
class RunResult:
    """What one policy's run delivered: per second of the trace, and what it applied."""

    policy: str
    delivered: dict[str, list[float]]  # direction -> Mbit/s per whole second of the trace
    rtt_ms: list[float]
    #: Where the first whole second starts, in s into the trace (under one second).
    offset_s: float = 0.0
    #: direction -> (periods, k) weights and caps (inf: uncapped) in force, for the twin.
    weights: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    caps: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: direction -> TCP segments its sender retransmitted during the trace (every connection
    #: of the sender's namespace: the bulk's subflows carry nearly all of them).
    retrans: dict[str, int] = field(default_factory=dict)


def rules_policy(base: dict[str, Any], mode: str, wats: tuple[str, ...]) -> dict[str, Any]:
    """``base`` (the shipped default policy, ``load_balancing``) with one rule: the small flow's
    port in ``mode`` (``priority``: the trace's WATs in order, NR first, as an operator would
    put its cellular access; ``smallest_delay``), urgent.  The bulk takes the default rule."""
    rule: dict[str, Any] = {"name": "control", "match": {"destination_ports": [ECHO_PORT]},
                            "mode": mode, "urgent": True}
    if mode == "priority":
        rule["priority"] = list(wats)
    return {**base, "rules": [rule]}


class Run:
    """One policy on one trace: build, warm up, play, measure, tear down."""

    def __init__(self, servers: Servers, trace: PathTrace, policy: str, root: FsPath,
                 warmup_s: float = 8.0, progress: Callable[[str], None] | None = None,
                 cc: str = CONGESTION_CONTROL) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; known: {list(POLICIES)}")
        self.servers, self.trace, self.policy, self.root = servers, trace, policy, root
        self.warmup_s, self.cc = warmup_s, cc
        self.progress = progress or (lambda _s: None)
        self.topo = ShapedTopology(trace)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.notes: list[str] = []
        #: Wall clock of the trace's start, once it is set.
        self.t0: float | None = None
        #: When this run's agents started, in the observer's clock (None: no agents).
        self.agents_t: float | None = None

    # --- processes ---------------------------------------------------------------------------
    def _spawn(self, name: str, netns: str | None, cmd: list[str],
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        prefix = ["ip", "netns", "exec", netns] if netns else []
        with (self.root / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen([*prefix, *cmd], stdout=log, stderr=subprocess.STDOUT,
                                    cwd=REPO, env=env)
        self.procs[name] = proc
        return proc

    def _agent(self, role: str) -> None:
        ident = CPE_ID if role == "cpe" else PROXY_ID
        work = self.root / f"agent-{role}"
        (work / "state").mkdir(parents=True, exist_ok=True)
        cfg = work / "agent.yaml"
        cfg.write_text(agent_config(role, ident, self.servers.pki.cert(ident),
                                    self.servers.pki.ca, self.servers.broker.port,
                                    work / "state", self.topo.paths, CPE_ID))
        ns = self.topo.cpe if role == "cpe" else self.topo.proxy
        self._spawn(f"agent-{role}", ns, [str(AGENT_BINARY), "-config", str(cfg)])

    def _xapp(self, estimator: str) -> XappRun:
        s = self.servers
        doc = json.loads((REPO / "config-file.json").read_text())
        # Every tick's forecasts go to InfluxDB, for the run's history (:mod:`history`).
        doc["controls"]["loop"].update(control_period_s=self.trace.period_s, kpi_max_age_s=3.0,
                                       forecast_history_s=self.trace.period_s)
        if self.policy.startswith("rules_"):
            doc["controls"]["default_policy"] = rules_policy(
                doc["controls"]["default_policy"], self.policy.removeprefix("rules_"),
                self.trace.wats)
        config = self.root / "config-file.json"
        config.write_text(json.dumps(doc, indent=2))
        env = {**operator_env(self.root, s.pki, s.broker, s.influx, s.redis),
               "CONFIG_FILE": str(config), "MCW_LOOP_LEASE_S": str(int(LEASE_S)),
               "MCW_LOG_LEVEL": "WARNING"}
        port = free_port()
        cmd = [sys.executable, "-m", "xapp.cli", "run", "--config", str(config),
               "--http-host", "127.0.0.1", "--http-port", str(port), "--rmr", "off",
               "--sdl", "redis", "--estimator", estimator, "--grace-s", "5"]
        xapp = XappRun(cmd, env, port, self.root / "xapp.log")
        return xapp.start()

    def _radio(self, period: int) -> None:
        tr, lines = self.trace, []
        now = time.time_ns()
        for j, w in enumerate(tr.wats):
            fields = {f: float(a[period, j]) for f, a in tr.radio.items()
                      if np.isfinite(a[period, j])}
            if fields:
                text = ",".join(f"{k}={v!r}" for k, v in sorted(fields.items()))
                lines.append(f"wat_kpi,cpe={CPE_ID},wat={w},cell={w}-cell-1 {text} {now}")
        if lines and not influx_write(self.servers.influx, lines):
            self.notes.append(f"period {period}: InfluxDB refused the radio KPIs")

    # --- the run -----------------------------------------------------------------------------
    def execute(self) -> RunResult:
        self.root.mkdir(parents=True, exist_ok=True)
        started = time.time()
        self.servers.reset()
        observer = Observer(self.servers.pki, self.servers.broker.port, time.monotonic(),
                            client_id=f"realstack-observer-{time.time_ns()}")
        pub: Publisher | None = None
        xapp: XappRun | None = None
        radio = threading.Event()
        self.topo.create()
        try:
            observer.start()
            uses_agents = self.policy != "default"
            if uses_agents:
                self._spawn("relay", None, [sys.executable, "-m", "tests.e2e.nsrelay",
                                            "--netns", self.topo.cpe, "--netns",
                                            self.topo.proxy, "--port",
                                            str(self.servers.broker.port)])
                # The broker keeps the states the agents of the run before left retained.
                self.agents_t = time.monotonic() - observer.t0
                self._agent("proxy")
                self._agent("cpe")
            # Traffic and radio KPIs before the xApp, as in service, where the paths carry
            # traffic before its first decision: started on idle paths, ewma forecast 0 and in
            # 2 of 84 runs published nothing for 40 s (issue 32).  The trace still starts
            # warmup_s after its first weights (_play), so the window is as before.
            self._traffic()
            threading.Thread(target=self._radio_until, args=(radio,), name="radio",
                             daemon=True).start()
            if self.policy in XAPP_POLICIES:
                xapp = self._xapp(XAPP_POLICIES[self.policy])
                self._wait_for_xapp(observer)
            elif uses_agents:
                pub = Publisher(self.servers.broker, self.trace.wats, CPE_ID, LEASE_S)
            if self.policy == "probe":
                self._spawn("sink-proxy", self.topo.proxy, [
                    sys.executable, "-m", "tests.realstack.flows", "probe-sink", "--addr",
                    "0.0.0.0", "--port", str(PROBE_PORT)])
                self._spawn("sink-cpe", self.topo.cpe, [
                    sys.executable, "-m", "tests.realstack.flows", "probe-sink", "--addr",
                    "0.0.0.0", "--port", str(PROBE_PORT)])
            return self._play(observer, pub)
        finally:
            radio.set()
            if pub is not None:
                pub.close()
            if xapp is not None:
                xapp.stop()
                self._save_history(started)
            for proc in self.procs.values():
                stop_process(proc, 5.0)
            observer.stop()
            self.topo.close()

    def _save_history(self, started: float) -> None:
        """The xApp's KPIs, forecasts and weights of this run into the run's directory (times
        from the trace's start, or from ``started`` when the run ended before it)."""
        try:
            history.save(self.servers.influx, self.t0 or started, self.root)
        except (OSError, ValueError) as exc:  # the run's figures stand without its history
            self.notes.append(f"history not saved: {exc}")

    def _radio_until(self, stop: threading.Event) -> None:
        """The trace's radio KPIs into InfluxDB every period, as a KPI writer keeps them fresh:
        period 0's until the trace starts (the xApp's start-up and the warm-up), then the
        period the trace is in."""
        while not stop.is_set():
            t0 = self.t0
            p = 0 if t0 is None else int((time.time() - t0) // self.trace.period_s)
            self._radio(min(max(p, 0), self.trace.periods - 1))
            stop.wait(self.trace.period_s)

    def _wait_for_xapp(self, observer: Observer) -> None:
        if not wait_until(lambda: any(r.version > 0 for r in observer.snapshot()),
                          XAPP_READY_S, 0.5):
            self.notes.append(f"no weights from the xApp within {XAPP_READY_S:.0f} s")

    def _traffic(self) -> None:
        py, m = sys.executable, "tests.e2e.mptcp_bulk"
        f = "tests.realstack.flows"
        self._spawn("bulk-proxy", self.topo.proxy, [py, "-m", m, "serve", "--addr", PROXY_ADDR,
                                                     "--port", str(BULK_PORT), "--out",
                                                     str(self.root / "ul.jsonl"), "--cc",
                                                     self.cc])
        self._spawn("echo-proxy", self.topo.proxy, [py, "-m", f, "echo-serve", "--addr",
                                                     PROXY_ADDR, "--port", str(ECHO_PORT), "--cc",
                                                     self.cc, "--size", str(ECHO_SIZE)])
        # The clients retry their connects until the servers listen.
        self._spawn("bulk-cpe", self.topo.cpe, [py, "-m", m, "connect", "--addr", PROXY_ADDR,
                                                 "--port", str(BULK_PORT), "--out",
                                                 str(self.root / "dl.jsonl"), "--cc", self.cc])
        self._spawn("echo-cpe", self.topo.cpe, [py, "-m", f, "echo-connect", "--addr",
                                                 PROXY_ADDR, "--port", str(ECHO_PORT), "--out",
                                                 str(self.root / "rtt.jsonl"), "--cc", self.cc,
                                                 "--size", str(ECHO_SIZE), "--every-ms",
                                                 str(ECHO_EVERY_MS)])

    def _events(self, t0: float) -> list[tuple[float, int, Callable[[], None]]]:
        tr, ev = self.trace, []
        for p in range(tr.periods):
            at = t0 + p * tr.period_s
            if p > 0:
                ev.append((at, 1, lambda p=p: self.topo.apply(p)))
        for o in tr.outages:
            ev.append((t0 + o.start_s, 2, lambda o=o: self.topo.cut(o.wat, o.mode, True)))
            ev.append((t0 + o.start_s + o.duration_s, 2,
                       lambda o=o: self.topo.cut(o.wat, o.mode, False)))
        return sorted(ev, key=lambda e: (e[0], e[1]))

    def _policy_events(self, t0: float, pub: Publisher | None
                       ) -> list[tuple[float, int, Callable[[], None]]]:
        tr, k = self.trace, len(self.trace.wats)
        if pub is None:
            return []
        ev: list[tuple[float, int, Callable[[], None]]] = []
        if self.policy == "oracle":
            for p in range(tr.periods):
                def send(p: int = p) -> None:
                    w, c = {}, {}
                    for d in ("dl", "ul"):
                        w[d], c[d] = plan(tr.capacity(d)[p])
                    pub.send(w, c)
                ev.append((t0 + p * tr.period_s - ORACLE_LEAD_S, 0, send))
        elif self.policy in ("fixed_best", "equal"):
            if self.policy == "equal":
                w = {d: np.ones(k, np.int64) for d in ("dl", "ul")}
                fixed: tuple[dict[str, Any], dict[str, Any] | None] = (w, None)
            else:
                both = {d: plan(tr.capacity(d).mean(axis=0)) for d in ("dl", "ul")}
                fixed = ({d: v[0] for d, v in both.items()}, {d: v[1] for d, v in both.items()})
            for t in np.arange(-self.warmup_s, tr.duration_s, LEASE_S / 3):
                ev.append((t0 + float(t), 0, lambda: pub.send(*fixed)))
        elif self.policy == "probe":
            # Round-robin until the first probe ends (the paper's start).
            w = {d: np.ones(k, np.int64) for d in ("dl", "ul")}
            ev.append((t0 - self.warmup_s, 0, lambda: pub.send(w, None)))
            for t in np.arange(0.0, tr.duration_s - PROBE_S, PROBE_EVERY_S):
                ev.append((t0 + float(t), 0, lambda: self._probe(pub)))
        return ev

    def _probe(self, pub: Publisher) -> None:
        """Probe every WAT in both directions at once (separate paths), then publish weights
        in proportion to what the probes measured (rounded, as the paper rounded to 10 Mbit/s
        at its rates, to 1 Mbit/s at these)."""
        def one(d: str, p: Path, out: dict[tuple[str, str], float]) -> None:
            ns, src, dst = ((self.topo.proxy, p.px_addr, p.cpe_addr) if d == "dl"
                            else (self.topo.cpe, p.cpe_addr, PROXY_ADDR))
            res = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-m",
                                  "tests.realstack.flows", "probe-send", "--src", src, "--addr",
                                  dst, "--port", str(PROBE_PORT), "--flows", str(PROBE_FLOWS),
                                  "--seconds", str(PROBE_S), "--cc", self.cc],
                                 capture_output=True, cwd=REPO,
                                 timeout=PROBE_S + 30)
            try:
                out[(d, p.wat)] = float(json.loads(res.stdout.decode().strip())["mbps"])
            except (ValueError, KeyError):
                out[(d, p.wat)] = 0.0

        def work() -> None:
            got: dict[tuple[str, str], float] = {}
            ts = [threading.Thread(target=one, args=(d, p, got)) for d in ("dl", "ul")
                  for p in self.topo.paths]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            w, c = {}, {}
            for d in ("dl", "ul"):
                m = np.array([max(1.0, round(got.get((d, p.wat), 0.0)))
                              for p in self.topo.paths])
                w[d], c[d] = plan(m)
            pub.send(w, c)

        threading.Thread(target=work, name="probe", daemon=True).start()

    def _play(self, observer: Observer, pub: Publisher | None) -> RunResult:
        tr = self.trace
        t0 = time.time() + self.warmup_s
        self.t0 = t0
        events = sorted(self._events(t0) + self._policy_events(t0, pub),
                        key=lambda e: (e[0], e[1]))
        self.progress(f"{self.policy}: warm-up {self.warmup_s:.0f} s, trace "
                      f"{tr.duration_s:.0f} s")
        mono0 = time.monotonic() - time.time()
        retrans0: dict[str, int] = {}
        events.append((t0, -1, lambda: retrans0.update(self._retrans())))
        events.sort(key=lambda e: (e[0], e[1]))
        for at, _, fn in events:
            delay = at - time.time()
            if delay > 0:
                time.sleep(delay)  # the trace plays in real time: its schedule is the run
            try:
                fn()
            except Exception as exc:  # a failed tc or publish is a note, not a dead run
                self.notes.append(f"{at - t0:.2f} s: {exc}")
        # To the trace's end, and the last second's deliveries logged.
        time.sleep(max(0.0, t0 + tr.duration_s + 1.2 - time.time()))
        delivered = {d: self._per_second(self.root / f"{d}.jsonl", t0, tr.duration_s)
                     for d in ("dl", "ul")}
        rtts = [float(r["rtt_ms"]) for r in _jsonl(self.root / "rtt.jsonl")
                if t0 <= float(r["t"]) <= t0 + tr.duration_s]
        retrans = {d: n - retrans0.get(d, n) for d, n in self._retrans().items()}
        res = RunResult(self.policy, delivered, rtts, math.ceil(t0) - t0,
                        notes=self.notes, retrans=retrans)
        mono_t0 = t0 + mono0 - observer.t0
        res.weights, res.caps = self._applied(observer, mono_t0)
        save_applied(self.root, t0, res.weights, res.caps)
        return res

    def _retrans(self) -> dict[str, int]:
        """Segments retransmitted so far by each direction's sender (``nstat``'s absolute
        TcpRetransSegs of its namespace)."""
        out = {}
        for d, ns in (("dl", self.topo.proxy), ("ul", self.topo.cpe)):
            res = subprocess.run(["ip", "netns", "exec", ns, "nstat", "-asz", "TcpRetransSegs"],
                                 capture_output=True, text=True, check=True)
            out[d] = int(res.stdout.split()[-2]) if res.stdout.split() else 0
        return out

    @staticmethod
    def _per_second(path: FsPath, t0: float, duration_s: float) -> list[float]:
        """Mbit/s received in each whole second of the trace (0 where nothing arrived)."""
        rows = {int(r["t"]): float(r["mbps"]) for r in _jsonl(path)}
        first = math.ceil(t0)
        return [rows.get(s + 1, 0.0) for s in range(first, first + int(duration_s) - 1)]

    def _applied(self, observer: Observer, t0: float
                 ) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]]:
        """Per period, the weights and caps the agents reported in force at its middle: the
        CPE's for ``ul``, the proxy's for ``dl``; the default scheduler's (all 1, uncapped)
        where no agent runs or none was applied yet."""
        tr, k = self.trace, len(self.trace.wats)
        out_w, out_c = {}, {}
        for d, recs in (("ul", observer.snapshot()), ("dl", observer.proxy_snapshot())):
            w = np.ones((tr.periods, k), np.int64)
            c = np.full((tr.periods, k), np.inf)
            start = math.inf if self.agents_t is None else self.agents_t
            ok = sorted((r for r in recs if r.online and r.version > 0 and r.t >= start),
                        key=lambda r: r.t)
            for p in range(tr.periods):
                mid = t0 + (p + 0.5) * tr.period_s
                last: Applied | None = None
                for r in ok:
                    if r.t > mid:
                        break
                    last = r
                if last is None:
                    continue
                w[p] = [last.weights.get(x, 0) for x in tr.wats]
                c[p] = [last.caps.get(x, math.inf) for x in tr.wats]
            out_w[d], out_c[d] = w, c
        return out_w, out_c


def _jsonl(path: FsPath) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


__all__ = ["DEADLINE_MS", "POLICIES", "Run", "RunResult", "Servers"]
