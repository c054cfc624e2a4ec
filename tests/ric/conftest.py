"""Fixtures of the RIC tests: the policy type, a real redis-server, ricsdl pointed at it."""

from __future__ import annotations

import pytest

from tests.support.redis_server import redis
from xapp.adapters.a1 import PolicyType

__all__ = ["policy_type", "redis"]


@pytest.fixture(scope="session")
def policy_type() -> PolicyType:
    return PolicyType.load()

