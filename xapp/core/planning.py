"""Which quantile of a WAT's capacity the weight engine should plan with: what an error costs.

Under WRR with ``cwnd_limited=N`` a connection whose weights are proportional to planned
capacities ``X`` (total ``D = sum(X)``) runs at ``T = D * min_i C_i / X_i`` (the fluid model of
:mod:`xapp.core.weights`).  Let one WAT ``j`` be planned at ``X_j`` and every other be exact:

* over-estimate (``C_j < X_j``): ``j`` is the bottleneck, ``T = D C_j / X_j``, and the loss
  against the capacity sum is ``(X_j - C_j) (D - X_j) / X_j``: each Mbps too many costs
  ``(D - X_j) / X_j``, the other WATs' capacity per Mbps of ``j``;
* under-estimate (``C_j > X_j``): the others are the bottleneck, ``T = D``, and the loss is
  ``C_j - X_j``: each Mbps too few costs 1.

Minimising the expected loss over ``X_j`` is the newsvendor problem, whose answer is the
quantile ``cost_under / (cost_under + cost_over) = X_j / D``: **plan each WAT at the quantile
of its capacity equal to its share of the connection.**  A WAT that carries 2 % of the traffic
is planned at its 2 % quantile (an over-estimate would throttle the other 98 %); the WAT that
carries most of it at a high quantile (an under-estimate wastes its own excess, an
over-estimate only the little the others carry).  A constant lower quantile (0.10 before) is
too cautious for the dominant WAT and not cautious enough for a minor one.

The share comes from the central forecasts (one fixed-point step: the quantiles move the
shares little).  The level is clipped to ``[tau_min, tau_max]``: below the lowest calibrated
level the conformal quantile is not estimated; ``tau_max = 0.5`` keeps the planned capacity at
most the central forecast, so ``lower <= median`` holds for every consumer of the forecast
(the stored predictions, ``/ric/v1/cpes``).  The twin measured what higher levels would add
(README, "Measured figures"): less than 0.2 points of the oracle.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]

#: The planning level by default: "cost" (the share rule above) or a constant level.
COST = "cost"
TAU_MIN = 0.01
TAU_MAX = 0.5


def cost_levels(center: Array, group: NDArray[np.intp], tau_min: float = TAU_MIN,
                tau_max: float = TAU_MAX) -> Array:
    """The planning level of each row: its central forecast's share of its group's (CPE's)
    total, clipped to ``[tau_min, tau_max]``.  NaN or negative forecasts count as 0."""
    c = np.where(np.isfinite(center), np.maximum(center, 0.0), 0.0)
    if len(c) == 0:
        return np.empty(0)
    total = np.bincount(group, weights=c)[group]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(total > 0.0, c / total, 0.0)
    return np.clip(share, tau_min, tau_max)


def check_level(value: str | float) -> str | float:
    """``value`` if it is :data:`COST` or a level in ``[TAU_MIN, TAU_MAX]``, else ValueError."""
    if value == COST:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"planning level must be {COST!r} or a number, got {value!r}")
    if not TAU_MIN <= float(value) <= TAU_MAX:
        raise ValueError(f"planning level must be in [{TAU_MIN}, {TAU_MAX}], got {value}")
    return float(value)
