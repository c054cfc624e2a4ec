"""Online adaptive calibration of the planned capacity (adaptive conformal inference).

The capacity model plans each WAT at a level ``tau`` of its capacity distribution (chosen per
period by what an error costs, :mod:`xapp.core.planning`): ``center - Q(tau) * scale``,
``Q`` the multiples the model calibrated once at training time (split conformal on held-out
sessions).  On a radio environment the training data never saw, the fraction of periods whose
capacity falls below that bound is not ``tau``.  :class:`AdaptiveLowerBound` keeps one factor
``m`` per key (a (CPE, WAT) pair, so per CPE and WAT family) on the calibrated multiples, the
bound becoming ``center - m * Q(tau) * scale``, and tracks the quantile online, the "P" part of
conformal PID control (Angelopoulos, Candès and Tibshirani, *Conformal PID control for time
series prediction*, NeurIPS 2023), which is adaptive conformal inference (Gibbs and Candès,
*Adaptive conformal inference under distribution shift*, NeurIPS 2021) on the score threshold::

    m_{t+1} = max(0, m_t + eta * (err_t - tau_t)),    m_0 = 1

with ``err_t`` 1 when the period's capacity fell below the bound forecast for it and ``tau_t``
that period's level.  With a constant level, whatever the drift, as long as some factor covers
every period, the miss rate of each key over ``T`` scored periods is within ``O(1 / (eta T))``
of ``tau`` (Angelopoulos et al., Proposition 1); with a level that varies, the miss rate tracks
the mean level.  The factor moves the bound only where ``Q(tau) > 0`` (a bound below the central
forecast); a period planned at or above the centre is scored for the coverage but does not
move the factor (there a larger factor would raise the bound, not lower it).

Under weighted round-robin the delivered throughput is a capacity sample only when the subflow
was saturated (``saturated >= SATURATED_MIN``, or unknown), so the error is censoring-aware:

* saturated: ``err = delivered < bound``;
* not saturated and ``delivered >= bound``: covered (capacity >= delivered >= bound), ``err = 0``;
* not saturated and ``delivered < bound``: unknown, no update (nor for a missing ``delivered``).

Every update is vectorised over the keys of a tick.  The state is indexed by the slots of the
estimator's :class:`~xapp.model.features.FeatureState` and resets with it: a key unseen for
longer than the feature state's ``stale_after_s`` starts again from ``m = 1``, so what is kept
is bounded by the keys the feature state holds.

Not safe for concurrent use (one control loop owns it); :meth:`snapshot` may be read from
another thread (it reads a dict that is replaced, never mutated, by the loop).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core.kpis import FAMILIES, SATURATED_MIN

Array = NDArray[np.float64]

#: Learning rate of the factor: a miss at level 0.1 raises it by ``0.9 * ETA``, a covered
#: period lowers it by ``0.1 * ETA``; a key whose bound misses every period doubles its margin
#: in about 11 periods.
ETA = 0.1
#: Half-life, in ticks, of the exponentially weighted coverage reported per family.
COVERAGE_HALFLIFE_TICKS = 100.0


@dataclass(frozen=True)
class FamilyCalibration:
    """What :meth:`AdaptiveLowerBound.snapshot` reports for one WAT family.

    Attributes
    ----------
    coverage : float
        Exponentially weighted fraction of covered periods among those with a known error
        (NaN before the first one).
    target : float
        The coverage aimed at over the same periods, ``1 - tau`` weighted alike (NaN before the
        first one): with a level chosen by cost it moves with the WATs' shares.
    multiplier : float
        Mean adaptive factor ``m`` over the family's keys forecast in the last tick (NaN when
        there were none; 1 is the model's own calibration).
    periods : int
        Periods with a known error so far (cumulative).
    """

    coverage: float
    target: float
    multiplier: float
    periods: int


class AdaptiveLowerBound:
    """Per-key adaptive factors of the planned capacity's margin, and coverage per family.

    Parameters
    ----------
    eta : float, default=ETA
        Learning rate of the factor; 0 turns adaptation off (the coverage is still measured).
    coverage_halflife : float, default=COVERAGE_HALFLIFE_TICKS
        Half-life in ticks of the coverage per family.
    """

    def __init__(self, eta: float = ETA,
                 coverage_halflife: float = COVERAGE_HALFLIFE_TICKS) -> None:
        if eta < 0.0:
            raise ValueError(f"eta must be >= 0, got {eta}")
        if coverage_halflife <= 0.0:
            raise ValueError(f"coverage_halflife must be > 0, got {coverage_halflife}")
        self.eta = eta
        self.coverage_halflife = coverage_halflife
        self._decay = 0.5 ** (1.0 / coverage_halflife)
        #: Factor per slot (NaN: 1, the model's own calibration).
        self._m = np.full(0, np.nan)
        #: The bound forecast per slot for the period now running (NaN: none), its level, and
        #: whether the factor moves it.
        self._prev = np.full(0, np.nan)
        self._tau = np.full(0, np.nan)
        self._adjustable = np.zeros(0, dtype=bool)
        self._code_cache: tuple[object, NDArray[np.intp]] | None = None
        self._weight = dict.fromkeys(FAMILIES, 0.0)
        self._covered = dict.fromkeys(FAMILIES, 0.0)
        self._aimed = dict.fromkeys(FAMILIES, 0.0)
        self._periods = dict.fromkeys(FAMILIES, 0)
        self._mean_m: dict[str, float] = {}
        self._snapshot: dict[str, FamilyCalibration] = {}

    def _grow(self, need: int) -> None:
        size = len(self._m)
        if need <= size:
            return
        new = max(need, 2 * size, 1024)
        for name, fill in (("_m", np.nan), ("_prev", np.nan), ("_tau", np.nan),
                           ("_adjustable", False)):
            old = getattr(self, name)
            arr = np.full(new, fill, dtype=old.dtype)
            arr[:size] = old
            setattr(self, name, arr)

    def reset(self) -> None:
        """Start every key again from ``m = 1``: a new model has a calibration of its own.
        The coverage measured so far is kept."""
        self._m[:] = np.nan
        self._prev[:] = np.nan

    def _codes(self, families: NDArray[np.str_]) -> NDArray[np.intp]:
        """Family code of each row (``len(FAMILIES)`` for none), cached per family array."""
        cache = self._code_cache
        if cache is not None and cache[0] is families:
            return cache[1]
        code = np.full(len(families), len(FAMILIES), dtype=np.intp)
        for j, fam in enumerate(FAMILIES):
            code[families == fam] = j
        self._code_cache = (families, code)
        return code

    def observe(self, idx: NDArray[np.intp], families: NDArray[np.str_], delivered: Array,
                saturated: Array, fresh: NDArray[np.bool_]) -> None:
        """Score the period that just ended and update the factors.

        ``idx`` are the rows' slots (each at most once) and ``families`` their WAT families
        (``""`` unknown); ``delivered`` and ``saturated`` the rows' KPIs (NaN unknown);
        ``fresh`` is False where the key is new or was stale (its history restarted): its
        factor restarts from 1 and it is not scored.
        """
        if len(idx) == 0:
            return
        self._grow(int(idx.max()) + 1)
        code = self._codes(families)
        prev = self._prev[idx]
        tau = self._tau[idx]
        m = self._m[idx]
        stale = ~fresh
        if stale.any():
            prev[stale] = np.nan
            m[stale] = np.nan
        # Until the next forecast, no key has a bound for the period that starts now.
        self._prev[idx] = np.nan
        with np.errstate(invalid="ignore"):
            below = delivered < prev
            censored = saturated < SATURATED_MIN  # False where saturation is unknown (NaN)
        known = ~np.isnan(prev) & ~np.isnan(delivered) & ~(censored & below)
        miss = known & below
        k = len(FAMILIES) + 1
        n_known = np.bincount(code, weights=known, minlength=k)
        n_miss = np.bincount(code, weights=miss, minlength=k)
        aimed = np.bincount(code, weights=np.where(known, 1.0 - tau, 0.0), minlength=k)
        d = self._decay
        for j, fam in enumerate(FAMILIES):
            if n_known[j]:
                self._periods[fam] += int(n_known[j])
            self._weight[fam] = d * self._weight[fam] + n_known[j]
            self._covered[fam] = d * self._covered[fam] + (n_known[j] - n_miss[j])
            self._aimed[fam] = d * self._aimed[fam] + aimed[j]
        if self.eta > 0.0:
            move = known & self._adjustable[idx]
            step = np.maximum(0.0, np.where(np.isnan(m), 1.0, m) + self.eta * (miss - tau))
            m = np.where(move, step, m)
        self._m[idx] = m

    def factor(self, family: str, slots: NDArray[np.intp]) -> Array:
        """The factor of each key (1 where it has none yet)."""
        self._grow(int(slots.max()) + 1 if len(slots) else 0)
        m = self._m[slots]
        m = np.where(np.isnan(m), 1.0, m)
        self._mean_m[family] = float(m.mean()) if len(m) else float("nan")
        return m

    def remember(self, slots: NDArray[np.intp], bound: Array, tau: Array,
                 adjustable: NDArray[np.bool_]) -> None:
        """The bounds forecast for the period that starts now (scored at the next tick), their
        levels, and where the factor moves them."""
        self._prev[slots] = bound
        self._tau[slots] = tau
        self._adjustable[slots] = adjustable

    def publish(self, families: Iterable[str]) -> None:
        """Refresh :meth:`snapshot` for ``families`` (the end of a tick)."""
        snap = dict(self._snapshot)
        for fam in families:
            w = self._weight[fam]
            snap[fam] = FamilyCalibration(
                coverage=self._covered[fam] / w if w > 0 else float("nan"),
                target=self._aimed[fam] / w if w > 0 else float("nan"),
                multiplier=self._mean_m.get(fam, float("nan")),
                periods=self._periods[fam])
        self._mean_m = {}
        self._snapshot = snap

    def snapshot(self) -> dict[str, FamilyCalibration]:
        """Coverage, its target and the mean factor per family, as of the last tick."""
        return self._snapshot
