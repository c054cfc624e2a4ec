"""One CPE agent and one proxy agent (both ``mptcp-shares``) on ONE real MPTCP connection.

The network is ``netns.Topology`` (two WATs, tbf-shaped links); the agents are the real binary
with the documented config, run by ``ip netns exec`` in the CPE's and the proxy's namespace; they
reach the run's Mosquitto through ``nsrelay``.  ``mptcp_bulk`` sends both ways on one connection
and logs what each end receives per second: the delivered uplink (at the proxy) and downlink
(at the CPE)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path as FsPath

from tests.e2e.netns import PROXY_ADDR, Path, Topology
from tests.integration.stack import AGENT_BINARY
from tests.support.mosquitto import REPO, Pki
from tests.support.polling import stop_process, wait_until

PROXY_ID = "proxy-0001"
BULK_PORT = 5301
# Modest rates: two cores carry both directions and the rest of the run.
PATHS = [Path("nr", 1, 16), Path("wifi", 2, 8)]
#: Where each agent serves /metrics inside its own namespace (the relay exposes it outside).
METRICS_INNER_PORT = 9464


def proxy_acl(out: FsPath, cpe_id: str, cpes: Sequence[str] = ()) -> FsPath:
    """The shipped ACL with the proxy's grants for ``cpe_id`` and each of ``cpes`` (and
    ``cpe_id``) granted its own shard (``broker/make-acl.sh``)."""
    text = subprocess.run(["bash", str(REPO / "broker" / "make-acl.sh"),
                           "--cpes", ",".join([cpe_id, *cpes]), f"{PROXY_ID}:{cpe_id}"],
                          capture_output=True, check=True, timeout=60).stdout.decode()
    out.write_text(text)
    return out


def agent_config(role: str, ident: str, cert: tuple[FsPath, FsPath], ca: FsPath,
                 broker_port: int, state: FsPath, paths: list[Path], cpe_id: str,
                 metrics_listen: str = "") -> str:
    links = ", ".join(f"{p.wat}: {p.mbit}" for p in paths)
    registry = ", ".join(f"{p.cpe_addr.rsplit('.', 1)[0]}.0/24" for p in paths)
    # Safe weights in proportion to the link rates: before the xApp speaks, each WAT gets its share.
    safe = ", ".join(f"{p.wat}: {p.mbit}" for p in paths)
    head = (f"cpe_id: {ident}\nwats:\n" + "".join(f"  {p.wat}: {{interface: {p.ifc}}}\n"
                                                  for p in paths)
            if role == "cpe" else f"role: proxy\nproxy_id: {ident}\ncpes: [{cpe_id}]\n"
            # The operator's registry: which addresses are the CPE's own is never its claim alone.
            f"cpe_prefixes: {{{cpe_id}: [{registry}]}}\n")
    return (head
            + f"mqtt: {{broker_url: \"mqtts://127.0.0.1:{broker_port}\", ca_file: {ca}, "
            f"cert_file: {cert[0]}, key_file: {cert[1]}, keepalive_s: 5}}\n"
            f"backend: mptcp-shares\nmptcp_shares: {{link_mbps: {{{links}}}}}\n"
            f"safe_weights: {{{safe}}}\nstate_dir: {state}\nmetrics_listen: \"{metrics_listen}\"\n"
            "telemetry: {interval_ms: 1000}\nlog_level: info\n")


@dataclass
class RealLink:
    root: FsPath
    pki: Pki
    broker_port: int
    cpe_id: str
    #: Outside ports the agents' /metrics are exposed on, by role ("cpe", "proxy"); empty:
    #: the agents serve no metrics.
    metrics_ports: dict[str, int] = field(default_factory=dict)
    topo: Topology = field(default_factory=lambda: Topology(list(PATHS)))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def ul_file(self) -> FsPath:
        return self.root / "delivered-ul.jsonl"

    @property
    def dl_file(self) -> FsPath:
        return self.root / "delivered-dl.jsonl"

    def _spawn(self, name: str, netns: str | None, cmd: list[str]) -> None:
        prefix = ["ip", "netns", "exec", netns] if netns else []
        with (self.root / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen([*prefix, *cmd], stdout=log,
                                                stderr=subprocess.STDOUT, cwd=REPO)

    def start_agent(self, role: str) -> None:
        ident = self.cpe_id if role == "cpe" else PROXY_ID
        work = self.root / f"agent-{role}"
        (work / "state").mkdir(parents=True, exist_ok=True)
        cfg = work / "agent.yaml"
        cfg.write_text(agent_config(role, ident, self.pki.cert(ident), self.pki.ca,
                                    self.broker_port, work / "state", self.topo.paths,
                                    self.cpe_id,
                                    f"127.0.0.1:{METRICS_INNER_PORT}"
                                    if role in self.metrics_ports else ""))
        ns = self.topo.cpe if role == "cpe" else self.topo.proxy
        self._spawn(f"agent-{role}", ns, [str(AGENT_BINARY), "-config", str(cfg)])

    def start(self) -> RealLink:
        self.root.mkdir(parents=True, exist_ok=True)
        self.topo.create()
        try:
            expose = [a for role, port in self.metrics_ports.items() for a in (
                "--expose", f"{self.topo.cpe if role == 'cpe' else self.topo.proxy}="
                            f"{METRICS_INNER_PORT}:{port}")]
            self._spawn("relay", None, [sys.executable, "-m", "tests.e2e.nsrelay", "--netns",
                                        self.topo.cpe, "--netns", self.topo.proxy, "--port",
                                        str(self.broker_port), *expose])
            # The proxy agent first: it selects the userspace path manager in its namespace,
            # which must happen before the connection exists.
            self.start_agent("proxy")
            self.start_agent("cpe")
            # Connected through the relay: their backends are set up (the proxy's path
            # manager selected) and the CPE's state, with its addresses, is on its way to the
            # proxy, which matches the downlink's subflows by them.
            if not wait_until(lambda: all(self.logged(f"agent-{role}", "mqtt connected")
                                          for role in ("proxy", "cpe")), 30, 0.1):
                raise RuntimeError(f"the agents did not connect: see {self.root}/agent-*.log")
            bulk = [sys.executable, "-m", "tests.e2e.mptcp_bulk"]
            self._spawn("bulk-proxy", self.topo.proxy, [*bulk, "serve", "--addr", PROXY_ADDR,
                                                         "--port", str(BULK_PORT),
                                                         "--out", str(self.ul_file)])
            # The client retries its connect until the server listens.
            self._spawn("bulk-cpe", self.topo.cpe, [*bulk, "connect", "--addr", PROXY_ADDR,
                                                     "--port", str(BULK_PORT),
                                                     "--out", str(self.dl_file)])
        except BaseException:
            self.stop()
            raise
        return self

    def logged(self, name: str, msg: str) -> bool:
        """Whether process ``name``'s JSON log has a line whose message is ``msg``."""
        path = self.root / f"{name}.log"
        return path.exists() and f'"msg":"{msg}"' in path.read_text(errors="replace")

    def delivered(self, direction: str) -> list[tuple[float, float]]:
        """(wall clock s, Mbit/s delivered in the second ending then) for ``ul`` or ``dl``."""
        path = self.ul_file if direction == "ul" else self.dl_file
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [(float(r["t"]), float(r["mbps"])) for r in rows]

    def mean(self, direction: str, t0: float, t1: float) -> float | None:
        """Mean delivered Mbit/s over the whole seconds within wall clock [t0, t1]."""
        xs = [m for t, m in self.delivered(direction) if t0 + 1 <= t <= t1]
        return sum(xs) / len(xs) if xs else None

    def best_window(self, direction: str, window: int, above: float,
                    timeout: float) -> float | None:
        """The mean of the first ``window`` consecutive seconds delivering more than ``above``
        Mbit/s on average, waiting up to ``timeout`` s; otherwise the best such mean seen.

        One fixed window is not enough: per-second deliveries on a multipath connection swing
        by a factor of three (reordering across paths of different delay), so a window that
        happens to hold the ramp-up or one stall says nothing about whether both WATs carry."""
        def means() -> list[float]:
            xs = [m for _, m in self.delivered(direction)]
            return [sum(xs[i:i + window]) / window for i in range(len(xs) - window + 1)]

        wait_until(lambda: any(m > above for m in means()), timeout, 1.0)
        seen = means()  # the windows only grow: the first above stays the first
        return next((m for m in seen if m > above), max(seen, default=None))

    def recovered_at(self, since: float, above: float, timeout: float) -> float | None:
        """The first second after ``since`` in which both directions delivered more than
        ``above`` Mbit/s, waiting up to ``timeout`` s for it; None if it never came."""
        def first() -> float | None:
            ul = {t: m for t, m in self.delivered("ul") if t > since + 1}
            dl = {t: m for t, m in self.delivered("dl") if t > since + 1}
            return min((t for t in ul if t in dl and ul[t] > above and dl[t] > above),
                       default=None)

        wait_until(lambda: first() is not None, max(0.0, since + timeout - time.time()), 0.5)
        return first()

    @property
    def sum_mbit(self) -> float:
        return float(sum(p.mbit for p in self.topo.paths))

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_process(proc)
        self.topo.close()
