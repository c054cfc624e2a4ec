"""Waits that double while an attempt keeps finding nothing: the explorer's probes of a capped
WAT (:mod:`xapp.core.ewma`) and the trials of a WAT never measured
(:mod:`xapp.core.exploration`)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]


def doubled(wait: IntArray, first: int, most: int) -> IntArray:
    """The wait after another attempt that found nothing, per row: ``first`` after the first
    (``wait`` 0), then twice ``wait``, at most ``most``."""
    return np.minimum(np.maximum(first, 2 * wait), most)
