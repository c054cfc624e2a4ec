"""The random processes behind the twin's traces, sampled at the twin's step :data:`DT_S`:
first-order filters, Gaussian AR(1) noise, smooth second-order noise for slow physical drivers
(shadowing, interference) and Poisson episodes (LiFi fades, blockage, boosts)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.signal import lfilter

#: The twin's step (s): every trace is sampled this often.
DT_S = 0.1

Array = NDArray[np.float64]

#: From this many CPEs on, first-order filters run as a loop over time steps on contiguous rows:
#: scipy's lfilter along axis 0 walks each CPE's column with a stride of n values and is
#: several times slower for thousands of CPEs.
ROW_LOOP_MIN_CPES = 64


def first_order(x: NDArray[np.floating[Any]], gain: float, a: float, y_prev: Array) -> Array:
    """``y[t] = a * y[t-1] + gain * x[t]`` along axis 0, with ``y[-1] = y_prev`` (n,)."""
    if x.shape[1] < ROW_LOOP_MIN_CPES:
        y, _ = lfilter([gain], [1.0, -a], x, axis=0, zi=(a * y_prev)[None, :])
        return np.asarray(y, dtype=np.float64)
    y = np.multiply(x, gain, dtype=np.float64)
    tmp = np.empty(x.shape[1])
    np.multiply(y_prev, a, out=tmp)
    y[0] += tmp
    for t in range(1, len(y)):
        np.multiply(y[t - 1], a, out=tmp)
        y[t] += tmp
    return np.asarray(y, dtype=np.float64)


def ar1(rng: np.random.Generator, steps: int, n: int, corr_s: float) -> Array:
    """Unit-variance Gaussian AR(1) noise, shape (steps, n), correlation time ``corr_s``."""
    a = float(np.exp(-DT_S / corr_s)) if corr_s > 0 else 0.0
    e = rng.standard_normal((steps, n), dtype=np.float32)  # float32 draws: twice as fast
    x0 = rng.standard_normal(n)  # stationary start: var(y0) = (1 - a²) + a² = 1
    b = np.sqrt(1.0 - a * a)
    return first_order(e, b, a, x0)


def smooth_ar(rng: np.random.Generator, steps: int, n: int, corr_s: float) -> Array:
    """Unit-variance Gaussian noise with differentiable paths, correlation time about ``corr_s``.

    Two cascaded first-order stages of ``corr_s / 2`` each (a critically damped second-order
    process).  Slow physical drivers (an obstacle's shadow has soft diffraction edges ~0.5 m
    wide; other networks' load changes flow by flow) change smoothly below their decorrelation
    scale, whereas one first-order stage has white increments and jumps at every step.  The
    first ``3 corr_s`` seconds are generated and dropped, so the trace starts stationary.
    """
    a = float(np.exp(-DT_S / (corr_s / 2.0)))
    burn = int(np.ceil(3.0 * corr_s / DT_S))
    x = ar1(rng, steps + burn, n, corr_s / 2.0)
    y = first_order(x, 1.0 - a, a, x[0])
    return np.asarray(y[burn:] * ((1.0 + a) / np.sqrt(1.0 + a * a)), dtype=np.float64)


def episodes(rng: np.random.Generator, steps: int, n: int, per_min: float,
              min_s: float, max_s: float) -> Array:
    """0/1 mask of episodes starting as a Poisson process, each of uniform length."""
    p_start = per_min / 60.0 * DT_S
    t, c = np.nonzero(rng.random((steps, n), dtype=np.float32) < p_start)
    lengths = np.maximum(1, np.rint(rng.uniform(min_s, max_s, len(t)) / DT_S).astype(np.int64))
    # Difference array: +1 where an episode starts, -1 one past its end; overlaps add up.
    edges = np.zeros((steps + 1, n), dtype=np.int32)
    np.add.at(edges, (t, c), 1)
    np.add.at(edges, (np.minimum(t + lengths, steps), c), -1)
    if n < ROW_LOOP_MIN_CPES:
        np.cumsum(edges, axis=0, out=edges)
    else:  # contiguous rows, as in first_order
        for i in range(1, steps):
            edges[i] += edges[i - 1]
    return (edges[:-1] > 0).astype(np.float64)
