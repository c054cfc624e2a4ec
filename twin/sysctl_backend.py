"""Dry-run kernel backend: writes the 5G-CLARITY WRR sysctls into a directory tree.

The 5G-CLARITY WRR kernel (MPTCP v0.96 + WRR v0.5) is driven by three files::

    <root>/proc/sys/net/mptcp/mptcp_scheduler              roundrobin
    <root>/sys/module/mptcp_rr/parameters/cwnd_limited     N
    <root>/proc/sys/net/mptcp/mptcp_wrr_li_weights         src_ip dst_ip weight src_port dst_port

The weights file is a flat, space-separated list of 5-tuples, one per rule.  IPs are the
decimal value of the address's network-byte-order u32 read as a little-endian host integer
(10.0.0.20 -> 335544330); ports are in network byte order (``htons``), 0 is a wildcard.  With
``root=/`` this is what the CPE agent (``kernel-agent/``, Go) writes on a real CPE; the twin's
demo writes into a temporary tree instead.  The shared vectors in
``schemas/testdata/wrr-sysctl-vectors.json`` pin the format for both implementations.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from xapp.files import atomic_write

SCHEDULER_PATH = "proc/sys/net/mptcp/mptcp_scheduler"
CWND_LIMITED_PATH = "sys/module/mptcp_rr/parameters/cwnd_limited"
WEIGHTS_PATH = "proc/sys/net/mptcp/mptcp_wrr_li_weights"

#: Example source addresses of the demo CPE's interfaces, one per WAT (documentation only).
DEMO_SOURCE_IPS: dict[str, str] = {"nr": "10.0.0.20", "wifi": "10.0.1.20", "lifi": "10.0.2.20"}


class SysctlFormatError(ValueError):
    """A tuple that cannot be written (bad address, port or weight)."""


@dataclass(frozen=True)
class WrrTuple:
    """One rule of ``mptcp_wrr_li_weights``: subflows matching it get ``weight``."""

    src_ip: str
    dst_ip: str
    weight: int
    src_port: int = 0
    dst_port: int = 0


def ip_to_kernel(ip: str) -> int:
    """The decimal form the kernel expects: network-order bytes read little-endian."""
    try:
        packed = ipaddress.IPv4Address(ip).packed
    except ValueError as exc:
        raise SysctlFormatError(f"not an IPv4 address: {ip!r}") from exc
    return int.from_bytes(packed, "little")


def port_to_kernel(port: int) -> int:
    """``htons(port)`` as the host integer a little-endian kernel prints."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise SysctlFormatError(f"port must be an integer in 0..65535, got {port!r}")
    return int.from_bytes(port.to_bytes(2, "big"), "little")


def format_weights(tuples: Sequence[WrrTuple]) -> str:
    """The text of ``mptcp_wrr_li_weights`` for ``tuples`` (no trailing newline)."""
    parts: list[str] = []
    for t in tuples:
        if isinstance(t.weight, bool) or not isinstance(t.weight, int) or not 0 <= t.weight <= 255:
            raise SysctlFormatError(f"weight must be an integer in 0..255, got {t.weight!r}")
        parts += [str(ip_to_kernel(t.src_ip)), str(ip_to_kernel(t.dst_ip)), str(t.weight),
                  str(port_to_kernel(t.src_port)), str(port_to_kernel(t.dst_port))]
    return " ".join(parts)


class DryRunBackend:
    """Writes the WRR sysctls under ``root`` and verifies them by reading back.

    Not safe for concurrent use.
    """

    def __init__(self, root: Path, source_ips: Mapping[str, str] | None = None,
                 dst_ip: str = "0.0.0.0") -> None:
        self.root = Path(root)
        self.source_ips = dict(source_ips or DEMO_SOURCE_IPS)
        self.dst_ip = dst_ip
        self.writes = 0

    def tuples(self, weights: Mapping[str, int]) -> list[WrrTuple]:
        unknown = sorted(set(weights) - set(self.source_ips))
        if unknown:
            raise SysctlFormatError(f"no source address for WAT {unknown}")
        return [WrrTuple(self.source_ips[w], self.dst_ip, int(v)) for w, v in weights.items()]

    def apply(self, weights: Mapping[str, int]) -> str:
        """Select the WRR scheduler, set cwnd_limited=N, write the weights; returns the text."""
        text = format_weights(self.tuples(weights))  # validate before touching any file
        atomic_write(self.root / SCHEDULER_PATH, "roundrobin\n")
        atomic_write(self.root / CWND_LIMITED_PATH, "N\n")
        atomic_write(self.root / WEIGHTS_PATH, text + "\n")
        got = (self.root / WEIGHTS_PATH).read_text().strip()
        if got != text:
            raise OSError(f"read back {got!r} after writing {text!r}")
        self.writes += 1
        return text
