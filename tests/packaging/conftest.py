"""The chart's tests render with the real helm: one fixture for every module here."""

from __future__ import annotations

import pytest

from tests.packaging.paths import helm_binary


@pytest.fixture(scope="module")
def helm() -> str:
    found = helm_binary()
    if found is None:
        pytest.skip("helm is not installed (make deps-tools puts it in .tools/bin)")
    return found
