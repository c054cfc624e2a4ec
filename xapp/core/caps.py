"""Rate caps for backends that enforce shares as egress caps (``capabilities.semantics`` =
``rate-caps``: the agent's ``mptcp-shares`` on mainline Linux).

A WRR kernel turns integer weights into a split by itself (a round sends ``w_i`` packets on
WAT *i*).  Mainline's default scheduler has no weights: it sends on whichever subflow can take
data soonest, so the ``mptcp-shares`` backend caps each WAT's egress and lets the scheduler fill
the caps.  Caps need a rate, and the weights carry none; the agent falls back on its configured
link rates, which are only as right as the operator's numbers.  The xApp has forecasts, so for an
applier that reports ``rate-caps`` it sends ``caps_mbps`` beside the weights (rule below).

**The rule** (:func:`rate_caps`), per CPE and direction, for the WATs with weight > 0:

* shares ``s_i = w_i / sum(w)``;
* the forecast total ``T = min over weighted WATs of F_i / s_i``: the largest total every WAT
  can carry at its share, with ``F_i`` the central (median) forecast the decision was made with
  (:class:`~xapp.core.forecast.CapacityForecast`'s ``median_mbps``, a WAT without a usable
  forecast at the loop's trial value).  It is the agent's own ``T`` with forecasts in place of
  configured link rates, and the fluid aggregate ``T(w)`` of :mod:`xapp.core.weights`.  Not the
  plain sum of the forecasts: for ``load_balancing`` (weights in proportion to capacities) the
  two agree, but for ``fixed_split`` 70/30 on two equal 20 Mbit/s paths the sum (40) would cap
  the 30 % WAT at 12 Mbit/s and the split would come out 62/38; ``T`` gives 28.6 and 8.6;
* ``cap_i = headroom * s_i * T``, except for a WAT whose share of ``T`` is its whole forecast
  (the WAT that sets ``T``): it is left uncapped, as the agent does, because its own link is its
  limit and a cap there adds a second queue (the agent's measurements: 35.9-36.7 Mbit/s of 48
  with every WAT capped at its link rate, 38.5-46.8 uncapped) and throttles it when the
  forecast is low.  A WAT at weight 0 has no cap: it is off (the backup flag), not capped.

**Which quantile.**  The weights were planned at a cost-weighted lower quantile
(:mod:`xapp.core.planning`) because under WRR an over-estimate of one WAT throttles all the
others.  A cap's errors cost the other way round: a cap below what the WAT can carry throttles
it Mbit/s for Mbit/s, a cap above it costs only the split's precision (the link is the limit
and the default scheduler fills it).  So the cap belongs at a high quantile; the highest the
forecasts carry is the median, and the headroom lifts it from there.

**Headroom** (:data:`DEFAULT_HEADROOM` = 1.15).  A cap ``h`` times the WAT's share of ``T``
gives it at most ``h s / (h s + 1 - s)`` of the bytes instead of ``s``; the worst case, at
``s = 1 / (1 + sqrt(h))``, is ``(sqrt(h) - 1) / (sqrt(h) + 1)`` = 3.5 points for 1.15, inside the
5-point share target of issue 12 with 1.5 points left for the transport.  In exchange a forecast
up to 13 % low (``1 / 1.15``) costs no throughput.  1.25 would absorb 20 % but spend 5.6 points,
the whole target.  The caps of a direction are sent again (:func:`caps_moved`) once one moves by
half the headroom's margin, so a cap is renewed before the total it should carry outgrows it.

**load_balancing caps nothing** (:func:`balancing_caps`).  Its aim is the largest aggregate, not
a split, and mainline's default scheduler already fills every path it may use: a cap can only
hold a WAT below what it carries (Mbit/s for Mbit/s when the forecast is low), never lift one
above it, and a forecast too high for one WAT lowers the others' caps with it.  On the real
stack (``bench/bench_realstack.py``, issue 32) the loop that capped at the forecasts delivered
less than the default scheduler alone.  So a ``load_balancing`` set without share limits goes
out with every weighted WAT at :data:`CAP_MAX_MBPS` (explicitly uncapped: without caps the agent
would derive them from its configured link rates); its levers are the WATs at weight 0 (backup:
no data while another WAT is up), which the engine decides from the forecasts as for WRR: a WAT
down, or too slow to keep pace with the others (under 1 % of the total at ``max_weight`` 100),
whose packets would arrive long after the others' and hold the receiver's reassembly back.
Policies that ask for a split (``fixed_split``, share limits) keep the rule above.

Caps are bounded as the schema bounds them: above 0 (at least :data:`CAP_MIN_MBPS`, the agent's
HTB floor, so what is sent is what is set) and at most :data:`CAP_MAX_MBPS`; rounded to 1 kbit/s
so that messages stay short and equal caps encode equally.  A set re-sent as it is keeps its
caps only while its applier still reports ``rate-caps`` (:func:`caps_in_force`).

Pure: arrays in, arrays out, no clock, no I/O.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from xapp.core.policy import Policy, SteeringMode

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]

#: ``capabilities.semantics`` values of ``mcw.state.v2`` / ``mcw.proxy-state.v1``.
WRR: Final = "wrr"
RATE_CAPS: Final = "rate-caps"
ON_OFF: Final = "on-off"
SEMANTICS: Final = (WRR, RATE_CAPS, ON_OFF)

#: Caps are ``headroom x share x forecast total`` (see the module docstring for the value).
DEFAULT_HEADROOM: Final = 1.15
#: Headroom bounds a configuration may set: below 1 the caps would throttle every forecast
#: that is right; above 2 a cap no longer enforces a share (the worst split error is 17 points).
HEADROOM_MIN: Final = 1.0
HEADROOM_MAX: Final = 2.0
#: The agent's HTB floor (``minCapBps``, 64 kbit/s): a smaller cap would be set at this anyway.
CAP_MIN_MBPS: Final = 0.064
#: ``mqtt-weights.schema.json`` ``$defs/cap`` maximum.
CAP_MAX_MBPS: Final = 100_000.0
#: A WAT whose share of T reaches its forecast within this relative margin sets T (uncapped).
_BINDING: Final = 1e-9


def check_headroom(value: float) -> float:
    """``value`` as a float if it is a headroom in ``[HEADROOM_MIN, HEADROOM_MAX]``, else
    ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"caps headroom must be a number, got {value!r}")
    if not HEADROOM_MIN <= float(value) <= HEADROOM_MAX:
        raise ValueError(f"caps headroom must be in [{HEADROOM_MIN}, {HEADROOM_MAX}], "
                         f"got {value}")
    return float(value)


def share_of_total(weights: Array, bounding: Mask, rate: Array) -> tuple[Array, Array]:
    """Each WAT's share ``w_i / sum(w)`` and the total ``T = min_i rate_i / share_i`` over the
    ``bounding`` WATs (the largest total every one of them carries at its share), arrays
    (..., k) and (..., 1); ``T`` is inf where no WAT bounds it.

    The one place the rule's arithmetic lives: the xApp takes ``rate`` from its forecasts,
    the twin's model of the agent from the configured link rates."""
    total_w = weights.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total_w > 0, weights / total_w, 0.0)
        total = np.min(np.where(bounding, rate / share, np.inf), axis=-1, keepdims=True)
    return share, total


def rate_caps(weights: NDArray[np.integer], present: Mask, forecast: Array,
              headroom: float = DEFAULT_HEADROOM) -> Array:
    """Caps in Mbit/s per (CPE, WAT) for rows of weights, NaN where a WAT has no cap.

    ``weights``, ``present`` and ``forecast`` are (n, k): the weights to send, which WATs the
    set names, and the central forecast per WAT the decision used.  A row gets no caps at all
    (NaN everywhere: the agent falls back on its link rates) when no WAT has a weight above 0
    or a weighted WAT has no finite forecast above 0 (nothing to take a total from).
    """
    headroom = check_headroom(headroom)
    w = np.where(present, np.asarray(weights), 0).astype(np.float64)
    f = np.asarray(forecast, dtype=np.float64)
    if w.shape != f.shape:
        raise ValueError(f"weights {w.shape} and forecast {f.shape} differ in shape")
    on = w > 0
    good = on & np.isfinite(f) & (f > 0)
    usable_row = np.asarray(on.any(axis=-1) & ~(on & ~good).any(axis=-1), dtype=bool)
    share, total = share_of_total(w, good, f)
    carry = share * np.where(usable_row[..., None], total, np.nan)
    binding = np.asarray(carry >= f * (1.0 - _BINDING), dtype=bool)
    raw = headroom * carry
    capped = on & usable_row[..., None] & ~binding
    out = np.full(w.shape, np.nan)
    out[capped] = np.clip(np.round(raw[capped], 3), CAP_MIN_MBPS, CAP_MAX_MBPS)
    return out


def uncapped_balancing(policy: Policy) -> bool:
    """Whether a rate-caps agent gets this policy's sets uncapped (:func:`balancing_caps`):
    ``load_balancing`` with no share limits wants the largest aggregate, which mainline's
    scheduler reaches by itself; so does ``smallest_delay`` when it balances (the one WAT it
    picks otherwise is its own limit)."""
    return (policy.mode in (SteeringMode.LOAD_BALANCING, SteeringMode.SMALLEST_DELAY)
            and not policy.min_share and not policy.max_share)


def balancing_caps(weights: NDArray[np.integer], present: Mask) -> Array:
    """Caps of a ``load_balancing`` set without share limits: :data:`CAP_MAX_MBPS` (uncapped)
    for every WAT with a weight above 0, NaN for the rest (see the module docstring)."""
    on = np.asarray(present, dtype=bool) & (np.asarray(weights) > 0)
    return np.where(on, CAP_MAX_MBPS, np.nan)


def caps_in_force(caps: Array, rows: NDArray[np.intp], rate_capped: Mask | None
                  ) -> Array | None:
    """The caps in force (``caps``, by table row) at ``rows`` where the applier is still
    rate-caps (``rate_capped``, by table row), NaN elsewhere; None when no row may carry caps
    (``rate_capped`` None)."""
    if rate_capped is None:
        return None
    return np.where(rate_capped[rows][:, None], caps[rows], np.nan)


def caps_moved(old: Array, new: Array, headroom: float = DEFAULT_HEADROOM) -> Mask:
    """Rows (CPEs) whose caps should be sent again: a WAT gained or lost its cap, or a cap
    moved by more than half the headroom's margin (relative to the cap in force)."""
    tol = (check_headroom(headroom) - 1.0) / 2.0
    o, n = np.asarray(old, dtype=np.float64), np.asarray(new, dtype=np.float64)
    has_o, has_n = np.isfinite(o), np.isfinite(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        moved = has_o & has_n & (np.abs(n - o) > tol * o)
    return np.asarray(((has_o != has_n) | moved).any(axis=-1), dtype=bool)
