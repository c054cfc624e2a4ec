from tests.support.redis_server import redis  # noqa: F401  (the fixture)
