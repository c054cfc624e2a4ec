"""Weights and caps of each traffic class (issue 35): the rules of a policy decided from the same
forecasts, RTTs and losses as the direction's own set.

Each class (:class:`~xapp.core.rules.ClassRule`) is decided as a direction is, by the loop's
:func:`~xapp.core.decisions.decide_batch` under the class's steering, with hysteresis against the
class's weights in force.  What the agent does with them (the contract agreed with it):

* a class's weight 0 on a WAT: the class does not use that WAT (the agent holds it to the
  floor there, and lifts that when none of the class's WATs is up);
* ``caps_mbps``: the class's ceiling on each WAT, sent to ``rate-caps`` appliers only, as the
  direction's own caps are.  The same rule as the direction's (:mod:`xapp.core.caps`): a class
  that asks for a split (fixed_split, share limits, priority, latency_bound, active_standby) is
  capped at headroom x its share of the forecast total; a WAT that sets that total, and every
  WAT of a ``load_balancing`` or ``smallest_delay`` class, is explicitly uncapped
  (:data:`~xapp.core.caps.CAP_MAX_MBPS`: an absent cap would mean "the direction's");
* ``urgent``: the class leaves each WAT's egress queue first.  The agent owns that queue only
  where it shapes, so a WAT that carries an urgent class is capped a little under its central
  forecast (the policy's ``urgent_cap_fraction``, 0.9 by default) in the direction's caps, which
  bound the WAT's total: the queue then forms at the agent, not in the modem or the access
  point, where the urgent class would wait behind the bulk.  Where the default rule does not use
  the WAT (weight 0, which may not carry a cap), each other class on it gets that ceiling.
  ``rate-caps`` appliers only: a WRR or on/off applier has no caps to set;
* a class with no usable WAT under its own steering (every WAT it may use is down, excluded or
  below its floor) takes the default rule's weights, and its reason says so.

Pure: arrays in, arrays out, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from xapp.core.caps import (
    CAP_MAX_MBPS,
    CAP_MIN_MBPS,
    balancing_caps,
    caps_moved,
    rate_caps,
    uncapped_balancing,
)
from xapp.core.class_columns import MAX_CLASSES, ClassColumns, ClassSpec, same_specs
from xapp.core.decisions import OK, DecideBatch, Inputs
from xapp.core.rules import ClassRule

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]
IntArray = NDArray[np.int64]

#: The reason of a class that fell back on the default rule's weights.
FALLBACK = "no usable WAT under the rule: the default rule's weights"


def specs_of(rules: Sequence[ClassRule]) -> tuple[ClassSpec, ...]:
    """The specs of a direction's classes (one tuple per policy: rows share it)."""
    return tuple(ClassSpec(r.name, r.match, r.policy.mode.value, r.urgent) for r in rules)


def decide_classes(wats: tuple[str, ...], rules: Sequence[ClassRule], specs: tuple[ClassSpec, ...],
                   decide: DecideBatch, x: Inputs, default: IntArray, prev: ClassColumns,
                   prev_present: Mask, has_prev: Mask, capped: Mask | None, headroom: float
                   ) -> ClassColumns:
    """The classes of ``m`` rows: ``x`` their inputs, ``default`` the default rule's weights
    just decided, ``prev`` the classes in force (their hysteresis applies where ``has_prev``
    and they are the same classes), ``capped`` the rows whose applier is rate-caps (None:
    none)."""
    m, k = default.shape
    out = ClassColumns.empty(m, k)
    if not rules:
        return out
    out.specs.fill(specs)
    held = has_prev & same_specs(prev.specs, out.specs)
    for c, rule in enumerate(rules):
        d = decide(wats, x.cap, x.low, x.present, x.up, x.rtt, x.loss, rule.policy,
                   prev.weights[:, c], prev_present, prev.usable[:, c], held)
        ok = d.status == OK
        out.weights[:, c] = np.where(ok[:, None], d.weights, default)
        out.usable[:, c] = np.where(ok[:, None], d.usable, default > 0)
        out.reasons[ok, c] = d.reason[ok]
        out.reasons[~ok, c] = FALLBACK
        if capped is not None and capped.any():
            w = out.weights[capped, c]
            if uncapped_balancing(rule.policy):
                caps = balancing_caps(w, x.present[capped])
            else:
                caps = rate_caps(w, x.present[capped], x.cap[capped], headroom)
            # An absent cap would mean the direction's: a WAT the class uses uncapped says so.
            on = x.present[capped] & (w > 0)
            out.caps[capped, c] = np.where(on & np.isnan(caps), CAP_MAX_MBPS, caps)
    return out


def urgent_caps(specs: tuple[ClassSpec, ...], classes: ClassColumns, weights: IntArray,
                caps: Array, forecast: Array, fraction: float, capped: Mask) -> None:
    """Cap each WAT an urgent class uses at ``fraction`` of its central ``forecast``, in the
    direction's ``caps`` (in place) where the default rule uses the WAT, else in the other
    classes' caps; rows ``capped`` only (see the module docstring).  ``classes`` rows have the
    classes ``specs`` or none (then nothing is urgent there: their weights are 0)."""
    urgent = np.zeros(MAX_CLASSES, dtype=bool)
    urgent[:len(specs)] = [s.urgent for s in specs]
    if not urgent.any() or not capped.any():
        return
    carries = (urgent[None, :, None] & (classes.weights > 0)).any(axis=1) & capped[:, None]
    limit = np.round(np.clip(fraction * forecast, CAP_MIN_MBPS, CAP_MAX_MBPS), 3)
    own = carries & (weights > 0)
    caps[own] = np.fmin(caps[own], limit[own])
    others = ((carries & (weights <= 0))[:, None, :] & ~urgent[None, :, None]
              & (classes.weights > 0))
    classes.caps[others] = np.fmin(classes.caps[others],
                                   np.broadcast_to(limit[:, None, :], others.shape)[others])


def classes_moved(old: ClassColumns, new: ClassColumns, headroom: float) -> Mask:
    """Rows whose classes should be sent again: other classes, other weights, or caps that
    moved (:func:`~xapp.core.caps.caps_moved`)."""
    n = len(new)
    differ = ~same_specs(old.specs, new.specs)
    differ |= (old.weights != new.weights).any(axis=(1, 2))
    differ |= caps_moved(old.caps.reshape(n, -1), new.caps.reshape(n, -1), headroom)
    return differ
