"""The rate-caps backend (the CPE agent's ``mptcp-shares`` on mainline Linux) as a fluid model.

Mainline MPTCP's default scheduler sends on whichever subflow can take data soonest; the
backend caps each WAT's egress (an HTB class on its interface) and flags a WAT at weight 0
backup.  With a backlogged sender every subflow that can take data gets it, so each WAT runs at
its own bottleneck: ``min(cap_i, C_i)``, the cap or its path's capacity, whichever is lower.
Unlike WRR (:mod:`twin.fluid`) the WATs are not coupled: a WAT that delivers less than its share
does not hold the others back.

Which caps the agent sets (``kernel-agent/backend/mptcpshares``, ``CapsBps``), mirrored by
:func:`agent_caps`:

* when the weights message carries ``caps_mbps`` for the set, each WAT with a weight above 0 is
  capped at its cap, uncapped when the message gives it none;
* otherwise at its share of ``T = min over weighted WATs of link_i / share_i``, the largest
  total the configured link rates allow;
* either way a WAT whose cap reaches its link rate is uncapped (its link is its limit), and a
  WAT at weight 0 is uncapped but backup: it carries nothing while a WAT of weight above 0 is
  up, and its whole capacity when none is (the default scheduler falls back on backup
  subflows only then).

Transport efficiency is 1: the figures compared with this model (``bench/bench_shares.py``,
``kernel-agent/integration``'s ``TestNetnsShares``) count bytes on the CPE's interfaces, the same
Ethernet frames the router's tbf shapes and the agent's HTB caps, so headers cost nothing in
the comparison.  What the model leaves out, and what a measurement below it shows: the time a
fresh transfer takes to fill its paths (slow start, subflow joins), and a receive window too
small for the reordering between paths of different delays (the model assumes the buffers hold
the aggregate rate times the largest difference in RTT: 48 Mbit/s x 0.3 s = 1.8 MB on the netns
topology, whose sockets allow 32 MB).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from xapp.core.caps import share_of_total

Array = NDArray[np.float64]
IntArray = NDArray[np.integer[Any]]
Mask = NDArray[np.bool_]

#: The agent's smallest cap (``minCapBps``, 64 kbit/s: HTB's resolution).
HTB_FLOOR_MBPS = 0.064
#: A WAT whose share of the total reaches its link rate within this margin is uncapped
#: (the agent's ``1e-9``).
_LINK_MARGIN = 1e-9


def agent_caps(weights: IntArray, message_caps: Array | None, link_mbps: Array) -> Array:
    """The caps (Mbit/s) the agent sets, ``inf`` where a WAT is uncapped; arrays (..., k).

    ``message_caps`` is NaN where the message gives a WAT no cap (None: no caps at all);
    ``link_mbps`` the agent's configured link rate per WAT (> 0).  A row whose weights are all
    0 gets no caps (the agent refuses such a set; the model carries nothing on it).
    """
    w = np.asarray(weights, dtype=np.float64)
    link = np.broadcast_to(np.asarray(link_mbps, dtype=np.float64), w.shape)
    on = w > 0
    share, total = share_of_total(w, on, link)
    derived = np.where(on, share * total, np.inf)
    want = derived
    if message_caps is not None:
        m = np.broadcast_to(np.asarray(message_caps, dtype=np.float64), w.shape)
        from_message = np.isfinite(m).any(axis=-1, keepdims=True)
        want = np.where(from_message, np.where(np.isfinite(m) & (m > 0), m, np.inf), derived)
    uncapped = ~on | (want >= link * (1.0 - _LINK_MARGIN))
    return np.where(uncapped, np.inf, np.maximum(want, HTB_FLOOR_MBPS))


def deliver_caps(capacity: Array, weights: IntArray, caps: Array,
                 efficiency: float = 1.0) -> tuple[Array, Array, Mask]:
    """Per-WAT delivered rate, aggregate and the path-limited mask, arrays (..., k).

    ``caps`` from :func:`agent_caps` (``inf``: uncapped); ``weights`` and ``caps`` have the
    shape of ``capacity`` or broadcast to it.  A WAT is path-limited (reported ``saturated``)
    when it carries its path's capacity: its cap does not bind.
    """
    c = np.asarray(capacity, dtype=np.float64)
    w = np.broadcast_to(np.asarray(weights), c.shape)
    cap = np.broadcast_to(np.asarray(caps, dtype=np.float64), c.shape)
    up = c > 0
    active = (w > 0) & up
    # Backup subflows carry the traffic only when no active one is up.
    fallback = ~active.any(axis=-1, keepdims=True) & (w == 0) & up
    carrying = active | fallback
    limit = np.where(fallback, np.inf, cap)
    rate = np.where(carrying, np.minimum(c, limit), 0.0) * efficiency
    saturated = carrying & (limit >= c)
    return rate, rate.sum(axis=-1), saturated


@dataclass(frozen=True)
class SharesPrediction:
    """What the model predicts for one set of weights on one topology."""

    wats: tuple[str, ...]
    mbps: Mapping[str, float]
    caps_mbps: Mapping[str, float | None]  # None: uncapped

    @property
    def total(self) -> float:
        return float(sum(self.mbps.values()))

    def share(self, wat: str) -> float:
        t = self.total
        return self.mbps[wat] / t if t > 0 else 0.0


def predict(link_mbps: Mapping[str, float], weights: Mapping[str, int],
            caps_mbps: Mapping[str, float] | None = None,
            capacity_mbps: Mapping[str, float] | None = None,
            efficiency: float = 1.0) -> SharesPrediction:
    """The steady state of one backlogged transfer over the paths of ``link_mbps`` (the agent's
    configured rates and, unless ``capacity_mbps`` says otherwise, the paths' capacities) with
    the weights (and the message's caps) the agent applies."""
    wats: Sequence[str] = tuple(link_mbps)
    unknown = sorted(set(weights) - set(wats))
    if unknown:
        raise ValueError(f"weights for WATs without a path: {unknown}")
    link = np.array([float(link_mbps[x]) for x in wats])
    if not (link > 0).all():
        raise ValueError(f"link rates must be > 0: {dict(link_mbps)}")
    cap_in = (None if caps_mbps is None
              else np.array([float(caps_mbps.get(x, np.nan)) for x in wats]))
    w = np.array([int(weights.get(x, 0)) for x in wats])
    if not (w > 0).any():
        raise ValueError("every weight is 0")
    caps = agent_caps(w, cap_in, link)
    c = link if capacity_mbps is None else np.array(
        [float(capacity_mbps.get(x, link_mbps[x])) for x in wats])
    rate, _, _ = deliver_caps(c, w, caps, efficiency)
    return SharesPrediction(
        tuple(wats), {x: float(r) for x, r in zip(wats, rate.tolist(), strict=True)},
        {x: (None if not np.isfinite(v) else float(v))
         for x, v in zip(wats, caps.tolist(), strict=True)})


def predict_default(link_mbps: Mapping[str, float]) -> SharesPrediction:
    """The default scheduler alone (no agent, nothing capped or backup): every path carries
    its link rate."""
    if not all(float(v) > 0 for v in link_mbps.values()):
        raise ValueError(f"link rates must be > 0: {dict(link_mbps)}")
    return SharesPrediction(tuple(link_mbps), {w: float(v) for w, v in link_mbps.items()},
                            dict.fromkeys(link_mbps))
