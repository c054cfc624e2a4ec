"""Bounded exploration around a capacity forecaster: the guard against the censoring lock-in.

Under WRR with ``cwnd_limited=N`` a subflow that was not saturated delivered only its share:
its capacity is at least what it delivered, possibly much more.  A forecaster that learnt "this
WAT is slow" while the weights held it back keeps it held back (the trap of the design brief;
``mcw twin --scenario lockin`` shows it).  :class:`ExploringEstimator` wraps any
:class:`~xapp.core.forecast.CapacityEstimator` and, on censored rows only, raises the forecast to
at least the exploring EWMA's (:class:`xapp.core.ewma.EwmaEstimator`), whose estimate of an
unsaturated WAT grows step by step until the WAT becomes the bottleneck and is measured.  Rows
that measured capacity keep the wrapped forecast; rows the wrapped forecaster cannot forecast
(NaN: no model for the WAT, stale history) get the EWMA's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xapp.core.ewma import EwmaEstimator
from xapp.core.forecast import CapacityEstimator, CapacityForecast, KpiFrame
from xapp.core.kpis import SATURATED_MIN


class ExploringEstimator:
    """A :class:`~xapp.core.forecast.CapacityEstimator` that cannot lock a WAT out.

    Parameters
    ----------
    base : CapacityEstimator
        The forecaster whose forecasts stand where capacity was measured (the ML model).
    explorer : EwmaEstimator, optional
        The exploring baseline run beside it; default ``EwmaEstimator()``.

    Not safe for concurrent use (neither are the estimators it wraps).
    """

    def __init__(self, base: CapacityEstimator, explorer: EwmaEstimator | None = None) -> None:
        self.base = base
        self.explorer = explorer if explorer is not None else EwmaEstimator()

    @property
    def version(self) -> Any:
        """The wrapped forecaster's model version (None when it has none)."""
        return getattr(self.base, "version", None)

    def step(self, frame: KpiFrame) -> CapacityForecast:
        """Both forecasters ingest the tick; censored rows take the larger forecast."""
        own = self.base.step(frame)
        explored = self.explorer.step(frame)
        saturated = frame.column("saturated")
        censored = np.isfinite(saturated) & (saturated < SATURATED_MIN)
        median = np.where(np.isnan(own.median_mbps), explored.median_mbps, own.median_mbps)
        lower = np.where(np.isnan(own.lower_mbps), explored.lower_mbps, own.lower_mbps)
        median = np.where(censored, np.fmax(median, explored.median_mbps), median)
        lower = np.where(censored, np.fmax(lower, explored.lower_mbps), lower)
        return CapacityForecast(median_mbps=median, lower_mbps=np.minimum(lower, median))
