"""The weight engine: per-WAT capacities and a policy in, MPTCP WRR weights out.

Pure functions, no clock and no I/O.  With the WRR scheduler and ``cwnd_limited=N`` a round
sends exactly ``w_i`` packets on WAT *i*, so WAT *i* carries the share ``w_i / sum(w)`` of the
connection and the connection runs at the fluid-model aggregate

    T(w) = min over used WATs of  C_i * sum(w) / w_i,

which equals ``sum(C)`` when ``w`` is proportional to ``C``.  Integer weights in
``{0} ∪ [1, max_weight]`` cannot always be proportional; the engine finds the integer vector
with the largest ``T`` exactly (see :func:`optimal_weights_batch` for why the search is exact).

Capacities are taken conservatively: where an estimate carries a lower bound, the engine uses
it.  Over-estimating a WAT is the expensive error under WRR (every other WAT is throttled to
wait for it); under-estimating only leaves that WAT's excess unused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core.policy import KNOWN_WATS, Policy, SteeringMode
from xapp.core.thresholds import over_one, reason_suffix

_EPS = 1e-9
#: Work-array size (elements) of one block of rows: 512 KB of float64; with the product the
#: scores take, about the L2 of a server core (65,536 measured 20 % faster than 32,768 here).
_BLOCK_ELEMENTS = 65_536
#: The reason of smallest_delay's fallback, load balancing where no RTT picks a WAT (its
#: hysteresis is the aggregate's, not the RTT's).
SMALLEST_DELAY_BALANCED = "smallest_delay:balanced"


class WeightError(ValueError):
    """Input the engine refuses: bad capacities, unknown WATs, or nothing usable."""


class NoUsableWatError(WeightError):
    """No WAT may carry traffic under the policy; the caller keeps its previous weights."""


@dataclass(frozen=True)
class WatState:
    """What the engine knows about one WAT of one CPE for the next control period."""

    capacity_mbps: float
    lower_mbps: float | None = None
    up: bool = True
    rtt_ms: float | None = None
    #: Share of segments retransmitted in the last interval, percent (None: unknown).
    loss_pct: float | None = None

    @property
    def conservative_mbps(self) -> float:
        return self.capacity_mbps if self.lower_mbps is None else self.lower_mbps


@dataclass(frozen=True)
class WeightDecision:
    """The engine's answer for one CPE."""

    weights: dict[str, int]
    shares: dict[str, float]
    #: Fluid-model aggregate T(w) over the conservative capacities, in Mbps.
    aggregate_mbps: float
    #: WATs that were allowed to carry traffic; a change here bypasses hysteresis.
    usable: frozenset[str]
    #: False when hysteresis kept the previous weights.
    changed: bool
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {
            "weights": dict(self.weights),
            "shares": {w: round(s, 6) for w, s in self.shares.items()},
            "aggregate_mbps": round(self.aggregate_mbps, 3),
            "usable": sorted(self.usable),
            "changed": self.changed,
            "reason": self.reason,
        }


def fluid_aggregate(capacity: Mapping[str, float], weights: Mapping[str, int]) -> float:
    """T(w) for one CPE: ``min over used WATs of C_i * sum(w) / w_i`` (0 if nothing is used)."""
    total = sum(w for w in weights.values() if w > 0)
    rates = [capacity[wat] * total / w for wat, w in weights.items() if w > 0]
    return min(rates) if rates else 0.0


def fluid_aggregate_batch(capacity: NDArray[np.floating], weights: NDArray[np.integer]
                          ) -> NDArray[np.float64]:
    """Row-wise T(w) for arrays of shape (n, k); rows with no used WAT give 0."""
    w = np.asarray(weights, dtype=np.float64)
    c = np.asarray(capacity, dtype=np.float64)
    total = w.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(w > 0, c * total / w, np.inf)
    t = rate.min(axis=-1)
    return np.where(np.isfinite(t), t, 0.0)


def optimal_weights_batch(capacity: NDArray[np.floating], max_weight: int = 100
                          ) -> NDArray[np.int64]:
    """Integer weights maximising T(w) for each row of ``capacity`` (shape (n, k), Mbps).

    Why the search is exact: let ``w*`` be optimal and ``λ* = min C_i / w*_i``, reached at
    some WAT *j* with ``w*_j = v``.  Then ``λ* = C_j / v`` is one of the ``k · max_weight``
    candidates ``C_j / v``.  For a candidate λ the largest admissible weights are
    ``u_i = min(max_weight, floor(C_i / λ))`` (0 drops a WAT too slow to keep up), and
    ``u ≥ w*`` element-wise at ``λ*``, so ``λ* · sum(u) ≥ T(w*)``; since every ``u_i ≤ C_i/λ``,
    ``T(u) ≥ λ · sum(u)``.  The candidate with the largest ``λ · sum(u)`` is therefore optimal.
    Of candidates with the same T, the one with the largest weight total wins.

    How ``sum(u)`` is counted: ``u_i(λ)`` is the number of WAT *i*'s candidates ``C_i / v``
    (``v ≤ max_weight``) that are ``≥ λ``, so ``sum(u(λ))`` is λ's rank among all ``k ·
    max_weight`` candidates sorted in decreasing order (the last position of a run of equal
    values).  One sort per row therefore gives every candidate's ``λ · sum(u)`` at once
    (``λ_(s) · s`` at position ``s``; inside a run of equal values the last position scores
    highest); this is the D'Hondt apportionment with the number of seats chosen to maximise T.
    Each WAT's candidates are already in order (``C_i / v`` falls with ``v``), so the row is
    laid out as k sorted runs and the stable sort (a merge of runs for floats) orders it in
    about ``O(k M)``, half the time of sorting it from scratch, instead of the ``O(k² M)`` of
    counting each candidate's weights.  Rows are processed in blocks that keep the sort's work
    array in cache.
    Zero-capacity entries get weight 0.  Rows with no positive capacity get all zeros: callers
    that must never emit all-zero weights check for that (see :func:`decide`).
    """
    c = np.asarray(capacity, dtype=np.float64)
    if c.ndim != 2:
        raise WeightError("capacity must have shape (n_cpes, n_wats)")
    c = np.where(c > 0, c, 0.0)  # NaN and negative capacities carry nothing
    out = np.zeros(c.shape, dtype=np.int64)
    # A WAT with no capacity in any row only adds candidates λ = 0, below every rank that
    # counts: leave its column out of the sort (a fleet without LTE sorts 3/4 of the work).
    used = np.flatnonzero((c > 0).any(axis=0))
    if len(used) < c.shape[1]:
        out[:, used] = optimal_weights_batch(c[:, used], max_weight)
        return out
    n, k = c.shape
    if n == 0 or k == 0:
        return out
    # Each WAT's candidates C_i / v laid out in increasing order (v from max_weight down to 1):
    # a row is k sorted runs, which the stable sort (timsort for floats) merges in O(k M)
    # instead of sorting from scratch; the sorted values are the same either way.
    inverse = 1.0 / np.arange(max_weight, 0, -1, dtype=np.float64)
    # rank s of position p in increasing order is k*M - p; the nudge (< 1e-9 relative, far below
    # any real difference in T) makes the largest total win among equal T, so the answer is
    # canonical (25-100 rather than 1-4) and small capacity changes move it by small steps.
    ranks = np.arange(k * max_weight, 0, -1, dtype=np.float64)
    score = ranks * (1.0 + 1e-12 * ranks)
    rows = max(1, _BLOCK_ELEMENTS // (k * max_weight))
    for a in range(0, n, rows):
        block = c[a:a + rows]
        m = len(block)
        lam = (block[:, :, None] * inverse).reshape(m, k * max_weight)
        lam.sort(axis=1, kind="stable")
        best = (lam * score).argmax(axis=1)
        top = lam[np.arange(m), best]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.floor(block / top[:, None] + _EPS)
        u = np.where(block > 0, np.minimum(u, max_weight), 0.0)
        out[a:a + rows] = u.astype(np.int64)
    return out


def _optimal_bounded(c: NDArray[np.float64], max_weight: int, lo: NDArray[np.float64],
                     hi: NDArray[np.float64]) -> NDArray[np.int64] | None:
    """Like :func:`optimal_weights_batch` for one CPE, with share limits lo_i ≤ w_i/Σw ≤ hi_i.

    For a candidate λ (as above) and a total S, the weights are bounded by
    ``ceil(lo_i S) ≤ w_i ≤ min(u_i, floor(hi_i S))``; any integer vector in that box summing to
    S reaches ``T ≥ λ S``.  The same argument makes ``max λ·S`` over feasible (λ, S) optimal.
    Returns None when no weights satisfy the limits.
    """
    k = len(c)
    anchors = np.flatnonzero(c > 0)
    v = np.arange(1, max_weight + 1, dtype=np.float64)
    lam = (c[anchors][:, None] / v[None, :]).ravel()  # (L,)
    with np.errstate(over="ignore"):
        u = np.floor(np.minimum(max_weight, c[None, :] / lam[:, None]) + _EPS)  # (L, k)
    totals = np.arange(1, k * max_weight + 1, dtype=np.float64)  # (S,)
    lower = np.ceil(lo[None, :] * totals[:, None] - _EPS)  # (S, k)
    upper = np.floor(hi[None, :] * totals[:, None] + _EPS)  # (S, k)
    box_hi = np.minimum(u[:, None, :], upper[None, :, :])  # (L, S, k)
    feasible = ((lower[None] <= box_hi).all(axis=-1)
                & (lower.sum(axis=-1) <= totals)[None, :]
                & (box_hi.sum(axis=-1) >= totals[None, :]))
    if not feasible.any():
        return None
    # the same canonical tie-break as optimal_weights_batch: the largest total among equal T
    key = np.where(feasible, lam[:, None] * totals[None, :] * (1.0 + 1e-12 * totals), -np.inf)
    li, si = np.unravel_index(int(key.argmax()), key.shape)
    w = lower[si].astype(np.int64)
    cap = box_hi[li, si].astype(np.int64)
    # Fill the rest where each extra packet per round costs the least rate.
    for _ in range(int(totals[si]) - int(w.sum())):
        room = np.where(w < cap, c / (w + 1), -np.inf)
        w[int(room.argmax())] += 1
    return np.asarray(w, dtype=np.int64)


def decide(states: Mapping[str, WatState], policy: Policy | None = None,
           previous: WeightDecision | None = None) -> WeightDecision:
    """Weights for one CPE under ``policy``.

    ``previous`` is the decision in force; with it, hysteresis keeps the previous weights unless
    the new ones raise T(w) by more than ``policy.hysteresis_pct`` or a WAT became usable or
    unusable.  Pass None after a policy change.

    Raises :class:`WeightError` on invalid input and :class:`NoUsableWatError` when the policy
    leaves no WAT to use; it never returns all-zero weights.
    """
    policy = policy or Policy()
    _check_states(states)
    wats = [w for w in KNOWN_WATS if w in states]
    cons = {w: states[w].conservative_mbps for w in wats}
    usable = frozenset(
        w for w in wats
        if states[w].up and w not in policy.excluded
        and cons[w] > 0 and states[w].capacity_mbps >= policy.capacity_floor_mbps
    )
    if not usable:
        raise NoUsableWatError(
            "no usable WAT: every WAT is down, excluded, or below the capacity floor "
            f"({policy.capacity_floor_mbps} Mbps)")
    crossed = {w: over_one(policy, w, states[w].rtt_ms, states[w].loss_pct)
               for w in wats if w in usable}
    within = frozenset(w for w in usable if not crossed[w])
    suffix = reason_suffix(crossed, bool(within))
    usable = within or usable

    weights, reason = _weights_for_mode(wats, cons, states, usable, policy)
    by_rtt = policy.mode is SteeringMode.SMALLEST_DELAY and reason != SMALLEST_DELAY_BALANCED
    if not any(weights.values()):
        raise NoUsableWatError(f"policy mode {policy.mode.value} leaves no WAT to use")
    reason += suffix
    aggregate = fluid_aggregate(cons, weights)

    if previous is not None and previous.usable == usable and _fits(previous.weights, wats, policy):
        held = fluid_aggregate(cons, previous.weights)
        if _holds(policy, previous.weights, weights, states, aggregate, held, by_rtt):
            return _decision(previous.weights, wats, held, usable, False, "hysteresis")
    return _decision(weights, wats, aggregate, usable, True, reason)


def _holds(policy: Policy, old: Mapping[str, int], new: Mapping[str, int],
           states: Mapping[str, WatState], aggregate: float, held: float,
           by_rtt: bool) -> bool:
    """Whether the weights in force hold against new ones (hysteresis).  The rule is the
    aggregate's: new weights must raise it by more than ``hysteresis_pct``.  Modes that do not
    aim at the aggregate move when they choose other WATs: ``priority`` (the WATs its fill
    needs) and ``smallest_delay``.  When ``smallest_delay`` picked a WAT by its RTT
    (``by_rtt``), the WAT in force stays unless the pick's RTT is lower by more than
    ``hysteresis_pct`` (so two WATs of about the same RTT do not take turns); its fallback, load
    balancing where no RTT decides, holds by the aggregate, as load balancing does."""
    margin = 1.0 + policy.hysteresis_pct / 100.0
    used_old = {w for w, v in old.items() if v > 0}
    used_new = {w for w, v in new.items() if v > 0}
    if by_rtt and len(used_old) == len(used_new) == 1:
        (was,), (best,) = used_old, used_new
        r_was, r_best = states[was].rtt_ms, states[best].rtt_ms
        return r_was is not None and r_best is not None and r_was <= r_best * margin
    if policy.mode in (SteeringMode.SMALLEST_DELAY, SteeringMode.PRIORITY) \
            and used_old != used_new:
        return False
    return aggregate <= held * margin


def _weights_for_mode(wats: list[str], cons: Mapping[str, float],
                      states: Mapping[str, WatState], usable: frozenset[str],
                      policy: Policy) -> tuple[dict[str, int], str]:
    zero = dict.fromkeys(wats, 0)
    if policy.mode is SteeringMode.ACTIVE_STANDBY:
        for wat in policy.priority:
            if wat in usable:
                return {**zero, wat: policy.max_weight}, f"active_standby:{wat}"
        raise NoUsableWatError(f"active_standby: none of {list(policy.priority)} is usable")
    if policy.mode is SteeringMode.FIXED_SPLIT:
        pct = {w: policy.split_pct.get(w, 0.0) for w in wats if w in usable}
        top = max(pct.values(), default=0.0)
        if top <= 0:
            raise NoUsableWatError("fixed_split: no WAT with a positive split is usable")
        scaled = {w: max(1, round(p / top * policy.max_weight)) if p > 0 else 0
                  for w, p in pct.items()}
        return {**zero, **scaled}, "fixed_split"

    if policy.mode is SteeringMode.PRIORITY:
        return priority_fill(wats, cons, usable, policy)
    candidates = usable
    reason = "load_balancing"
    if policy.mode is SteeringMode.LATENCY_BOUND:
        candidates, reason = _latency_candidates(usable, cons, states, policy)
    if policy.mode is SteeringMode.SMALLEST_DELAY:
        best = smallest_delay(wats, states, usable, policy)
        if best is not None:
            return {**zero, best: policy.max_weight}, f"smallest_delay:{best}"
        reason = SMALLEST_DELAY_BALANCED
    return _balanced(wats, cons, candidates, policy, reason)


def priority_fill(wats: list[str], cons: Mapping[str, float], usable: frozenset[str],
                  policy: Policy) -> tuple[dict[str, int], str]:
    """``priority``: the usable WATs of the list in order, each filled to its capacity until
    they carry ``demand_mbps`` (the first alone without a demand); weights in proportion to
    what each carries (the last the rest of the demand, all at capacity when the list cannot
    carry it)."""
    order = [w for w in policy.priority if w in usable]
    if not order:
        raise NoUsableWatError(f"priority: none of {list(policy.priority)} is usable")
    fill: dict[str, float] = {}
    before = 0.0
    for wat in order:
        fill[wat] = min(cons[wat], max(policy.demand_mbps - before, 0.0))
        before += cons[wat]
        if before >= policy.demand_mbps:
            break
    top = max(fill.values())
    weights = dict.fromkeys(wats, 0)
    for wat, f in fill.items():
        weights[wat] = max(1, round(f / top * policy.max_weight)) if top > 0 else 0
    if top <= 0:  # no demand: the first WAT alone
        weights[order[0]] = policy.max_weight
        return weights, f"priority:{order[0]}"
    return weights, "priority:" + "+".join(w for w in fill)


def smallest_delay(wats: list[str], states: Mapping[str, WatState], usable: frozenset[str],
                   policy: Policy) -> str | None:
    """``smallest_delay``: the usable WAT with the smallest measured RTT (ties: the first in
    column order); None when no usable WAT has an RTT, or the best is over its threshold (the
    thresholds then left every usable WAT in: none is within)."""
    known = [w for w in wats if w in usable and states[w].rtt_ms is not None]
    if not known:
        return None
    best = min(known, key=lambda w: (states[w].rtt_ms, wats.index(w)))
    if over_one(policy, best, states[best].rtt_ms, states[best].loss_pct):
        return None
    return best


def _latency_candidates(usable: frozenset[str], cons: Mapping[str, float],
                        states: Mapping[str, WatState], policy: Policy
                        ) -> tuple[frozenset[str], str]:
    bound = policy.rtt_bound_ms
    assert bound is not None  # Policy validation guarantees it in this mode

    def rtt(w: str) -> float:
        r = states[w].rtt_ms
        return math.inf if r is None else r  # an unknown RTT is not known to meet the bound

    chosen = {w for w in usable if rtt(w) <= bound}
    slow = sorted(usable - chosen, key=lambda w: (rtt(w), w))
    added = []
    while slow and sum(cons[w] for w in chosen) < policy.demand_mbps:
        wat = slow.pop(0)
        chosen.add(wat)
        added.append(wat)
    reason = "latency_bound" + (f"+demand:{','.join(added)}" if added else "")
    return frozenset(chosen), reason


def _balanced(wats: list[str], cons: Mapping[str, float], candidates: frozenset[str],
              policy: Policy, reason: str) -> tuple[dict[str, int], str]:
    c = np.array([cons[w] if w in candidates else 0.0 for w in wats])
    lo = np.array([policy.min_share.get(w, 0.0) if w in candidates else 0.0 for w in wats])
    hi = np.array([policy.max_share.get(w, 1.0) if w in candidates else 0.0 for w in wats])
    if not lo.any() and (hi[c > 0] >= 1.0).all():
        w = optimal_weights_batch(c[None, :], policy.max_weight)[0]
        return dict(zip(wats, (int(x) for x in w), strict=True)), reason
    bounded = _optimal_bounded(c, policy.max_weight, lo, np.where(c > 0, hi, 0.0))
    if bounded is None:
        # Limits that cannot all hold (say max_share on the only WAT that is up): keep the
        # minimum guarantees, drop the caps, and say so.
        bounded = _optimal_bounded(c, policy.max_weight, lo, (c > 0).astype(float))
        reason += "+max_share_relaxed"
    if bounded is None:
        bounded = optimal_weights_batch(c[None, :], policy.max_weight)[0]
        reason += "+min_share_relaxed"
    return dict(zip(wats, (int(x) for x in bounded), strict=True)), reason


def _fits(weights: Mapping[str, int], wats: list[str], policy: Policy) -> bool:
    return set(weights) == set(wats) and all(0 <= w <= policy.max_weight for w in weights.values())


def _decision(weights: Mapping[str, int], wats: list[str], aggregate: float,
              usable: frozenset[str], changed: bool, reason: str) -> WeightDecision:
    total = sum(weights.values())
    ordered = {w: int(weights[w]) for w in wats}
    return WeightDecision(
        weights=ordered,
        shares={w: ordered[w] / total for w in wats},
        aggregate_mbps=aggregate,
        usable=usable,
        changed=changed,
        reason=reason,
    )


def _check_states(states: Mapping[str, WatState]) -> None:
    if not states:
        raise WeightError("no WATs given")
    for wat, s in states.items():
        if wat not in KNOWN_WATS:
            raise WeightError(f"unknown WAT {wat!r}; known: {list(KNOWN_WATS)}")
        for name, value in (("capacity", s.capacity_mbps), ("lower bound", s.lower_mbps),
                            ("RTT", s.rtt_ms), ("loss", s.loss_pct)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise WeightError(f"{wat}: {name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise WeightError(f"{wat}: {name} must be finite, got {value}")
            if value < 0:
                raise WeightError(f"{wat}: {name} must be >= 0, got {value}")
        if s.lower_mbps is not None and s.lower_mbps > s.capacity_mbps + _EPS:
            raise WeightError(f"{wat}: lower bound {s.lower_mbps} exceeds capacity "
                              f"{s.capacity_mbps}")
