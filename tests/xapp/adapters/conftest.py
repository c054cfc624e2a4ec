"""Fixtures of the adapter tests: the A1 policy type."""

from __future__ import annotations

import pytest

from xapp.adapters.a1 import PolicyType


@pytest.fixture(scope="session")
def policy_type() -> PolicyType:
    return PolicyType.load()

