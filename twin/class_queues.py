"""The rate-caps agent's traffic classes (``mptcp-shares``' HTB leaves) as a fluid model.

Without classes the agent caps each WAT's egress and the default scheduler fills every WAT to
``min(cap, capacity)`` (:mod:`twin.rate_caps`).  With a direction's classes (issue 35,
``docs/steering-modes.md``; ``kernel-agent/backend/mptcpshares``, ``classes.go``) each WAT
carries a parent class at its cap and under it one leaf per class beside the default rule's;
a flow goes to the leaf of the first class whose match it meets (:func:`twin.traffic.leaf_of`).
What :func:`share` mirrors, per step, CPE and WAT:

* **weights**: a class's weights masked by the WATs that are up; a class left without a WAT of
  its own takes the default rule's (as masked), without caps.  The default rule's, with none
  up, are the safe weights of the WATs that are up (``agent/device.go``, ``classesOn`` and
  ``paths``).  A WAT no rule uses is backup: nothing is sent on it while another is up;
* **ceilings**: a leaf's ceiling is, where its rule uses the WAT, its cap there (``caps_mbps``)
  at most the parent's, the parent's without one; where it does not, the floor (64 kbit/s).
  The default rule's leaf keeps the parent's on a WAT at weight 0 that no class uses;
* **offered load**: a backlogged flow offers all it can on every WAT that is not backup (its
  subflow there takes what its leaf passes: the floor where its rule does not use the WAT); a
  flow of finite demand spreads it over its rule's WATs in proportion to the weights;
* **sharing**: a WAT carries ``min(parent, capacity)``.  Where the agent's cap binds (parent
  below the path's capacity) its HTB shares it: urgent leaves (priority 0) first, then the
  others max-min fair (one quantum each per round), each up to its ceiling.  Where the path
  binds, the queue is the path's (the modem's, the access point's), which knows no classes:
  every leaf max-min fair, up to its ceiling.  Within a leaf its flows share max-min fair.

The delay a flow's packets wait on a WAT (:attr:`Shares.queue_ms`):

* a path whose capacity is full has its buffer full (:attr:`twin.traffic.Traffic.buffer_ms`),
  and every packet waits it out, urgent or not;
* a leaf that is offered more than it passes has its bfifo full: 100 ms of its ceiling
  (``fifo.go``, at least 64 KiB), drained at the rate it gets;
* a leaf that passes all it is offered, on a WAT whose cap binds and is full, waits for the
  backlogged leaves of its priority to send their quantum (16 KiB, ``leafQuantum``): half a
  round on average.  An urgent leaf waits for none of them: near zero (0.2 ms measured,
  ``integration.TestNetnsClasses``).

Pure: arrays in, arrays out.  Shapes: ``(b, n, k)`` for a block of ``b`` steps of ``n`` CPEs'
``k`` WATs; ``F`` flows, ``C`` classes, ``L = 1 + C`` leaves (the default rule's first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from twin.rate_caps import HTB_FLOOR_MBPS
from twin.traffic import Flow, leaf_of
from xapp.core.traffic import ClassSet

Array = NDArray[np.float64]
IntArray = NDArray[np.integer[Any]]
Mask = NDArray[np.bool_]

#: A leaf's bfifo holds this long at its ceiling (``queueTime``), at least 64 KiB
#: (``minQueueBytes``, in Mbit).
LEAF_QUEUE_S: Final = 0.100
LEAF_QUEUE_MIN_MBIT: Final = 65536 * 8 / 1e6
#: What a backlogged leaf sends per round (``leafQuantum``, Mbit).
QUANTUM_MBIT: Final = 16 * 1024 * 8 / 1e6
#: A rate within this fraction of a bound has reached it.
_TOL: Final = 1e-6


@dataclass(frozen=True)
class Applied:
    """A direction's classes as its agents hold them: ``(n, C, k)`` weights and caps (NaN: none;
    CPEs with fewer classes padded, ``present`` False), ``(n, C)`` urgency, and each flow's leaf
    ``(n, F)`` (0: the default rule's)."""

    weights: IntArray
    caps: Array
    urgent: Mask
    present: Mask
    leaf: IntArray

    @classmethod
    def none(cls, n: int, k: int, flows: int) -> Applied:
        """No CPE has classes: every flow in the default rule's leaf."""
        return cls(np.zeros((n, 0, k), np.int64), np.zeros((n, 0, k)),
                   np.zeros((n, 0), bool), np.zeros((n, 0), bool),
                   np.zeros((n, flows), np.int64))

    @classmethod
    def of(cls, sets: Sequence[Sequence[ClassSet]], wats: tuple[str, ...],
           flows: Sequence[Flow], direction: str) -> Applied:
        """From each CPE's classes as the weights messages carried them."""
        n, k, c = len(sets), len(wats), max((len(s) for s in sets), default=0)
        out = cls(np.zeros((n, c, k), np.int64), np.full((n, c, k), np.nan),
                  np.zeros((n, c), bool), np.zeros((n, c), bool),
                  np.zeros((n, len(flows)), np.int64))
        for i, classes in enumerate(sets):
            for j, cl in enumerate(classes):
                out.present[i, j] = True
                out.urgent[i, j] = cl.urgent
                for x, wat in enumerate(wats):
                    out.weights[i, j, x] = int(cl.weights.get(wat, 0))
                    out.caps[i, j, x] = float(cl.caps_mbps.get(wat, np.nan))
            for f, flow in enumerate(flows):
                out.leaf[i, f] = leaf_of(flow, classes, direction)
        return out

    @property
    def any(self) -> bool:
        return bool(self.present.any())


@dataclass(frozen=True)
class Shares:
    """What a block of steps delivered."""

    rate: Array  # (b, n, F, k) Mbit/s of each flow on each WAT
    queue_ms: Array  # (b, n, F, k) its packets' wait; NaN where it sends nothing
    delivered: Array  # (b, n, k)
    aggregate: Array  # (b, n)
    saturated: Mask  # (b, n, k): the path carried its capacity


def water_fill(bounds: Array, total: Array) -> Array:
    """Max-min fair shares of ``total`` (...) among claims ``bounds`` (..., m), each at most
    its bound (``inf``: takes what it is given)."""
    m = bounds.shape[-1]
    if m == 0:
        return np.zeros(bounds.shape)
    s = np.sort(bounds, axis=-1)
    prefix = np.concatenate([np.zeros((*s.shape[:-1], 1)), np.cumsum(s[..., :-1], axis=-1)],
                            axis=-1)
    # The total it takes to raise every claim not yet at its bound to the i-th bound.
    need = prefix + (m - np.arange(m)) * s
    over = need > total[..., None]
    at = np.argmax(over, axis=-1)[..., None]
    base = np.take_along_axis(prefix, at, axis=-1)[..., 0]
    with np.errstate(invalid="ignore"):
        level = np.where(over.any(axis=-1), (total - base) / (m - at[..., 0]), np.inf)
    return np.minimum(bounds, level[..., None])


def _leaf_weights(up: Mask, weights: IntArray, applied: Applied) -> tuple[IntArray, Array]:
    """Every leaf's weights in force (b, n, L, k) and the classes' caps (b, n, C, k)."""
    w0 = np.where(up, weights[None], 0)
    w0 = np.where((w0 > 0).any(axis=-1, keepdims=True), w0, up.astype(np.int64))
    wc = np.where(up[:, :, None, :], applied.weights[None], 0)
    own = (wc > 0).any(axis=-1, keepdims=True)
    wc = np.where(own, wc, w0[:, :, None, :])
    wc = np.where(applied.present[None, :, :, None], wc, 0)
    caps = np.where(own, applied.caps[None], np.nan)
    return np.concatenate([w0[:, :, None, :], wc], axis=2), caps


def share(capacity: Array, weights: IntArray, parent: Array, applied: Applied,
          flows: Sequence[Flow], buffer_ms: float) -> Shares:
    """Each flow's rate and wait on each WAT for a block of steps: ``capacity`` (b, n, k),
    the default rule's ``weights`` and the WATs' caps ``parent`` (n, k; ``inf`` uncapped,
    :func:`twin.rate_caps.agent_caps`) in force, the classes ``applied``."""
    c = np.asarray(capacity, dtype=np.float64)
    up = c > 0
    lw, class_caps = _leaf_weights(up, np.asarray(weights), applied)
    n_leaves = lw.shape[2]
    on = lw > 0  # (b, n, L, k)
    used = on[:, :, 1:].any(axis=2)
    open_ = up & (on[:, :, 0] | used)  # not backup
    p = np.broadcast_to(np.asarray(parent, dtype=np.float64)[None], c.shape)
    floor = HTB_FLOOR_MBPS
    cap_c = np.where(np.isfinite(class_caps) & (class_caps > 0),
                     np.maximum(class_caps, floor), np.inf)
    ceil = np.concatenate([
        np.where(on[:, :, 0] | ~used, p, floor)[:, :, None],
        np.where(on[:, :, 1:], np.minimum(p[:, :, None], cap_c), floor)], axis=2)
    urgent = np.concatenate([np.zeros((c.shape[1], 1), bool), applied.urgent], axis=1)

    # Offered load of each flow (b, n, F, k) and of each leaf (b, n, L, k).
    leaf = np.asarray(applied.leaf)
    lwf = np.take_along_axis(lw, np.broadcast_to(leaf[None, :, :, None],
                                                 lw.shape[:2] + leaf.shape[1:] + lw.shape[3:]),
                             axis=2).astype(np.float64)
    spread = lwf / np.maximum(lwf.sum(axis=-1, keepdims=True), 1.0)
    demand = np.array([f.demand_mbps for f in flows])[None, None, :, None]
    backlogged = np.isinf(demand)
    offered = np.where(backlogged, np.where(open_[:, :, None, :], np.inf, 0.0),
                       np.where(backlogged, 0.0, demand) * spread)
    member = leaf[:, None, :] == np.arange(n_leaves)[None, :, None]  # (n, L, F)
    leaf_offered = np.stack([np.where(member[None, :, j, :, None], offered, 0.0).sum(axis=2)
                             for j in range(n_leaves)], axis=2)

    # Each WAT's leaves (b, n, k, L): urgent first where the agent's cap binds.
    bound = np.moveaxis(np.minimum(leaf_offered, ceil), 2, -1)
    limit = np.minimum(p, c)
    agent = p < c
    urg = np.broadcast_to(urgent[None, :, None, :], bound.shape)
    first = water_fill(np.where(urg, bound, 0.0), limit)
    rest = water_fill(np.where(urg, 0.0, bound), limit - first.sum(axis=-1))
    alloc = np.where(agent[..., None], first + rest, water_fill(bound, limit))

    rate = np.zeros(offered.shape)
    off_t = np.moveaxis(offered, 2, -1)  # (b, n, k, F)
    for j in range(n_leaves):
        mine = np.broadcast_to(member[None, :, None, j, :], off_t.shape)
        rate += np.moveaxis(water_fill(np.where(mine, off_t, 0.0), alloc[..., j]), -1, 2)
    delivered = rate.sum(axis=2)
    saturated = up & (delivered >= c * (1.0 - _TOL))

    # Waits (b, n, L, k), then each flow's.
    alloc_l = np.moveaxis(alloc, -1, 2)
    backlog = leaf_offered > alloc_l * (1.0 + _TOL) + 1e-12
    at_agent = backlog & (agent[:, :, None, :] | (alloc_l >= ceil * (1.0 - _TOL)))
    with np.errstate(divide="ignore", invalid="ignore"):
        fifo = 1000.0 * np.maximum(LEAF_QUEUE_S * ceil, LEAF_QUEUE_MIN_MBIT) / alloc_l
        rounds = (backlog & ~urgent[None, :, :, None]).sum(axis=2)
        drr = 1000.0 * 0.5 * rounds * QUANTUM_MBIT / p
    full = agent & (delivered >= p * (1.0 - _TOL))
    waits = np.where(at_agent, fifo,
                     np.where(full[:, :, None, :] & ~urgent[None, :, :, None] & ~backlog,
                              drr[:, :, None, :], 0.0))
    path = np.where(saturated, float(buffer_ms), 0.0)
    mine = np.take_along_axis(waits, np.broadcast_to(leaf[None, :, :, None], rate.shape), axis=2)
    queue = np.where(rate > 0, path[:, :, None, :] + mine, np.nan)
    return Shares(rate, queue, delivered, delivered.sum(axis=-1), saturated)
