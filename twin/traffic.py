"""The traffic a scenario carries: flows with an offered load and what a class's match sees.

Without a :class:`Traffic` a scenario's connection is one backlogged transfer in each direction
(:mod:`twin.fluid`, :mod:`twin.rate_caps`).  A :class:`Traffic` declares the flows instead, each
with the packet fields a traffic class matches (``schemas/mqtt-weights.schema.json``
``$defs/match``: DSCP, IP protocol, the server's port and address, on the CPE the application's
cgroup) and its offered load, the same each way: ``inf`` for a backlogged transfer, a rate for
a flow that sends what it has (a control loop).  The rate-caps agents put each flow in the leaf
of the first class whose match it meets (:func:`leaf_of`), as their classifier does, and
:mod:`twin.class_queues` shares each WAT among the leaves.

``buffer_ms`` is the queue of a path the agent does not shape (the modem, the access point):
how long its buffer takes to drain at the path's rate.  The twin's scenarios model no buffers,
so it is the real-stack bench's (:mod:`twin.path_traces`: every path of its wifi-walk has 50 ms).

Mixes (:data:`MIXES`, ``mcw twin --traffic``):

``bulk``
    One backlogged transfer (TCP to port 5301): the twin's connection without a mix, with its
    figures per flow.
``control-bulk``
    The issue 35 bench's traffic: a control loop (a 200-byte request and its 200-byte answer
    every 10 ms: 0.16 Mbit/s each way, TCP to port 5302) beside a backlogged bulk transfer (TCP
    to port 5301), the ports of ``bench/bench_realstack.py``.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from xapp.core.traffic import ClassSet, TrafficMatch

#: A path's buffer when the scenario gives none (ms at the path's rate).
DEFAULT_BUFFER_MS: Final = 50.0
#: The server's address of a flow that names none (TEST-NET-1, RFC 5737).
DEFAULT_SERVER: Final = "192.0.2.1"
#: IP protocol numbers (TCP: an MPTCP connection's subflows).
TCP: Final = 6


class TrafficError(ValueError):
    """A flow or mix that cannot be simulated."""


@dataclass(frozen=True)
class Flow:
    """One application flow between the CPE and its server, both ways."""

    name: str
    #: Offered load each way, Mbit/s; ``inf``: backlogged (it takes what it is given).
    demand_mbps: float
    protocol: int = TCP
    #: The server's port (the destination of an uplink packet, the source of a downlink one).
    port: int = 0
    #: The server's address.
    server: str = DEFAULT_SERVER
    dscp: int = 0
    #: The application's cgroup v2 path on the CPE (the uplink's classifier sees it).
    cgroup: str | None = None

    def __post_init__(self) -> None:
        if not (self.demand_mbps > 0):
            raise TrafficError(f"flow {self.name}: demand_mbps must be > 0 (inf: backlogged)")
        if not 0 <= self.protocol <= 255 or not 0 <= self.port <= 65535 \
                or not 0 <= self.dscp <= 63:
            raise TrafficError(f"flow {self.name}: protocol 0-255, port 0-65535, dscp 0-63")
        try:
            ipaddress.ip_address(self.server)
        except ValueError:
            raise TrafficError(f"flow {self.name}: {self.server!r} is not an IP address") from None

    @property
    def backlogged(self) -> bool:
        return math.isinf(self.demand_mbps)

    def meets(self, match: TrafficMatch, direction: str) -> bool:
        """Whether the flow's packets of ``direction`` meet ``match`` (every key given; a list
        when any item does).  A cgroup is the CPE's: the downlink's packets carry none."""
        if match.dscp and self.dscp not in match.dscp:
            return False
        if match.protocols and self.protocol not in match.protocols:
            return False
        if match.ports and not any(lo <= self.port <= hi for lo, hi in match.ports):
            return False
        addr = ipaddress.ip_address(self.server)
        if match.prefixes and not any(addr in ipaddress.ip_network(p) for p in match.prefixes):
            return False
        if match.cgroup is not None:
            # The agent marks the sockets of the cgroup and of the cgroups below it.
            own = self.cgroup if direction == "ul" else None
            root = match.cgroup.rstrip("/")
            if own is None or not (own == match.cgroup or own.startswith(root + "/")):
                return False
        return True


@dataclass(frozen=True)
class Traffic:
    """The flows of every CPE of a scenario, and the buffer of the paths."""

    flows: tuple[Flow, ...]
    buffer_ms: float = DEFAULT_BUFFER_MS
    name: str = ""

    def __post_init__(self) -> None:
        names = [f.name for f in self.flows]
        if not names or len(set(names)) != len(names):
            raise TrafficError("a traffic mix needs at least one flow, each with its own name")
        if not any(f.backlogged for f in self.flows):
            # The loop reads the WATs' capacities from saturated subflows: without a
            # backlogged flow it would see none.
            raise TrafficError("a traffic mix needs a backlogged flow (demand inf)")
        if not 0 < self.buffer_ms <= 5000:
            raise TrafficError("buffer_ms must be in (0, 5000]")


def leaf_of(flow: Flow, classes: Sequence[ClassSet], direction: str) -> int:
    """The agent's leaf of ``flow`` among a direction's ``classes``: 1 + the index of the
    first class it meets, 0 (the default rule's) when it meets none."""
    for i, c in enumerate(classes):
        if flow.meets(c.match, direction):
            return i + 1
    return 0


#: The control loop of the issue 35 bench: 200 bytes every 10 ms each way.
CONTROL_MBPS: Final = 200 * 8 / 0.010 / 1e6
BULK_PORT, CONTROL_PORT = 5301, 5302

#: What a scenario without a mix carries: the backlogged transfer alone.
BULK_ALONE: Final = Traffic((Flow("bulk", math.inf, port=BULK_PORT),), name="bulk")

MIXES: Final[dict[str, Traffic]] = {
    "bulk": BULK_ALONE,
    "control-bulk": Traffic((Flow("control", CONTROL_MBPS, port=CONTROL_PORT),
                             Flow("bulk", math.inf, port=BULK_PORT)), name="control-bulk"),
}


def mix(name: str) -> Traffic:
    """The traffic mix ``name`` (:data:`MIXES`)."""
    try:
        return MIXES[name]
    except KeyError:
        raise TrafficError(f"unknown traffic {name!r}; known: {sorted(MIXES)}") from None
