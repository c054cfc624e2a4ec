"""The doubling wait the estimators share."""

from __future__ import annotations

import numpy as np
import pytest

from xapp.core.backoff import doubled


@pytest.mark.parametrize(("wait", "first", "most", "want"), [
    ([0, 4, 8, 16, 32], 4, 32, [4, 8, 16, 32, 32]),  # first, then twice, at most most
    ([0, 3], 4, 5, [4, 5]),
    ([0, 4], 0, 0, [0, 0]),  # first 0 and most 0: waiting is off
])
def test_doubled(wait: list[int], first: int, most: int, want: list[int]) -> None:
    got = doubled(np.array(wait, dtype=np.int64), first, most)
    assert got.tolist() == want and got.dtype == np.int64
