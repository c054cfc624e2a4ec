"""What a direction's set carries beside its weights, for the appliers that take it: rate caps
(``rate-caps`` appliers, :mod:`xapp.core.caps`) and traffic classes (appliers whose
``capabilities.max_classes`` is at least the number of classes, :mod:`xapp.core.classes`).

An applier that cannot take a policy's classes gets the default rule alone: the set goes without
its classes (an agent from before them would refuse the whole message) and says so in its
reason, and the loop counts it (``mcw_classes_withheld_total``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core.caps import balancing_caps, caps_moved, rate_caps, uncapped_balancing
from xapp.core.class_columns import ClassColumns, ClassSpec
from xapp.core.classes import classes_moved, decide_classes, urgent_caps
from xapp.core.columns import Appliers
from xapp.core.decisions import OK, BatchDecision, DecideBatch, Inputs
from xapp.core.fleet import FleetTable
from xapp.core.policy import Policy
from xapp.core.rules import ClassRule

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]


@dataclass
class Extras:
    """Caps and classes of the due rows of one policy group and direction."""

    #: (m, k) caps, NaN: none; None: no row is rate-capped.
    caps: Array | None
    #: Classes (none in a row whose applier cannot take them); None: the policy has none.
    classes: ClassColumns | None
    #: Rows whose caps or classes differ from those in force enough to send them again.
    differs: Mask
    #: Rows whose classes their applier cannot take (how many it takes, per row).
    withheld: Mask
    room: NDArray[np.int64]


def extras(wats: tuple[str, ...], policy: Policy, rules: Sequence[ClassRule],
           specs: tuple[ClassSpec, ...], decide: DecideBatch, x: Inputs, d: BatchDecision,
           fleet: FleetTable, rows: NDArray[np.intp], held: Mask, appliers: Appliers,
           headroom: float) -> Extras:
    """The caps and classes of decision ``d`` of fleet rows ``rows`` (inputs ``x``), against
    those in force; ``held``: rows whose classes' hysteresis may hold (the decision in force is
    of the same kind, policy and rules)."""
    m = len(rows)
    ok = d.status == OK
    differs = np.zeros(m, dtype=bool)
    caps = on = None
    if appliers.rate_capped is not None:
        # Caps of the weights being decided, from the forecasts they were decided with;
        # a WAT without a usable forecast has its trial value here, as in the decision.
        caps = np.full(d.weights.shape, np.nan)
        on = ok & appliers.rate_capped[rows]
        if on.any() and uncapped_balancing(policy):
            caps[on] = balancing_caps(d.weights[on], x.present[on])
        elif on.any():
            caps[on] = rate_caps(d.weights[on], x.present[on], x.cap[on], headroom)
    room = (np.zeros(m, dtype=np.int64) if appliers.room is None
            else appliers.room[rows].astype(np.int64))
    withheld = np.zeros(m, dtype=bool)
    classes = None
    if rules:
        takes = room >= len(rules)
        withheld = ok & ~takes
        in_force = fleet.classes.subset(rows)
        if takes.any():
            classes = decide_classes(wats, rules, specs, decide, x, d.weights, in_force,
                                     fleet.present[rows], held, on, headroom)
            classes.clear(~takes)
            if caps is not None and on is not None:
                urgent_caps(specs, classes, d.weights, caps, x.cap, policy.urgent_cap_fraction,
                            on)
        else:
            classes = ClassColumns.empty(m, len(wats))
        differs |= classes_moved(in_force, classes, headroom)
    elif appliers.room is not None:
        # Rules gone: classes in force must go too.
        differs |= fleet.classes.counts(rows) > 0
    if caps is not None:
        differs |= caps_moved(fleet.caps[rows], caps, headroom)
    return Extras(caps, classes, differs, withheld, room)


def withheld_reason(reason: str, room: int, wanted: int) -> str:
    """A reason that says the set went without its classes."""
    return f"{reason} (classes withheld: the applier takes {room}, the policy has {wanted})"
