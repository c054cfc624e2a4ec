"""The CPE and proxy agents outside the cluster, each in a network namespace of its own ("a site").

A site's namespace is joined to the node's by a veth pair (``site<i>`` in the node's namespace,
``wan0`` in the site's, 10.202.<i>.0/30) and routes everything to the node; the agent
reaches the broker the chart deployed through its NodePort on the node's address, with its own
certificate (mTLS, the ACL the chart rendered). The agents are the real Go agent
(``kernel-agent/bin/mcw-agent``) with the dry-run backend: CPEs ``cpe-0001``..., and one proxy
(``proxy-0001``) serving the first CPE, as the chart's ``broker.proxies`` grants it.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.stack import AGENT_BINARY
from tests.k8s.cluster import NODE_IP
from tests.k8s.host import sh
from tests.support.mosquitto import Pki
from tests.support.polling import stop_process

PROXY_ID = "proxy-0001"


@dataclass
class Site:
    index: int
    ident: str
    role: str
    netns: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def node_side(self) -> str:
        return f"10.202.{self.index}.1"

    @property
    def site_side(self) -> str:
        return f"10.202.{self.index}.2"


@dataclass
class Sites:
    """Made from inside the node's namespace (the harness has entered it)."""

    root: Path
    pki: Pki
    node_port: int
    cpes: list[str]
    sites: list[Site] = field(default_factory=list)

    def agent_config(self, site: Site) -> str:
        cert, key = self.pki.cert(site.ident)
        state = self.root / site.ident / "state"
        state.mkdir(parents=True, exist_ok=True)
        if site.role == "cpe":
            head = (f"cpe_id: {site.ident}\n"
                    # Dry-run: the interfaces are only read; lo for NR, the uplink for Wi-Fi.
                    "wats:\n  nr: {interface: lo}\n  wifi: {interface: wan0}\n"
                    "safe_weights: {nr: 1, wifi: 1}\n")
        else:
            # The operator's registry: the served CPE's site is the first (10.202.1.0/30).
            head = (f"role: proxy\nproxy_id: {site.ident}\ncpes: [{self.cpes[0]}]\n"
                    f"cpe_prefixes: {{{self.cpes[0]}: [10.202.1.0/30]}}\n"
                    "safe_weights: {nr: 1, wifi: 1, lifi: 1}\n")
        return (head
                + f"mqtt:\n  broker_url: mqtts://{NODE_IP}:{self.node_port}\n"
                f"  ca_file: {self.pki.ca}\n  cert_file: {cert}\n  key_file: {key}\n"
                "  keepalive_s: 5\n"
                "backend: dry-run\n"
                f"state_dir: {state}\nmetrics_listen: \"\"\n"
                "telemetry:\n  interval_ms: 2000\n  mptcp_only: false\nlog_level: info\n")

    def start(self) -> Sites:
        idents = [(c, "cpe") for c in self.cpes] + [(PROXY_ID, "proxy")]
        for i, (ident, role) in enumerate(idents, start=1):
            site = Site(i, ident, role, f"mcwk8s{os.getpid()}s{i}")
            self.sites.append(site)
            sh("ip", "netns", "add", site.netns)
            sh("ip", "-n", site.netns, "link", "set", "lo", "up")
            # Created in the node's namespace (where the harness is), the peer in the site's.
            sh("ip", "link", "add", f"site{i}", "type", "veth", "peer", "name", "wan0",
               "netns", site.netns)
            sh("ip", "addr", "add", f"{site.node_side}/30", "dev", f"site{i}")
            sh("ip", "link", "set", f"site{i}", "up")
            sh("ip", "-n", site.netns, "addr", "add", f"{site.site_side}/30", "dev", "wan0")
            sh("ip", "-n", site.netns, "link", "set", "wan0", "up")
            sh("ip", "-n", site.netns, "route", "add", "default", "via", site.node_side)
            work = self.root / ident
            work.mkdir(parents=True, exist_ok=True)
            cfg = work / "agent.yaml"
            cfg.write_text(self.agent_config(site))
            with (work / "agent.log").open("ab") as log:
                site.proc = subprocess.Popen(
                    ["ip", "netns", "exec", site.netns, str(AGENT_BINARY), "-config", str(cfg)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def log(self, ident: str, lines: int = 30) -> str:
        try:
            text = (self.root / ident / "agent.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def exited(self) -> list[str]:
        return [s.ident for s in self.sites if s.proc is not None and s.proc.poll() is not None]

    def stop(self) -> None:
        for s in self.sites:
            stop_process(s.proc)
            subprocess.run(["ip", "netns", "del", s.netns], capture_output=True, timeout=30)
