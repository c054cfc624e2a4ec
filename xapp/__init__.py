"""Multi-connectivity weights xApp: per-WAT capacity forecasts to MPTCP WRR weights.

The public facade of the engine; the RIC glue, model and channel live in sub-packages.
"""

from xapp.core.forecast import CapacityEstimator, CapacityForecast, KpiFrame
from xapp.core.policy import KNOWN_WATS, Policy, PolicyError, SteeringMode
from xapp.core.weights import (
    NoUsableWatError,
    WatState,
    WeightDecision,
    WeightError,
    decide,
    fluid_aggregate,
    fluid_aggregate_batch,
    optimal_weights_batch,
)

__all__ = [
    "KNOWN_WATS",
    "CapacityEstimator",
    "CapacityForecast",
    "KpiFrame",
    "NoUsableWatError",
    "Policy",
    "PolicyError",
    "SteeringMode",
    "WatState",
    "WeightDecision",
    "WeightError",
    "decide",
    "fluid_aggregate",
    "fluid_aggregate_batch",
    "optimal_weights_batch",
]
