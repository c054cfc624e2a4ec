"""Batched weight decisions: every due CPE of one policy at once, with :func:`decide`'s answers.

:func:`xapp.core.weights.decide` is the readable reference for one CPE; :func:`decide_batch`
gives the same weights, usability, aggregate, ``changed`` flag and reason for an array of CPEs
that share one policy (the property tests in ``tests/xapp/core/test_decisions.py`` compare the two
row by row).  Load balancing and ``smallest_delay`` without share limits, ``fixed_split``,
``active_standby`` and ``priority`` are vectorised, thresholds too; a policy with share limits or
``latency_bound`` (per-CPE candidate sets) runs the reference per CPE, which is exact and fast
enough for the few CPEs operators scope such policies to.  Columns are the WATs of ``wats``
(normally :data:`~xapp.core.policy.KNOWN_WATS`); a WAT a CPE does not report is not ``present``
and is not part of its decision, as a missing key is not part of ``decide``'s ``states``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core import thresholds
from xapp.core.policy import Policy, SteeringMode
from xapp.core.weights import (
    SMALLEST_DELAY_BALANCED,
    NoUsableWatError,
    WatState,
    WeightDecision,
    WeightError,
    decide,
    fluid_aggregate_batch,
    optimal_weights_batch,
)

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]
IntArray = NDArray[np.int64]

#: Outcome codes of :attr:`BatchDecision.status`.
OK, NO_USABLE, ERROR = 0, 1, 2


@dataclass
class BatchDecision:
    """Decisions for n CPEs; row i answers row i of the inputs."""

    weights: IntArray  # (n, k); the previous weights where status is not OK
    usable: Mask  # (n, k)
    aggregate: Array  # (n,) T(w) over the conservative capacities
    changed: Mask  # (n,)
    status: NDArray[np.int8]  # (n,) OK, NO_USABLE or ERROR
    reason: NDArray[np.object_]  # (n,) str: decide()'s reason, or why nothing was decided


@dataclass(frozen=True)
class Inputs:
    """Dense (CPE, WAT) inputs of :func:`decide_batch` for one direction: the central and
    conservative capacity forecasts, which WATs are reported and up, RTT (ms) and loss
    (retransmitted %, :data:`~xapp.core.thresholds.LOSS_COLUMN`), NaN where unknown."""

    cap: Array
    low: Array
    present: Mask
    up: Mask
    rtt: Array
    loss: Array

    def take(self, idx: NDArray[np.intp]) -> Inputs:
        """Rows ``idx``."""
        return Inputs(self.cap[idx], self.low[idx], self.present[idx], self.up[idx],
                      self.rtt[idx], self.loss[idx])


def policy_is_plain(p: Policy, smallest: bool = False) -> bool:
    """True for load balancing without share limits: the engine's unconstrained optimum
    (``smallest``: for smallest_delay, whose fallback is that)."""
    mode = SteeringMode.SMALLEST_DELAY if smallest else SteeringMode.LOAD_BALANCING
    return (p.mode is mode and not p.min_share
            and all(v >= 1.0 for v in p.max_share.values()))


def decide_batch(wats: tuple[str, ...], capacity: Array, lower: Array, present: Mask, up: Mask,
                 rtt: Array, loss: Array, policy: Policy, prev_weights: IntArray,
                 prev_present: Mask, prev_usable: Mask, has_prev: Mask) -> BatchDecision:
    """:func:`decide` for every row, under one policy.

    ``capacity`` and ``lower`` (n, k) are finite and ``0 <= lower <= capacity`` where
    ``present``; ``rtt`` and ``loss`` (retransmitted %) are NaN where unknown.  ``has_prev``
    marks rows with a decision in force (``prev_*``, pass False after a policy change), whose
    hysteresis then applies.
    """
    n, k = capacity.shape
    cons = np.where(present, lower, 0.0)
    allowed = np.array([w not in policy.excluded for w in wats])
    # The floor judges the central forecast: a wide interval around a WAT worth carrying
    # must not switch it off (on mainline its weight 0 turns it off in both directions).
    usable = (present & up & allowed & (cons > 0)
              & (np.where(present, capacity, 0.0) >= policy.capacity_floor_mbps))
    suffix = np.full(n, "", dtype=object)
    if policy.has_thresholds:
        crossed = usable & thresholds.over(policy, wats, rtt, loss)
        kept = thresholds.within(usable, crossed)
        for i in np.flatnonzero(crossed.any(axis=1)).tolist():
            suffix[i] = thresholds.reason_suffix(dict(zip(wats, crossed[i].tolist(),
                                                          strict=True)),
                                                 bool((usable[i] & ~crossed[i]).any()))
        usable = kept
    out = BatchDecision(weights=prev_weights.astype(np.int64, copy=True), usable=usable,
                        aggregate=np.zeros(n), changed=np.zeros(n, dtype=bool),
                        status=np.full(n, OK, dtype=np.int8),
                        reason=np.full(n, "", dtype=object))
    none = ~usable.any(axis=1)
    out.status[none] = NO_USABLE
    out.reason[none] = "no usable WAT"
    rows = np.flatnonzero(~none)
    if len(rows) == 0:
        return out
    prev = _Previous(prev_weights, prev_present, prev_usable, has_prev, cons, present, usable)
    mode = policy.mode
    if mode is SteeringMode.LOAD_BALANCING and policy_is_plain(policy):
        _balanced(out, rows, prev, policy)
    elif mode is SteeringMode.FIXED_SPLIT:
        pct = np.array([policy.split_pct.get(w, 0.0) for w in wats])
        p = np.where(usable[rows], pct, 0.0)
        _finish(out, rows, scaled(p, policy.max_weight), p.max(axis=1) > 0, "fixed_split",
                prev, policy)
    elif mode is SteeringMode.ACTIVE_STANDBY:
        chosen = _first_of(policy.priority, wats, usable[rows])
        ok = chosen >= 0
        names = np.array([f"active_standby:{w}" for w in wats] + [""], dtype=object)
        _finish(out, rows, _alone(chosen, k, policy.max_weight), ok, names[chosen], prev,
                policy)
        out.reason[rows[~ok]] = f"active_standby: none of {list(policy.priority)} is usable"
    elif mode is SteeringMode.PRIORITY:
        _priority(out, rows, wats, prev, policy)
    elif mode is SteeringMode.SMALLEST_DELAY and policy_is_plain(policy, smallest=True):
        _smallest_delay(out, rows, wats, rtt, loss, prev, policy)
    else:
        _reference(out, rows, wats, capacity, lower, present, up, rtt, loss, policy,
                   prev_weights, prev_present, prev_usable, has_prev)
        return out  # decide() wrote its reasons, suffixes included
    done = rows[(out.status[rows] == OK) & out.changed[rows]]
    out.reason[done] = out.reason[done] + suffix[done]
    return out


def scaled(p: Array, max_weight: int) -> IntArray:
    """Weights in proportion to ``p`` per row, the largest at ``max_weight``, at least 1 where
    ``p > 0`` (:func:`decide`'s rounding: half to even)."""
    top = p.max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(p > 0, np.maximum(1.0, np.round(p / top * max_weight)), 0.0)
    return scaled.astype(np.int64)


def _first_of(order: tuple[str, ...], wats: tuple[str, ...], usable: Mask) -> IntArray:
    """Per row: the column of the first WAT of ``order`` that is usable, -1 when none is."""
    chosen = np.full(len(usable), -1)
    for wat in reversed(order):  # the first usable WAT of the list wins
        if wat in wats:
            j = wats.index(wat)
            chosen = np.where(usable[:, j], j, chosen)
    return chosen


def _alone(chosen: IntArray, k: int, max_weight: int) -> IntArray:
    """Weights with ``max_weight`` on column ``chosen`` of each row (none where it is -1)."""
    new = np.zeros((len(chosen), k), dtype=np.int64)
    ok = chosen >= 0
    new[np.flatnonzero(ok), chosen[ok]] = max_weight
    return new


def _priority(out: BatchDecision, rows: IntArray, wats: tuple[str, ...], prev: _Previous,
              policy: Policy) -> None:
    """:func:`~xapp.core.weights.priority_fill` for every row."""
    k = len(wats)
    listed = [w for w in policy.priority if w in wats]
    cols = [wats.index(w) for w in listed]
    use = prev.now_usable[rows][:, cols]
    cap = np.where(use, prev.cons[rows][:, cols], 0.0)
    before = np.cumsum(cap, axis=1) - cap  # what the listed WATs ahead carry
    demand = policy.demand_mbps
    # Taken: usable, and the ones ahead do not carry the demand yet (the first always).
    first = use & (np.cumsum(use, axis=1) == 1)
    taken = use & ((before < demand) | first)
    fill = np.where(taken, np.minimum(cap, np.maximum(demand - before, 0.0)), 0.0)
    fill_all = np.zeros((len(rows), k))
    fill_all[:, cols] = fill
    new = scaled(fill_all, policy.max_weight)
    chosen = _first_of(policy.priority, wats, prev.now_usable[rows])
    alone = ~(fill_all > 0).any(axis=1)
    new[alone] = _alone(chosen[alone], k, policy.max_weight)
    ok = chosen >= 0
    names = np.array(["priority:" + "+".join(w for w, t in zip(listed, row, strict=True) if t)
                      for row in (taken & (fill > 0)).tolist()], dtype=object)
    single = np.array([f"priority:{w}" for w in wats] + [""], dtype=object)
    names = np.where(alone, single[chosen], names)
    _finish(out, rows, new, ok, names, prev, policy, same_wats=True)
    out.reason[rows[~ok]] = f"priority: none of {list(policy.priority)} is usable"


def _smallest_delay(out: BatchDecision, rows: IntArray, wats: tuple[str, ...], rtt: Array,
                    loss: Array, prev: _Previous, policy: Policy) -> None:
    """:func:`~xapp.core.weights.smallest_delay` for every row; rows with no WAT to pick are
    balanced as in load balancing."""
    k = len(wats)
    use = prev.now_usable[rows]
    r = np.where(use & np.isfinite(rtt[rows]), rtt[rows], np.inf)
    best = r.argmin(axis=1)  # ties: the first column, as decide()
    has = np.isfinite(r[np.arange(len(rows)), best])
    crossed = thresholds.over(policy, wats, rtt[rows], loss[rows])
    has &= ~crossed[np.arange(len(rows)), best]
    names = np.array([f"smallest_delay:{w}" for w in wats], dtype=object)
    # decide()'s hysteresis of the mode: the WAT in force stays unless the best one's RTT is
    # lower by more than hysteresis_pct.
    one = has.nonzero()[0]
    used = prev.used(rows[one])
    was = used.argmax(axis=1)
    r_was = rtt[rows[one], was]
    stays = ((used.sum(axis=1) == 1) & np.isfinite(r_was)
             & (r_was <= rtt[rows[one], best[one]] * (1.0 + policy.hysteresis_pct / 100.0)))
    _finish(out, rows[one], _alone(best[one], k, policy.max_weight),
            np.ones(len(one), dtype=bool), names[best[one]], prev, policy, stays=stays)
    rest = rows[~has]
    if len(rest):
        _balanced(out, rest, prev, policy, SMALLEST_DELAY_BALANCED, same_wats=True)


@dataclass(frozen=True)
class _Previous:
    """The decisions in force and the inputs the hysteresis compares them with."""

    weights: IntArray
    present: Mask
    usable: Mask
    has: Mask
    cons: Array
    now_present: Mask
    now_usable: Mask

    def held(self, rows: IntArray, policy: Policy) -> tuple[Mask, Array]:
        """Rows whose decision in force may be held (decide()'s condition) and its T."""
        # Only the WATs of the decision count, as only they are keys of decide()'s weights.
        pw = np.where(self.now_present[rows], self.weights[rows], 0)
        ok = (self.has[rows] & (self.usable[rows] == self.now_usable[rows]).all(axis=1)
              & (self.present[rows] == self.now_present[rows]).all(axis=1)
              & (pw <= policy.max_weight).all(axis=1) & (pw >= 0).all(axis=1))
        return ok, fluid_aggregate_batch(self.cons[rows], pw)

    def used(self, rows: IntArray) -> Mask:
        """The WATs the decisions in force use (weight above 0, among those reported now)."""
        return np.asarray(np.where(self.now_present[rows], self.weights[rows], 0) > 0,
                          dtype=bool)


def _balanced(out: BatchDecision, rows: IntArray, prev: _Previous, policy: Policy,
              reason: str = "load_balancing", same_wats: bool = False) -> None:
    c = np.where(prev.now_usable, prev.cons, 0.0)
    held_ok, t_old = prev.held(rows, policy)
    # No weights beat the sum of the usable capacities: where the weights in force are within
    # the hysteresis of it, the exact search cannot change the outcome and is skipped.
    # Strictly below, with a margin: T(w) is computed as C_i * sum(w) / w_i, which can exceed
    # the plain sum by an ulp, and a tie must be settled by decide()'s own comparison.  Not
    # when the WATs used must stay the same to hold: the search may choose others.
    skip = held_ok & (c[rows].sum(axis=1) * (1.0 + 1e-12)
                      < t_old * (1.0 + policy.hysteresis_pct / 100.0)) & (not same_wats)
    out.aggregate[rows[skip]] = t_old[skip]
    out.reason[rows[skip]] = "hysteresis"
    todo = rows[~skip]
    new = optimal_weights_batch(c[todo], policy.max_weight)
    _finish(out, todo, new, np.asarray(new.any(axis=1), dtype=bool), reason, prev,
            policy, (held_ok[~skip], t_old[~skip]), same_wats)


def _finish(out: BatchDecision, rows: IntArray, new: IntArray, ok: Mask,
            reason: str | NDArray[np.object_], prev: _Previous, policy: Policy,
            held: tuple[Mask, Array] | None = None, same_wats: bool = False,
            stays: Mask | None = None) -> None:
    """Apply hysteresis to the new weights of ``rows`` and write them into ``out``;
    ``held`` is ``prev.held(rows, policy)`` when the caller has it already.  The rule is
    decide()'s: the aggregate's, and with ``same_wats`` only where the new weights use the
    WATs in force; ``stays`` (per row) replaces the aggregate's rule (smallest_delay's)."""
    bad = rows[~ok]
    out.status[bad] = NO_USABLE
    out.reason[bad] = f"policy mode {policy.mode.value} leaves no WAT to use"
    rows, new = rows[ok], new[ok]
    reasons = reason if isinstance(reason, str) else reason[ok]
    if len(rows) == 0:
        return
    t_new = fluid_aggregate_batch(prev.cons[rows], new)
    held_ok, t_old = prev.held(rows, policy) if held is None else (held[0][ok], held[1][ok])
    if stays is not None:
        hold = held_ok & stays[ok]
    else:
        hold = held_ok & (t_new <= t_old * (1.0 + policy.hysteresis_pct / 100.0))
        if same_wats:
            hold &= (prev.used(rows) == (new > 0)).all(axis=1)
    change = ~hold
    out.weights[rows[change]] = new[change]
    out.aggregate[rows] = np.where(hold, t_old, t_new)
    out.changed[rows[change]] = True
    out.reason[rows[hold]] = "hysteresis"
    out.reason[rows[change]] = reasons if isinstance(reasons, str) else reasons[change]


def _reference(out: BatchDecision, rows: IntArray, wats: tuple[str, ...], capacity: Array,
               lower: Array, present: Mask, up: Mask, rtt: Array, loss: Array, policy: Policy,
               prev_weights: IntArray, prev_present: Mask, prev_usable: Mask,
               has_prev: Mask) -> None:
    """decide() per CPE: policies with share limits or a latency bound."""
    for i in rows.tolist():
        cols = np.flatnonzero(present[i])
        states = {wats[j]: WatState(capacity_mbps=float(capacity[i, j]),
                                    lower_mbps=float(lower[i, j]), up=bool(up[i, j]),
                                    rtt_ms=_known(rtt[i, j]), loss_pct=_known(loss[i, j]))
                  for j in cols.tolist()}
        previous = None
        if has_prev[i] and (prev_present[i] == present[i]).all():
            pw = {wats[j]: int(prev_weights[i, j]) for j in cols.tolist()}
            total = sum(pw.values()) or 1
            previous = WeightDecision(
                weights=pw, shares={w: v / total for w, v in pw.items()}, aggregate_mbps=0.0,
                usable=frozenset(wats[j] for j in np.flatnonzero(prev_usable[i]).tolist()),
                changed=False, reason="")
        try:
            d = decide(states, policy, previous)
        except NoUsableWatError as exc:
            out.status[i], out.reason[i] = NO_USABLE, str(exc)
            continue
        except WeightError as exc:
            out.status[i], out.reason[i] = ERROR, str(exc)
            continue
        for j in cols.tolist():
            out.weights[i, j] = d.weights[wats[j]]
        out.usable[i] = [w in d.usable for w in wats]
        out.aggregate[i] = d.aggregate_mbps
        out.changed[i] = d.changed
        out.reason[i] = d.reason


def _known(value: np.float64) -> float | None:
    return float(value) if np.isfinite(value) else None


def decide_per_cpe(wats: tuple[str, ...], capacity: Array, lower: Array, present: Mask,
                   up: Mask, rtt: Array, loss: Array, policy: Policy, prev_weights: IntArray,
                   prev_present: Mask, prev_usable: Mask, has_prev: Mask) -> BatchDecision:
    """:func:`decide_batch`'s answer with every row through the per-CPE :func:`decide`: the
    reference, and the baseline the benches measure the batch path against."""
    n = len(capacity)
    out = BatchDecision(weights=prev_weights.astype(np.int64, copy=True),
                        usable=np.zeros_like(present), aggregate=np.zeros(n),
                        changed=np.zeros(n, dtype=bool), status=np.full(n, OK, dtype=np.int8),
                        reason=np.full(n, "", dtype=object))
    _reference(out, np.arange(n), wats, capacity, lower, present, up, rtt, loss, policy,
               prev_weights, prev_present, prev_usable, has_prev)
    return out


#: The signature of :func:`decide_batch` and :func:`decide_per_cpe`.
DecideBatch = Callable[[tuple[str, ...], Array, Array, Mask, Mask, Array, Array, Policy, IntArray,
                        Mask, Mask, Mask], BatchDecision]
