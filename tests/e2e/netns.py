"""One real MPTCP connection's network: a CPE, a router and a proxy namespace, one rate-limited
link per WAT, in the shape of ``kernel-agent/integration`` (``newSharesTopology``).

Each WAT is a pair of veths (CPE-router, router-proxy) shaped by a tbf at the router's egress in
both directions, so the link is the bottleneck whatever the agents do at the ends (their HTB caps
sit at the CPE's egress for the uplink and the proxy's for the downlink).  Names carry the run's
pid so that two runs (or a crashed one) never collide; ``close`` deletes the namespaces, which
deletes every veth and qdisc in them."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

PROXY_ADDR = "10.32.0.2"


@dataclass(frozen=True)
class Path:
    """One WAT's link: its name, index (addresses 10.34.i.x / 10.35.i.x) and rate."""

    wat: str
    index: int
    mbit: int

    @property
    def ifc(self) -> str:
        return f"{self.wat}0"

    @property
    def cpe_addr(self) -> str:
        return f"10.34.{self.index}.1"

    @property
    def rtr_addr(self) -> str:
        return f"10.34.{self.index}.2"

    @property
    def rq_addr(self) -> str:
        return f"10.35.{self.index}.1"

    @property
    def px_addr(self) -> str:
        return f"10.35.{self.index}.2"


def sh(*cmd: str) -> None:
    """Run a setup command; its stderr goes into the exception, as setup must not half-fail."""
    res = subprocess.run(cmd, capture_output=True, timeout=20)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.decode(errors='replace').strip()}")


@dataclass
class Topology:
    paths: list[Path]
    prefix: str = field(default_factory=lambda: f"mcwe2e{os.getpid()}")
    buffer_ms: int = 50

    @property
    def cpe(self) -> str:
        return f"{self.prefix}c"

    @property
    def router(self) -> str:
        return f"{self.prefix}r"

    @property
    def proxy(self) -> str:
        return f"{self.prefix}p"

    def _shaper(self, p: Path) -> list[str]:
        return ["tbf", "rate", f"{p.mbit}mbit", "burst", "32kb", "latency", f"{self.buffer_ms}ms"]

    def create(self) -> Topology:
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def _create(self) -> None:
        cpe, rtr, prx = self.cpe, self.router, self.proxy
        for ns in (cpe, rtr, prx):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.mptcp.enabled=1",
               "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
        sh("ip", "-n", prx, "addr", "add", f"{PROXY_ADDR}/32", "dev", "lo")
        sh("ip", "netns", "exec", rtr, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        for p in self.paths:
            table = str(101 + p.index)
            for cmd in (
                ["ip", "-n", cpe, "link", "add", p.ifc, "type", "veth", "peer", "name",
                 f"r{p.wat}", "netns", rtr],
                ["ip", "-n", rtr, "link", "add", f"q{p.wat}", "type", "veth", "peer", "name",
                 f"x{p.wat}", "netns", prx],
                ["ip", "-n", cpe, "addr", "add", f"{p.cpe_addr}/24", "dev", p.ifc],
                ["ip", "-n", rtr, "addr", "add", f"{p.rtr_addr}/24", "dev", f"r{p.wat}"],
                ["ip", "-n", rtr, "addr", "add", f"{p.rq_addr}/24", "dev", f"q{p.wat}"],
                ["ip", "-n", prx, "addr", "add", f"{p.px_addr}/24", "dev", f"x{p.wat}"],
                ["ip", "-n", cpe, "link", "set", p.ifc, "up"],
                ["ip", "-n", rtr, "link", "set", f"r{p.wat}", "up"],
                ["ip", "-n", rtr, "link", "set", f"q{p.wat}", "up"],
                ["ip", "-n", prx, "link", "set", f"x{p.wat}", "up"],
                # Source routing: a subflow from a WAT's address leaves by that WAT and
                # reaches the proxy over the same path's link, both ways.
                ["ip", "-n", cpe, "rule", "add", "from", p.cpe_addr, "table", table],
                ["ip", "-n", cpe, "route", "add", "default", "via", p.rtr_addr, "dev", p.ifc,
                 "table", table],
                ["ip", "-n", rtr, "rule", "add", "from", f"10.34.{p.index}.0/24", "table", table],
                ["ip", "-n", rtr, "route", "add", PROXY_ADDR, "via", p.px_addr, "dev",
                 f"q{p.wat}", "table", table],
                ["ip", "-n", prx, "route", "add", f"10.34.{p.index}.0/24", "via", p.rq_addr,
                 "dev", f"x{p.wat}"],
                ["ip", "netns", "exec", rtr, "tc", "qdisc", "add", "dev", f"q{p.wat}", "root",
                 *self._shaper(p)],
                ["ip", "netns", "exec", rtr, "tc", "qdisc", "add", "dev", f"r{p.wat}", "root",
                 *self._shaper(p)],
                # The CPE's in-kernel path manager opens a subflow from every WAT address.
                ["ip", "-n", cpe, "mptcp", "endpoint", "add", p.cpe_addr, "dev", p.ifc,
                 "subflow"],
            ):
                sh(*cmd)
        first = self.paths[0]
        sh("ip", "-n", cpe, "route", "add", "default", "via", first.rtr_addr)
        for ns in (cpe, prx):
            sh("ip", "-n", ns, "mptcp", "limits", "set", "subflows", "4", "add_addr_accepted", "4")
            # Multipath reorders across paths of different delay: the default socket buffers
            # cap the aggregate below the sum of the paths (as the Go netns tests found).
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w",
               "net.ipv4.tcp_rmem=4096 131072 33554432", "net.ipv4.tcp_wmem=4096 16384 33554432")

    def set_link(self, wat: str, up: bool) -> None:
        """The WAT's CPE interface down or up: what a lost radio looks like to the agent."""
        p = next(p for p in self.paths if p.wat == wat)
        sh("ip", "-n", self.cpe, "link", "set", p.ifc, "up" if up else "down")
        if up:
            # Link down removed the interface's routes; the subflow's table needs its default.
            subprocess.run(["ip", "-n", self.cpe, "route", "replace", "default", "via",
                            p.rtr_addr, "dev", p.ifc, "table", str(101 + p.index)],
                           capture_output=True, timeout=10)

    def close(self) -> None:
        for ns in (self.cpe, self.router, self.proxy):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)

    def __enter__(self) -> Topology:
        return self.create()

    def __exit__(self, *_exc: object) -> None:
        self.close()
