"""What each flow of a scenario's traffic got over a run: Mbit/s per WAT and its packets' delay.

:class:`FlowStats` adds up :class:`twin.class_queues.Shares` block by block.  A flow's delay on a
WAT is the WAT's RTT (the scenario's, what the sender measures without a standing queue) plus
the wait of :mod:`twin.class_queues`; percentiles are over its packets (each step and CPE
weighted by the rate it sent there), kept as histograms of 100 bins per decade from 0.01 ms
(2.3 % wide), so that a run of many CPEs needs no per-step arrays; a percentile is the mean of
the delays in its bin (exact when they are one value, as a full buffer's is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from twin.class_queues import Shares
from twin.traffic import Flow

Array = NDArray[np.float64]

BINS_PER_DECADE: Final = 100
LOWEST_MS: Final = 0.01
DECADES: Final = 7
#: Bin 0 holds what is under :data:`LOWEST_MS` (a wait of zero).
N_BINS: Final = BINS_PER_DECADE * DECADES + 1
#: The issue 35 bench's deadline: a control loop's answer later than this missed it.
DEADLINE_MS: Final = 20.0
PERCENTILES: Final = (50, 95, 99)


def _bins(ms: Array) -> NDArray[np.intp]:
    with np.errstate(divide="ignore", invalid="ignore"):
        i = np.floor(np.log10(np.maximum(ms, 1e-300) / LOWEST_MS) * BINS_PER_DECADE) + 1
    out: NDArray[np.intp] = np.clip(np.nan_to_num(i, nan=0.0, neginf=0.0), 0,
                                    N_BINS - 1).astype(np.intp)
    return out


def percentile(hist: Array, q: float) -> float | None:
    """The ``q``-th percentile (0-100) of a histogram (2, N_BINS): each bin's mass and the
    sum of mass x delay in it; None when it holds none."""
    mass = hist[0]
    total = float(mass.sum())
    if total <= 0:
        return None
    at = min(int(np.searchsorted(np.cumsum(mass), q / 100.0 * total)), N_BINS - 1)
    return float(hist[1, at] / mass[at]) if mass[at] > 0 else 0.0


def _count(hist: Array, cells: NDArray[np.intp], ms: Array, w: Array) -> None:
    """Add delays ``ms`` of weight ``w`` to ``hist`` (..., 2, N_BINS) at flat ``cells`` (the
    index of the histogram among the leading axes)."""
    shape = (*hist.shape[:-2], hist.shape[-1])
    flat = cells * hist.shape[-1] + _bins(ms)
    size = int(np.prod(shape))
    hist[..., 0, :] += np.bincount(flat, weights=w, minlength=size).reshape(shape)
    hist[..., 1, :] += np.bincount(flat, weights=w * ms, minlength=size).reshape(shape)


class FlowStats:
    """One direction's flows over a run (all CPEs pooled)."""

    def __init__(self, flows: Sequence[Flow], wats: tuple[str, ...]) -> None:
        self.flows = tuple(flows)
        self.wats = wats
        f, k = len(flows), len(wats)
        self.rows = 0  # (step, CPE) rows added
        self.mbit = np.zeros((f, k))  # Mbit/s summed over rows
        self.used = np.zeros((f, k))  # rows the flow sent on the WAT
        self.rtt = np.zeros((f, k, 2, N_BINS))
        self.queue = np.zeros((f, k, 2, N_BINS))
        self.overall = np.zeros((f, 2, N_BINS))
        self.late = np.zeros(f)  # Mbit/s summed where the RTT was over the deadline
        #: The class (rule name, "" for the default rule) each flow was last in, CPE 0.
        self.classes = [""] * f

    def add(self, shares: Shares, base_rtt_ms: Array) -> None:
        """A block: ``shares`` of ``(b, n)`` rows and the WATs' RTT (b, n, k)."""
        rate = shares.rate
        b, n, f, k = rate.shape
        self.rows += b * n
        self.mbit += rate.sum(axis=(0, 1))
        sent = rate > 0
        self.used += sent.sum(axis=(0, 1))
        rtt = np.where(sent, base_rtt_ms[:, :, None, :] + shares.queue_ms, np.nan)
        cell = np.broadcast_to(np.arange(f * k).reshape(f, k)[None, None], rate.shape)[sent]
        w = rate[sent]
        _count(self.rtt, cell, rtt[sent], w)
        _count(self.queue, cell, shares.queue_ms[sent], w)
        _count(self.overall, cell // k, rtt[sent], w)
        self.late += np.where(sent & (rtt > DEADLINE_MS), rate, 0.0).sum(axis=(0, 1, 3))

    def summary(self) -> dict[str, Any]:
        """Per flow: its class, Mbit/s (mean per CPE) in all and per WAT, and for a flow of
        finite demand its RTT percentiles, the share of its packets over the deadline and, per
        WAT it used, the share of the time, the RTT and the wait."""
        rows = max(self.rows, 1)
        out: dict[str, Any] = {}
        for i, flow in enumerate(self.flows):
            doc: dict[str, Any] = {
                "class": self.classes[i] or "default",
                "demand_mbps": None if flow.backlogged else round(flow.demand_mbps, 3),
                "mbps": round(float(self.mbit[i].sum()) / rows, 3),
                "per_wat_mbps": {w: round(float(v) / rows, 3)
                                 for w, v in zip(self.wats, self.mbit[i], strict=True)}}
            if not flow.backlogged:
                doc["rtt_ms"] = _quantiles(self.overall[i])
                sent = float(self.mbit[i].sum())
                doc["deadline_ms"] = DEADLINE_MS
                doc["over_deadline_pct"] = (round(100.0 * float(self.late[i]) / sent, 2)
                                            if sent > 0 else None)
                doc["wats"] = {
                    w: {"time_pct": round(100.0 * float(self.used[i, j]) / rows, 1),
                        "rtt_ms": _quantiles(self.rtt[i, j]),
                        "queue_ms": _quantiles(self.queue[i, j])}
                    for j, w in enumerate(self.wats) if self.used[i, j] > 0}
            out[flow.name] = doc
        return out


def _quantiles(hist: Array) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for q in PERCENTILES:
        v = percentile(hist, q)
        out[f"p{q}"] = None if v is None else round(v, 2)
    return out
