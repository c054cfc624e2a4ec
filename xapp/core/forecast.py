"""The estimator interface: KPIs of one control tick in, next-period capacity forecasts out.

Everything that forecasts capacity (the EWMA baseline, the scikit-learn model, the twin's oracle)
implements :class:`CapacityEstimator`, so the control loop and the twin can swap them.  Frames
are column arrays over rows keyed by (cpe, wat, direction), because one tick of a large site is
10,000 CPEs x 3 WATs x 2 directions and must be forecast as a batch.

Directions: ``dl`` (proxy to CPE) and ``ul`` (CPE to proxy).  A row whose direction is empty (or
a frame without a direction column) applies to both: radio KPIs such as RSRP or SINR describe the
link, not a direction.  :meth:`KpiFrame.expanded` turns such rows into a ``dl`` and a ``ul`` row,
as the intake (:class:`~xapp.core.intake.LatestKpis`) does.  One capacity model serves both
directions: the direction reaches it through the per-direction KPIs (``delivered_mbps``,
``saturated``), and its history is kept per :attr:`KpiFrame.series` (CPE and direction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

#: The directions, in the canonical order of every per-direction structure.
DIRECTIONS: Final[tuple[str, ...]] = ("dl", "ul")


@dataclass(frozen=True)
class KpiFrame:
    """One control tick of per-(cpe, wat, direction) KPIs.

    ``values`` maps a field name of the ``wat_kpi`` schema (``schemas/wat_kpi.md``: e.g.
    ``delivered_mbps``, ``rtt_ms``, ``sinr_db``) to a float array aligned with ``cpe``/``wat``;
    NaN means "not reported this tick".  ``direction`` is ``dl``, ``ul`` or empty (both) per
    row; None means every row applies to both.  ``series`` is the key an estimator keeps
    history under, per row: the CPE id, with ``/dl`` or ``/ul`` appended for a row with a
    direction (given by the intake so that it stays the same array while the rows do; derived
    here otherwise).  ``row_time_s`` is each row's own time when the rows were measured at
    different times (a batch of agent telemetry); None means every row is at ``time_s``.
    """

    time_s: float
    cpe: NDArray[np.str_]
    wat: NDArray[np.str_]
    values: Mapping[str, NDArray[np.float64]] = field(default_factory=dict)
    direction: NDArray[np.str_] | None = None
    #: None when built: derived from cpe and direction in __post_init__.
    series: NDArray[np.str_] = field(default=None)  # type: ignore[arg-type]
    row_time_s: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        n = len(self.cpe)
        if len(self.wat) != n or any(len(v) != n for v in self.values.values()):
            raise ValueError("KpiFrame columns must all have the length of 'cpe'")
        if self.direction is not None:
            if len(self.direction) != n:
                raise ValueError("KpiFrame direction must have the length of 'cpe'")
            bad = set(np.unique(self.direction).tolist()) - {"", *DIRECTIONS}
            if bad:
                raise ValueError(f"KpiFrame direction: unknown {sorted(bad)}; "
                                 f"known: {list(DIRECTIONS)} or '' (both)")
        if self.series is None:
            object.__setattr__(self, "series", series_of(self.cpe, self.direction))
        elif len(self.series) != n:
            raise ValueError("KpiFrame series must have the length of 'cpe'")
        if self.row_time_s is not None and len(self.row_time_s) != n:
            raise ValueError("KpiFrame row_time_s must have the length of 'cpe'")

    def __len__(self) -> int:
        return len(self.cpe)

    def row_times(self) -> NDArray[np.float64]:
        """Each row's time: ``row_time_s``, or ``time_s`` for every row."""
        if self.row_time_s is not None:
            return np.asarray(self.row_time_s, dtype=np.float64)
        return np.full(len(self), float(self.time_s))

    def column(self, name: str) -> NDArray[np.float64]:
        """The named column, or all-NaN when the frame does not carry it."""
        col = self.values.get(name)
        return np.full(len(self), np.nan) if col is None else np.asarray(col, dtype=np.float64)

    @property
    def directed(self) -> bool:
        """Every row names its direction (no row applies to both)."""
        return self.direction is not None and bool((self.direction != "").all())

    def expanded(self) -> KpiFrame:
        """The frame with every row that applies to both directions turned into a ``dl`` row
        and a ``ul`` row (the same values); itself when every row has a direction."""
        if self.directed:
            return self
        take, direction = expansion(self.direction, len(self))
        return KpiFrame(time_s=self.time_s, cpe=self.cpe[take], wat=self.wat[take],
                        values={k: np.asarray(v)[take] for k, v in self.values.items()},
                        direction=direction,
                        row_time_s=None if self.row_time_s is None else self.row_time_s[take])


def series_of(cpe: NDArray[np.str_], direction: NDArray[np.str_] | None) -> NDArray[np.str_]:
    """Per row: the CPE id, or ``cpe/dl``, ``cpe/ul`` for a row with a direction."""
    if direction is None or not (direction != "").any():
        return cpe
    suffix = np.where(direction == "", "", np.char.add("/", direction.astype(str)))
    return np.char.add(cpe.astype(str), suffix)


def expansion(direction: NDArray[np.str_] | None, n: int
              ) -> tuple[NDArray[np.intp], NDArray[np.str_]]:
    """Source row and direction of each row of the expanded frame: a row with a direction
    stays, a row without becomes ``dl`` then ``ul`` (in place, so order is kept)."""
    both = (np.ones(n, dtype=bool) if direction is None
            else np.asarray(direction == "", dtype=bool))
    take = np.repeat(np.arange(n, dtype=np.intp), np.where(both, 2, 1))
    out = (np.full(n, "", dtype="<U2") if direction is None
           else direction.astype("<U2"))[take]
    first = np.concatenate([[True], take[1:] != take[:-1]]) if len(take) else take.astype(bool)
    twice = both[take]
    out[twice & first] = "dl"
    out[twice & ~first] = "ul"
    return take, out


@dataclass(frozen=True)
class CapacityForecast:
    """Forecasts aligned with the rows of the frame they answer; Mbps, NaN when unknown."""

    median_mbps: NDArray[np.float64]
    lower_mbps: NDArray[np.float64]


@runtime_checkable
class CapacityEstimator(Protocol):
    """Keeps per-(series, wat) history (:attr:`KpiFrame.series`: a CPE and direction) and
    forecasts the capacity of the next control period."""

    def step(self, frame: KpiFrame) -> CapacityForecast:
        """Ingest one tick and return forecasts for the same rows."""
        ...
