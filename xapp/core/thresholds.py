"""RTT and loss thresholds (ATSSS's RTT and packet-loss-rate thresholds), in every steering mode.

A WAT whose measured RTT exceeds its ``rtt_max_ms``, or whose loss exceeds its ``loss_max_pct``,
is not used by the policy (or the rule) that sets them, unless no usable WAT is within them:
then every usable WAT stays, as a set with nothing to send on would stop the traffic altogether.

What is measured: ``rtt_ms`` is the agent's smoothed RTT of the WAT's subflows; loss is
``retrans_pct``, the share of the segments the agent's subflows on the WAT retransmitted in the
telemetry interval (tcp_info), per direction at its sender.  The radio KPI ``loss`` is not used:
it counts losses before the link's own retransmissions (HARQ, 802.11 retries) repaired them,
which is not what the traffic sees.  An unknown value (NaN: not reported, or no segments sent)
crosses no threshold.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from xapp.core.policy import Policy

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]

#: The KPI column thresholds read loss from.
LOSS_COLUMN = "retrans_pct"


def limits(policy: Policy, wats: tuple[str, ...]) -> tuple[Array, Array]:
    """Per WAT of ``wats``: the RTT (ms) and loss (%) thresholds, inf where none."""
    def row(value: float | None) -> float:
        return np.inf if value is None else value
    return (np.array([row(policy.rtt_threshold(w)) for w in wats], dtype=np.float64),
            np.array([row(policy.loss_threshold(w)) for w in wats], dtype=np.float64))


def over(policy: Policy, wats: tuple[str, ...], rtt: Array, loss: Array) -> Mask:
    """(n, k): the WAT's measured RTT or loss crosses its threshold (NaN crosses none)."""
    rtt_max, loss_max = limits(policy, wats)
    with np.errstate(invalid="ignore"):
        return np.asarray((np.asarray(rtt) > rtt_max) | (np.asarray(loss) > loss_max),
                          dtype=bool)


def within(usable: Mask, crossed: Mask) -> Mask:
    """The usable WATs within their thresholds; every usable WAT in rows where none is."""
    keep = usable & ~crossed
    return np.where(keep.any(axis=-1, keepdims=True), keep, usable)


def over_one(policy: Policy, wat: str, rtt: float | None, loss: float | None) -> bool:
    """:func:`over` of one WAT (None: unknown)."""
    r, lo = policy.rtt_threshold(wat), policy.loss_threshold(wat)
    return bool((r is not None and rtt is not None and rtt > r)
                or (lo is not None and loss is not None and loss > lo))


def reason_suffix(dropped: Mapping[str, bool], usable_left: bool) -> str:
    """What the thresholds did, for a decision's reason: the WATs left out, or that every
    usable WAT is over (and kept)."""
    names = [w for w, d in dropped.items() if d]
    if not names:
        return ""
    if usable_left:
        return "+over_threshold:" + ",".join(names)
    return "+all_over_threshold"
