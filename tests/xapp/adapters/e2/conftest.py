"""Fixtures of the E2 tests: the stand-in Subscription Manager."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.xapp.adapters.e2.submgr_stand_in import StandInSubmgr


@pytest.fixture
def submgr() -> Iterator[StandInSubmgr]:
    s = StandInSubmgr()
    yield s
    s.close()
    assert not s.problems
