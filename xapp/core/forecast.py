"""The estimator interface: KPIs of one control tick in, next-period capacity forecasts out.

Everything that forecasts capacity (the EWMA baseline, the scikit-learn model, the twin's oracle)
implements :class:`CapacityEstimator`, so the control loop and the twin can swap them.  Frames
are column arrays over rows keyed by (cpe, wat), because one tick of a large site is
10,000 CPEs x 3 WATs and must be forecast as a batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class KpiFrame:
    """One control tick of per-(cpe, wat) KPIs.

    ``values`` maps a field name of the ``wat_kpi`` schema (``schemas/wat_kpi.md``: e.g.
    ``delivered_mbps``, ``rtt_ms``, ``sinr_db``) to a float array aligned with ``cpe``/``wat``;
    NaN means "not reported this tick".
    """

    time_s: float
    cpe: NDArray[np.str_]
    wat: NDArray[np.str_]
    values: Mapping[str, NDArray[np.float64]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.cpe)
        if len(self.wat) != n or any(len(v) != n for v in self.values.values()):
            raise ValueError("KpiFrame columns must all have the length of 'cpe'")

    def __len__(self) -> int:
        return len(self.cpe)

    def column(self, name: str) -> NDArray[np.float64]:
        """The named column, or all-NaN when the frame does not carry it."""
        col = self.values.get(name)
        return np.full(len(self), np.nan) if col is None else np.asarray(col, dtype=np.float64)


@dataclass(frozen=True)
class CapacityForecast:
    """Forecasts aligned with the rows of the frame they answer; Mbps, NaN when unknown."""

    median_mbps: NDArray[np.float64]
    lower_mbps: NDArray[np.float64]


@runtime_checkable
class CapacityEstimator(Protocol):
    """Keeps per-(cpe, wat) history and forecasts the capacity of the next control period."""

    def step(self, frame: KpiFrame) -> CapacityForecast:
        """Ingest one tick and return forecasts for the same rows."""
        ...
