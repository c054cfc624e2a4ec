"""The real-stack bench's network: :class:`ShapedTopology` plays a path trace on the router's
egress of each path with ``tc`` (HTB rate, bfifo buffer) and ``iptables`` (random loss, cuts)."""

from __future__ import annotations

import subprocess
import threading

from tests.e2e.netns import Path, Topology
from twin.path_traces import PathTrace

#: The shapers' bucket: above the largest GRO packet (64 KiB), the same at every rate.
TBF_BURST_BYTES = 65536 + 1514


class ShapedTopology(Topology):
    """:class:`Topology` whose paths follow a trace: at the router's egress of each path, in
    both directions, a tbf (rate, and the buffer as its latency) and an iptables rule that
    drops the trace's share of packets at random (``statistic``), or all of them while the path
    is cut (``drop`` outages).

    One-way delay is not played: this machine's kernel has no netem
    (``CONFIG_NET_SCH_NETEM`` is not set) and no fq for timestamp-based delay, so a path's RTT
    is its queue's (the buffer fills under bulk traffic: bufferbloat is played, propagation
    delay is not).  ``delay_ms`` stays in the trace for the twin and for a kernel that has
    netem."""

    def __init__(self, trace: PathTrace) -> None:
        nominal = trace.nominal_mbit()
        super().__init__([Path(w, i + 1, int(nominal[w])) for i, w in enumerate(trace.wats)])
        self.trace = trace
        self.lock = threading.Lock()
        self._cut: dict[str, str] = {}
        self._shaped: dict[str, tuple[str, int]] = {}
        self.period = 0

    def _create(self) -> None:
        super()._create()
        self.apply(0)

    def _tc_lines(self, period: int) -> list[str]:
        """The ``tc`` commands that bring every path to period ``period``'s rate and buffer:
        only where they changed, and never by replacing a queue.  Replacing the root ``tbf``
        every period (this bench's first form) flushed each path's queue once a second, a
        burst loss on every path at once that no real link has: with constant rates the
        connection ran at 0.9 of the sum through the warm-up and swung between 1 and 65 Mbit/s
        once the periods started.  HTB's class change and bfifo's limit change keep what is
        queued."""
        tr, out = self.trace, []
        for j, p in enumerate(self.paths):
            for dev, rate in ((f"r{p.wat}", tr.rate_dl[period, j]),
                              (f"q{p.wat}", tr.rate_ul[period, j])):
                # The queue as a byte limit, so the buffer is its time at the rate whatever
                # the burst.  One burst for every rate, above the largest GRO packet.
                limit = max(3028, int(rate * 1e6 / 8 * float(tr.buffer_ms[period, j]) / 1000))
                shape = (f"{rate:.4f}", limit)
                before = self._shaped.get(dev)
                if before == shape:
                    continue
                verb = "add" if before is None else "change"
                if before is None:
                    out.append(f"qdisc replace dev {dev} root handle 1: htb default 1")
                if before is None or before[0] != shape[0]:
                    out.append(f"class {verb} dev {dev} parent 1: classid 1:1 htb rate "
                               f"{shape[0]}mbit ceil {shape[0]}mbit burst {TBF_BURST_BYTES} "
                               f"cburst {TBF_BURST_BYTES} quantum 1514")
                if before is None or before[1] != limit:
                    out.append(f"qdisc {'add' if before is None else 'change'} dev {dev} "
                               f"parent 1:1 handle 10: bfifo limit {limit}")
                self._shaped[dev] = shape
        return out

    def _drop_rules(self, period: int) -> str:
        tr, rules = self.trace, ["*filter", ":FORWARD ACCEPT [0:0]"]
        for j, p in enumerate(self.paths):
            # A carrier lost at the CPE is a cut at the router too: otherwise the CPE routes
            # the WAT's uplink out of another interface and the router carries it on.
            cut = p.wat in self._cut
            loss = float(tr.loss_pct[period, j]) / 100.0
            for dev in (f"r{p.wat}", f"q{p.wat}"):
                if cut:
                    rules.append(f"-A FORWARD -o {dev} -j DROP")
                elif loss > 0:
                    rules.append(f"-A FORWARD -o {dev} -m statistic --mode random "
                                 f"--probability {loss:.6f} -j DROP")
        return "\n".join([*rules, "COMMIT", ""])

    def apply(self, period: int) -> None:
        """The paths as period ``period`` of the trace has them (cuts in force stay)."""
        with self.lock:
            self.period = period
            if lines := self._tc_lines(period):
                self._run(["tc", "-batch", "-"], "\n".join(lines))
            self._run(["iptables-restore"], self._drop_rules(period))

    def cut(self, wat: str, mode: str, on: bool) -> None:
        """Start (``on``) or end an outage of ``wat``'s path."""
        with self.lock:
            if on:
                self._cut[wat] = mode
            else:
                self._cut.pop(wat, None)
            self._run(["iptables-restore"], self._drop_rules(self.period))
            if mode == "down":
                self.set_link(wat, not on)

    def _run(self, cmd: list[str], stdin: str) -> None:
        res = subprocess.run(["ip", "netns", "exec", self.router, *cmd], input=stdin.encode(),
                             capture_output=True, timeout=20)
        if res.returncode != 0:
            raise RuntimeError(f"{cmd[0]}: {res.stderr.decode(errors='replace').strip()}")
