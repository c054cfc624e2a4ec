"""Fixtures of the adapter tests: the A1 policy types."""

from __future__ import annotations

import pytest

from xapp.adapters.a1_types import PolicyType, load_policy_types


@pytest.fixture(scope="session")
def policy_types() -> tuple[PolicyType, ...]:
    """20100 and 20101, as the xApp registers them."""
    return load_policy_types()
