"""Fixtures of the RIC tests: the policy type, a real redis-server, ricsdl pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer, redis_binary
from xapp.adapters.a1 import PolicyType


@pytest.fixture(scope="session")
def policy_type() -> PolicyType:
    return PolicyType.load()


@pytest.fixture
def redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """A redis-server of the test's own; ricsdl (DBAAS_SERVICE_*) points at it."""
    if redis_binary() is None:
        pytest.skip("redis-server is not installed")
    with RedisServer(tmp_path / "redis") as server:
        for key, value in server.dbaas_env().items():
            monkeypatch.setenv(key, value)
        for key in ("DBAAS_SERVICE_SENTINEL_PORT", "DBAAS_MASTER_NAME", "DBAAS_NODE_COUNT"):
            monkeypatch.delenv(key, raising=False)
        yield server
