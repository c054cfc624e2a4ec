"""The weight a WAT that is down gets for its return.

An agent masks a WAT whose link is down by itself, within milliseconds of the link's loss, and
unmasks it as soon as it returns, with the weight the xApp last sent for it.  A decision that
left the WAT out because it was down sent 0 for it, and that 0 outlives the link's return by the
xApp's lag (the telemetry that says the link is back, then the next tick): measured on the real
stack (``bench/bench_realstack.py --scenario lifi-blockage``), LiFi came back after each cut as a
backup path, carrying nothing, for 0.4-1.4 s more, about a tenth of what the scenario's paths
could carry.  So a WAT reported down keeps a weight: the one a decision with every reported WAT
up gives it, on the scale of the decision in force for the others.  The WATs that are up keep
what the decision without the down WAT gave them, so nothing changes while the link is down.

What it costs: where the down WAT's return changes the others' weights (``active_standby``:
the standby that took over; ``priority``: the WAT that overflowed), both carry from the return
until the next tick decides without the link's loss.  A class's own weights (rules) are not
given this: a class whose WAT returns waits for the next tick, as before.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from xapp.core.decisions import OK, BatchDecision, DecideBatch, Inputs, scaled
from xapp.core.policy import Policy


def with_return_weights(decide: DecideBatch, wats: tuple[str, ...], x: Inputs, policy: Policy,
                        d: BatchDecision) -> BatchDecision:
    """``d`` (decided from ``x``) with a weight for each WAT that is reported (``present``) but
    down, where a decision with it up gives it one; ``d`` is changed in place and returned.

    The down WAT's weight is scaled by the ratio of the two decisions' weights on the WATs that
    are up, so it stands to them as in the decision with it up; a row whose weights would then
    pass ``policy.max_weight`` is scaled down to it (a positive weight stays at least 1)."""
    down = x.present & ~x.up
    rows = np.flatnonzero(down.any(axis=1) & (d.status == OK))
    if len(rows) == 0:
        return d
    n, k = len(rows), x.cap.shape[1]
    none = np.zeros(n, dtype=bool)
    blank = np.zeros((n, k), dtype=np.int64)
    up = dataclasses.replace(x.take(rows), up=x.present[rows])
    a = decide(wats, up.cap, up.low, up.present, up.up, up.rtt, up.loss, policy, blank,
               up.present, up.present, none)
    took = a.status == OK
    rows, down_r = rows[took], down[rows[took]]
    if len(rows) == 0:
        return d
    mine = d.weights[rows].astype(np.float64)
    theirs = a.weights[took].astype(np.float64)
    is_up = ~down_r
    ours_up = np.where(is_up, mine, 0.0).sum(axis=1)
    theirs_up = np.where(is_up, theirs, 0.0).sum(axis=1)
    scale = np.where(theirs_up > 0, ours_up / np.maximum(theirs_up, 1e-12), 1.0)
    back = np.where(down_r & (theirs > 0), np.maximum(1.0, np.round(theirs * scale[:, None])), 0.0)
    merged = np.where(down_r, back, mine)
    over = merged.max(axis=1) > policy.max_weight
    merged[over] = scaled(merged[over], policy.max_weight)
    d.weights[rows] = merged.astype(np.int64)
    returning = down_r & (merged > 0)
    for i, r in enumerate(rows.tolist()):
        names = [w for w, on in zip(wats, returning[i].tolist(), strict=True) if on]
        if names:
            d.reason[r] = f"{d.reason[r]}; for its return: {', '.join(names)}"
    return d

