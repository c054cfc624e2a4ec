"""Online adaptive calibration of the model's lower bound (adaptive conformal inference).

The capacity model's lower bound is ``center - q * scale`` with ``q`` the family model's
``lower_q_``, calibrated once at training time for a miss rate ``alpha`` (the model's
``lower_quantile``, 0.10).  On a radio environment the training data never saw, that miss rate
is not what the running xApp gets.  :class:`AdaptiveLowerBound` keeps one multiplier ``q_t``
per key (a (CPE, WAT) pair, so per CPE and WAT family) and tracks the quantile online, the "P"
part of conformal PID control (Angelopoulos, Candès and Tibshirani, *Conformal PID control for
time series prediction*, NeurIPS 2023), which is adaptive conformal inference (Gibbs and
Candès, *Adaptive conformal inference under distribution shift*, NeurIPS 2021) applied to the
score threshold::

    q_{t+1} = max(0, q_t + eta * (err_t - alpha)),    eta = eta_scale * max(q_0, 0.1)

with ``q_0`` the family model's ``lower_q_`` (where every key starts) and ``err_t`` 1 when the
period's capacity fell below the lower bound forecast for it.  Whatever the drift, as long as
some multiplier ``q_max`` would cover every period, the miss rate of each key over ``T``
scored periods is within ``(q_max + eta) / (eta T)`` of ``alpha`` (Angelopoulos et al.,
Proposition 1): no distributional assumption, only the bounded score.  A family whose model has
``lower_q_ == 0`` has no recoverable scale: its bound is measured but not adjusted.

Under weighted round-robin the delivered throughput is a capacity sample only when the subflow
was saturated (``saturated >= SATURATED_MIN``, or unknown), so the error is censoring-aware:

* saturated: ``err = delivered < lower``;
* not saturated and ``delivered >= lower``: covered (capacity >= delivered >= lower), ``err = 0``;
* not saturated and ``delivered < lower``: unknown, no update (nor for a missing ``delivered``).

Every update is vectorised over the keys of a tick.  The state is indexed by the slots of the
estimator's :class:`~xapp.model.features.FeatureState` and resets with it: a key unseen for
longer than the feature state's ``stale_after_s`` starts again from ``q_0``, so what is kept is
bounded by the keys the feature state holds.

Not safe for concurrent use (one control loop owns it); :meth:`snapshot` may be read from
another thread (it reads a dict that is replaced, never mutated, by the loop).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xapp.core.kpis import FAMILIES, SATURATED_MIN

Array = NDArray[np.float64]

#: Learning rate of the multiplier as a fraction of the initial multiplier (floored at 0.1):
#: a miss raises ``q`` by ``0.9 * eta``, a covered period lowers it by ``0.1 * eta``, so a key
#: whose bound misses every period widens its bound by ``q_0`` in about 22 periods.
ETA_SCALE = 0.05
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
    multiplier : float
        Mean adaptive multiplier ``q`` over the family's keys forecast in the last tick (NaN
        when there were none).
    initial_multiplier : float
        The family model's ``lower_q_`` (NaN when there is no model for the family).
    periods : int
        Periods with a known error so far (cumulative).
    """

    coverage: float
    multiplier: float
    initial_multiplier: float
    periods: int


class AdaptiveLowerBound:
    """Per-key adaptive multipliers of the lower bound, and the coverage per family.

    Parameters
    ----------
    alpha : float, default=0.1
        Target miss rate of the lower bound (the model's ``lower_quantile``).
    eta_scale : float, default=ETA_SCALE
        Learning rate as a fraction of ``max(q_0, 0.1)``; 0 turns adaptation off (the
        coverage is still measured).
    coverage_halflife : float, default=COVERAGE_HALFLIFE_TICKS
        Half-life in ticks of the coverage per family.
    """

    def __init__(self, alpha: float = 0.1, eta_scale: float = ETA_SCALE,
                 coverage_halflife: float = COVERAGE_HALFLIFE_TICKS) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        if eta_scale < 0.0:
            raise ValueError(f"eta_scale must be >= 0, got {eta_scale}")
        if coverage_halflife <= 0.0:
            raise ValueError(f"coverage_halflife must be > 0, got {coverage_halflife}")
        self.alpha = alpha
        self.eta_scale = eta_scale
        self.coverage_halflife = coverage_halflife
        self._decay = 0.5 ** (1.0 / coverage_halflife)
        #: Multiplier per slot (NaN: starts at the family's q_0 when next forecast).
        self._q = np.full(0, np.nan)
        #: The lower bound forecast per slot for the period now running (NaN: none).
        self._prev = np.full(0, np.nan)
        self._q0: dict[str, float] = {}
        self._alpha: dict[str, float] = {}
        self._generation = 0
        self._row_cache: tuple[object, int, tuple[NDArray[np.intp], Array, Array, Array]] | None \
            = None
        self._weight = dict.fromkeys(FAMILIES, 0.0)
        self._covered = dict.fromkeys(FAMILIES, 0.0)
        self._periods = dict.fromkeys(FAMILIES, 0)
        self._mean_q: dict[str, float] = {}
        self._snapshot: dict[str, FamilyCalibration] = {}

    def _grow(self, need: int) -> None:
        size = len(self._q)
        if need <= size:
            return
        new = max(need, 2 * size, 1024)
        for name in ("_q", "_prev"):
            old = getattr(self, name)
            arr = np.full(new, np.nan)
            arr[:size] = old
            setattr(self, name, arr)

    def reset(self, q0: dict[str, float], alpha: dict[str, float] | None = None) -> None:
        """Start every key again from ``q0`` (family -> the model's ``lower_q_``): a new model
        has a calibration of its own.  ``alpha`` overrides the target miss rate per family
        (the family model's ``lower_quantile``).  The coverage measured so far is kept."""
        self._q[:] = np.nan
        self._prev[:] = np.nan
        self._q0 = dict(q0)
        self._generation += 1
        self._alpha = {f: a for f, a in (alpha or {}).items() if 0.0 < a < 1.0}

    def _per_row(self, families: NDArray[np.str_]) -> tuple[NDArray[np.intp], Array, Array,
                                                            Array]:
        """Family code (``len(FAMILIES)`` for none), q_0, eta and alpha of each row; cached
        while the estimator passes the same family array (the same rows) and the model."""
        cache = self._row_cache
        if cache is not None and cache[0] is families and cache[1] == self._generation:
            return cache[2]
        k = len(FAMILIES)
        code = np.full(len(families), k, dtype=np.intp)
        for j, fam in enumerate(FAMILIES):
            code[families == fam] = j
        q0 = np.array([self._q0.get(f, np.nan) for f in FAMILIES] + [np.nan])
        alpha = np.array([self._alpha.get(f, self.alpha) for f in FAMILIES] + [self.alpha])
        eta = self.eta_scale * np.maximum(np.nan_to_num(q0, nan=0.0), 0.1)
        out = (code, q0[code], eta[code], alpha[code])
        self._row_cache = (families, self._generation, out)
        return out

    def observe(self, idx: NDArray[np.intp], families: NDArray[np.str_], delivered: Array,
                saturated: Array, fresh: NDArray[np.bool_]) -> None:
        """Score the period that just ended and update the multipliers.

        ``idx`` are the rows' slots (each at most once) and ``families`` their WAT families
        (``""`` unknown); ``delivered`` and ``saturated`` the rows' KPIs (NaN unknown);
        ``fresh`` is False where the key is new or was stale (its history restarted): its
        multiplier restarts from ``q_0`` and it is not scored.
        """
        if len(idx) == 0:
            return
        self._grow(int(idx.max()) + 1)
        code, q0, eta, alpha = self._per_row(families)
        prev = self._prev[idx]
        q = self._q[idx]
        stale = ~fresh
        if stale.any():
            prev[stale] = np.nan
            q[stale] = np.nan
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
        d = self._decay
        for j, fam in enumerate(FAMILIES):
            if n_known[j]:
                self._periods[fam] += int(n_known[j])
            self._weight[fam] = d * self._weight[fam] + n_known[j]
            self._covered[fam] = d * self._covered[fam] + (n_known[j] - n_miss[j])
        if self.eta_scale > 0.0:
            base = np.where(np.isnan(q), q0, q)
            step = np.maximum(0.0, base + eta * (miss - alpha))
            # Unscored keys (and families without a model: q0 NaN) keep their multiplier.
            q = np.where(known & ~np.isnan(q0), step, q)
        self._q[idx] = q

    def adjust(self, family: str, slots: NDArray[np.intp], center: Array, lower: Array,
               q0: float) -> Array:
        """The lower bound of ``family``'s rows with each key's multiplier instead of ``q0``.

        ``lower`` is the model's bound ``center - q0 * scale``; the scale is recovered from it,
        so any bound of that form is adjusted exactly.  With ``q0 <= 0`` the scale is not
        recoverable and ``lower`` is returned as it is.
        """
        if not np.isfinite(q0) or q0 <= 0.0:
            self._mean_q[family] = q0
            return lower
        q = self._q[slots]
        q = np.where(np.isnan(q), q0, q)
        self._mean_q[family] = float(q.mean()) if len(q) else float("nan")
        return np.asarray(center - (q / q0) * (center - lower), dtype=np.float64)

    def remember(self, slots: NDArray[np.intp], lower: Array) -> None:
        """The bounds published for the period that starts now (scored at the next tick)."""
        self._prev[slots] = lower

    def publish(self, families: tuple[str, ...]) -> None:
        """Refresh :meth:`snapshot` for ``families`` (the end of a tick)."""
        snap = dict(self._snapshot)
        for fam in families:
            w = self._weight[fam]
            snap[fam] = FamilyCalibration(
                coverage=self._covered[fam] / w if w > 0 else float("nan"),
                multiplier=self._mean_q.get(fam, float("nan")),
                initial_multiplier=self._q0.get(fam, float("nan")),
                periods=self._periods[fam])
        self._mean_q = {}
        self._snapshot = snap

    def snapshot(self) -> dict[str, FamilyCalibration]:
        """Coverage and mean multiplier per family, as of the last tick."""
        return self._snapshot
