"""The weights' versions: the store (SDL Redis, or memory), the reader of Redis' clock that the
issue times follow, and the least version a block may start from."""

from __future__ import annotations

import logging
import time
from typing import cast

import pytest
import redis as redis_py

from tests.support.redis_server import RedisServer
from xapp.adapters.dbaas import RedisLike, RedisVersionStore
from xapp.adapters.mqtt.versions import MemoryVersionStore
from xapp.app.metrics import Metrics
from xapp.app.wiring.versions import (
    VERSIONS_PER_MS,
    RedisClock,
    build_versions,
    version_floor,
)
from xapp.core.issue_clock import IssueClock
from xapp.core.timings import derive_timings

NOW_MS = 1_700_000_000_000


def test_the_floor_is_the_highest_of_what_is_known() -> None:
    clock = NOW_MS * VERSIONS_PER_MS
    assert version_floor(5, NOW_MS, None) == clock  # SDL lost, no agent reported yet
    assert version_floor(clock + 7, NOW_MS, None) == clock + 7
    assert version_floor(5, NOW_MS, clock + 9) == clock + 9


def test_without_sdl_the_versions_live_in_memory_and_no_clock_is_read() -> None:
    store, clock = build_versions(None, derive_timings(1.0), lambda _cpe: 0, IssueClock(),
                                  lambda _skew: None)
    assert isinstance(store, MemoryVersionStore) and clock is None


class RedisTime:
    """``TIME`` of a Redis whose clock the test sets."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def time(self) -> tuple[int, int]:
        return int(self.now_s), round(self.now_s % 1 * 1e6)


def test_a_skew_is_reported_at_each_reading_and_logged_when_it_comes_and_goes(
        caplog: pytest.LogCaptureFixture) -> None:
    host = 1_000_000.0
    redis = RedisTime(host + 30.0)  # this host is 30 s behind
    skews: list[float] = []
    issue = IssueClock(lambda: host, lambda: 5.0)
    reader = RedisClock(cast(RedisLike, redis), issue, skews.append)
    caplog.set_level(logging.INFO, logger="xapp.app.wiring.versions")
    reader.read()
    reader.read()
    assert issue.now_ms() >= (host + 30.0) * 1000  # issued on Redis' clock
    redis.now_s = host + 0.2
    reader.read()
    assert skews == pytest.approx([-30.0, -30.0, -0.2])
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO]
    assert "-30.000 s off SDL Redis' clock" in said[0][1]
    assert "back within 1.0 s of SDL Redis' clock (-0.200 s)" in said[1][1]


def test_a_slow_host_issues_on_redis_clock_and_names_its_skew(redis: RedisServer) -> None:
    metrics = Metrics()
    slow = IssueClock(lambda: time.time() - 30.0)
    store, reader = build_versions("mcw-t", derive_timings(1.0), lambda _cpe: 0, slow,
                                   metrics.clock_skew.set)
    assert isinstance(store, RedisVersionStore) and reader is not None
    try:
        seconds, micros = redis_py.Redis(host=redis.host, port=redis.port).time()
        before_ms = seconds * 1000 + micros // 1000
        reader.read()
        assert slow.now_ms() >= before_ms
        skew = metrics.clock_skew._value.get()
        assert -31.0 < skew < -29.0
        assert b"mcw_clock_skew_seconds" in metrics.exposition()
    finally:
        store.close()
