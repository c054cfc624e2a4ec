"""The drop counter: every drop counted, the log rate-limited per (kind, reason)."""

from __future__ import annotations

import logging

import pytest

from xapp.adapters.mqtt.drops import DropCounter


def test_every_drop_is_counted_and_the_log_is_rate_limited(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    drops = DropCounter(log_interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="xapp.adapters.mqtt.drops"):
        for _ in range(3):
            drops.drop("state", "schema", "bad", "mcw/v1/cpe/a/state")
        drops.drop("telemetry", "bad-json", "x" * 1000, "t" * 1000)
        now[0] += 10.0
        drops.drop("state", "schema", "bad", "mcw/v1/cpe/a/state")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0] == "dropped state payload on 'mcw/v1/cpe/a/state': schema: bad"
    assert len(lines[1]) < 700  # outside bytes are cut
    assert lines[2].endswith("(and 2 more since the last report)")
    assert drops.snapshot() == {"state/schema": 4, "telemetry/bad-json": 1}
    assert drops.total() == 5 and drops.total("state") == 4
