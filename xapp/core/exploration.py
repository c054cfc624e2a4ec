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

**Out of its domain.**  A saturated subflow's delivered rate *is* its capacity, so every
measured period grades the wrapped forecaster's forecast of it.  A model trained where Wi-Fi's
radio KPIs meant 1.19 Gbps keeps forecasting 45 Mbit/s for a Wi-Fi whose backhaul delivers 8,
period after period (``make e2e``, issue 32).  Per (series, WAT) the wrapper keeps an EWMA of the
forecast's log error against the next measurement (:data:`ERROR_ALPHA`); where it exceeds
:data:`DOMAIN_LOG_ERROR` (off by more than half, typically) the model is outside what it learnt
for that link, and the measured estimator's forecast stands instead, until the model's own
forecasts come back within it (they are still graded while set aside).

**A CPE out of domain.**  Grading needs a measurement, and a WAT the model drops carries
nothing, so it is never measured: on the real stack's ``lifi-blockage`` (issue 32) the model,
reading radio KPIs at the source paper's scale, forecast NR at 300, Wi-Fi at 860 and LiFi at 3
Mbit/s for links of 12, 8 and 24; under 1 % of the total, LiFi got weight 0 (backup on its
MPTCP endpoint) and no grade ever reached it.  Wi-Fi, carrying the connection alone, was
reported unsaturated (a censored row keeps the larger forecast: 860) while NR, graded at 8,
fell to its measured 8 and then under 1 % of Wi-Fi's 860 too.  So once any WAT of a CPE, in
either direction, was out of domain, the model has shown it does not know that CPE's links
(both directions read the same radio KPIs, and a WAT at weight 0 in one direction is backup in
both): its forecasts of the CPE's WATs that no measurement has graded are set aside as well, and
the measured estimator's stand for them.  This holds after the graded WAT comes back within the
domain (the model follows a measured WAT's delivered rate; its ungraded forecasts are as
untested as before): a WAT earns the model's forecast by its own grades.  A WAT graded within
the domain keeps the model's forecast (``make e2e``: NR right, Wi-Fi's backhaul not); an
ungraded one under exploration grows until it is the bottleneck, measured and graded.  Trusting
the model on ungraded WATs until the CPE shows it wrong costs the first measured period or two;
distrusting every ungraded forecast from the start would set the model aside on every
censored WAT, which under WRR is every WAT but the bottleneck.

**Nothing measured is no estimate.**  Where the measured estimator stands for a WAT that is up,
carried nothing this period and was never measured (no saturated period), its estimate is no
estimate: 0 at weight 0 since the start, or a few times the trickle a backup subflow carried
once (0.1-0.2 Mbit/s on the real stack), since exploration is bounded by what the WAT delivered.
There the forecast is NaN: the loop tries the WAT at the CPE's smallest forecast
(:func:`xapp.core.rowmap.inputs`), so it carries traffic and is measured, instead of being
switched off on a forecast no measurement confirmed.  A WAT that carries traffic keeps the
explorer's lower bound (it grows until the WAT is the bottleneck), a WAT reported down keeps its
0, and a WAT measured slow stays off on its measurement (``paper-static``'s 0.6 Mbit/s LiFi).
The backup flag binds both directions (the proxy's MP_PRIO stops the CPE's sending too), so each
direction's series must let the WAT back on for it to carry at all.

**A trial that carried nothing.**  A WAT tried that way and carrying nothing again in the next
period, while its CPE carried traffic on another WAT or direction, did not take what it was
offered: on the real stack's ``paper-static`` (issue 32) LiFi's 0.5 Mbit/s downlink sat in
retransmission timeouts (``saturated`` 0 in every period, so never measured) and was tried seven
periods in a row, on and carrying nothing, where the oracle has it off.  Such a WAT forecasts 0
(off) for :data:`TRIAL_WAIT` periods and is then tried again; each further trial that carries
nothing doubles the wait, up to :data:`TRIAL_WAIT_MAX`, and a period in which it carries anything
ends the waits.  A CPE that carried nothing at all (no traffic) is not judged: its WATs stay
tried.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xapp.core.backoff import doubled
from xapp.core.ewma import EwmaEstimator
from xapp.core.forecast import CapacityEstimator, CapacityForecast, KpiFrame
from xapp.core.kpis import SATURATED_MIN

#: Weight of each new measurement in a key's error score.
ERROR_ALPHA = 0.3
#: A key whose error score exceeds this (|log(forecast / measured)|: 0.405 is a factor 1.5)
#: takes the measured estimator's forecast.
DOMAIN_LOG_ERROR = float(np.log(1.5))
#: Periods a WAT whose trial carried nothing is off before the next; doubled per failed trial.
TRIAL_WAIT, TRIAL_WAIT_MAX = 4, 32


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
        #: Per (series, WAT) key: its slot in the arrays below.
        self._slots: dict[tuple[str, str], int] = {}
        #: Per CPE: its index (``_cpe_of``: slot -> CPE index) and whether a key of it was ever
        #: out of domain (``_cpe_out``, by CPE index).
        self._cpes: dict[str, int] = {}
        self._cpe_of = np.zeros(0, dtype=np.intp)
        self._cpe_out = np.zeros(0, dtype=bool)
        self._rows_of: tuple[Any, Any, Any] | None = None
        self._row_slots = np.zeros(0, dtype=np.intp)
        #: Per slot: the wrapped forecaster's last forecast, its log-error score, whether a
        #: measurement ever graded it, and whether the WAT was ever measured at all.
        self._prev = np.zeros(0)
        self._score = np.zeros(0)
        self._graded = np.zeros(0, dtype=bool)
        self._measured = np.zeros(0, dtype=bool)
        #: Per slot: tried last period (its forecast was NaN), periods left off after a
        #: failed trial, and the wait the next failed trial sets.
        self._tried = np.zeros(0, dtype=bool)
        self._trial_wait = np.zeros(0, dtype=np.int64)
        self._trial_backoff = np.zeros(0, dtype=np.int64)

    @property
    def version(self) -> Any:
        """The wrapped forecaster's model version (None when it has none)."""
        return getattr(self.base, "version", None)

    def out_of_domain(self) -> int:
        """How many (series, WAT) keys are out of the model's domain now (the ungraded keys of
        their CPEs take the measured estimator's forecast as well)."""
        return int((self._score > DOMAIN_LOG_ERROR).sum())

    def _slots_for(self, frame: KpiFrame) -> np.ndarray[Any, np.dtype[np.intp]]:
        """Each row's slot; the mapping is rebuilt only when the frame's rows change (the
        intake hands the same arrays while its rows stay)."""
        rows = (frame.series, frame.wat, len(frame))
        if self._rows_of is not None and all(a is b for a, b in zip(rows, self._rows_of,
                                                                     strict=True)):
            return self._row_slots
        slots = np.empty(len(frame), dtype=np.intp)
        cpe_of: list[int] = []
        for i, (series, wat, cpe) in enumerate(zip(frame.series.tolist(), frame.wat.tolist(),
                                                   frame.cpe.tolist(), strict=True)):
            slot = self._slots.get((series, wat))
            if slot is None:
                slot = self._slots[(series, wat)] = len(self._slots)
                cpe_of.append(self._cpes.setdefault(cpe, len(self._cpes)))
            slots[i] = slot
        grow = len(self._slots) - len(self._prev)
        if grow > 0:
            self._prev = np.concatenate([self._prev, np.full(grow, np.nan)])
            self._score = np.concatenate([self._score, np.zeros(grow)])
            self._graded = np.concatenate([self._graded, np.zeros(grow, dtype=bool)])
            self._measured = np.concatenate([self._measured, np.zeros(grow, dtype=bool)])
            self._tried = np.concatenate([self._tried, np.zeros(grow, dtype=bool)])
            self._trial_wait = np.concatenate([self._trial_wait, np.zeros(grow, dtype=np.int64)])
            self._trial_backoff = np.concatenate([self._trial_backoff,
                                                  np.zeros(grow, dtype=np.int64)])
            self._cpe_of = np.concatenate([self._cpe_of, np.array(cpe_of, dtype=np.intp)])
            self._cpe_out = np.concatenate([self._cpe_out, np.zeros(len(self._cpes)
                                                                     - len(self._cpe_out),
                                                                     dtype=bool)])
        self._rows_of, self._row_slots = rows, slots
        return slots

    def step(self, frame: KpiFrame) -> CapacityForecast:
        """Both forecasters ingest the tick; censored rows take the larger forecast, rows whose
        key is out of the wrapped forecaster's domain (or ungraded on a CPE that was) the
        measured estimator's, NaN where that has measured nothing (the loop tries the WAT)."""
        own = self.base.step(frame)
        saturated = frame.column("saturated")
        censored = np.isfinite(saturated) & (saturated < SATURATED_MIN)
        slots = self._slots_for(frame)
        delivered = frame.column("delivered_mbps")
        carried = np.isfinite(delivered) & (delivered > 0)
        # What the explorer reads as a measurement (a row without saturation is one to it).
        self._measured[slots[~censored & carried]] = True
        explored = self._unknown_blank(frame, slots, carried, self.explorer.step(frame))
        measured = ~censored & np.isfinite(saturated) & carried
        prev = self._prev[slots]
        graded = measured & np.isfinite(prev) & (prev > 0)
        if graded.any():
            err = np.abs(np.log(prev[graded] / delivered[graded]))
            s = slots[graded]
            self._score[s] += ERROR_ALPHA * (err - self._score[s])
            self._graded[s] = True
        self._prev[slots] = own.median_mbps
        away = self._away(slots)
        own = CapacityForecast(
            median_mbps=np.where(away, explored.median_mbps, own.median_mbps),
            lower_mbps=np.where(away, explored.lower_mbps, own.lower_mbps))
        median = np.where(np.isnan(own.median_mbps), explored.median_mbps, own.median_mbps)
        lower = np.where(np.isnan(own.lower_mbps), explored.lower_mbps, own.lower_mbps)
        median = np.where(censored, np.fmax(median, explored.median_mbps), median)
        lower = np.where(censored, np.fmax(lower, explored.lower_mbps), lower)
        self._tried[slots] = np.isnan(median)  # the loop tries these (rowmap.inputs)
        return CapacityForecast(median_mbps=median, lower_mbps=np.minimum(lower, median))

    def _away(self, slots: np.ndarray[Any, np.dtype[np.intp]]
              ) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Per row: its key is out of domain, or no measurement graded it and a key of its CPE
        (either direction) was ever out of domain."""
        out = self._score > DOMAIN_LOG_ERROR
        self._cpe_out[self._cpe_of[out]] = True
        ungraded = self._cpe_out[self._cpe_of[slots]] & ~self._graded[slots]
        return np.asarray(out[slots] | ungraded, dtype=bool)

    def _unknown_blank(self, frame: KpiFrame, slots: np.ndarray[Any, np.dtype[np.intp]],
                       carried: np.ndarray[Any, np.dtype[np.bool_]],
                       explored: CapacityForecast) -> CapacityForecast:
        """The measured estimator's forecast, NaN for a WAT up that carried nothing this period
        and was never measured: its estimate is no measurement (0, or the trickle a backup
        subflow carried once, which bounds its exploration), and a WAT down keeps its 0; 0
        while such a WAT waits after a trial that carried nothing (the module's docstring)."""
        blank = ~carried & ~self._measured[slots] & (frame.column("up") != 0)
        cpe = self._cpe_of[slots]
        busy = np.zeros(len(self._cpes), dtype=bool)
        busy[cpe[carried]] = True
        failed = slots[blank & self._tried[slots] & busy[cpe]]
        if len(failed):
            self._trial_backoff[failed] = doubled(self._trial_backoff[failed], TRIAL_WAIT,
                                                  TRIAL_WAIT_MAX)
            self._trial_wait[failed] = self._trial_backoff[failed]
        self._trial_backoff[slots[carried]] = 0
        self._trial_wait[slots[carried]] = 0
        off = blank & (self._trial_wait[slots] > 0)
        self._trial_wait[slots[off]] -= 1
        blank &= ~off
        median = np.where(off, 0.0, explored.median_mbps)
        lower = np.where(off, 0.0, explored.lower_mbps)
        return CapacityForecast(median_mbps=np.where(blank, np.nan, median),
                                lower_mbps=np.where(blank, np.nan, lower))
