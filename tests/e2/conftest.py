"""Fixtures of the E2 tests: a real redis-server with ricsdl pointed at it."""

from tests.support.redis_server import redis

__all__ = ["redis"]
