"""Tiers of the suite, as markers every test gets from what it starts.

``unit``: in-process only; ``server``: starts a real Redis, InfluxDB, Mosquitto, ``mcw run`` or
another process of ours on loopback; ``netns``: builds network namespaces (root); ``container``:
builds or boots an image (podman, systemd-nspawn).  A test belongs to the highest tier its
module or its fixtures reach.  ``make test-unit`` (``pytest -m unit``: 989 of the 1,412 tests)
needs no server; ``make test`` runs every tier.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

#: The real servers (broker, redis, influx, influx_db) as fixtures of every test.
pytest_plugins = ["tests.support.servers"]

#: What in a test module's source puts its tests in a tier (highest first).
TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("container", ("podman", "systemd-nspawn")),
    ("netns", ("netns", "RealLink", "Topology(")),
    ("server", ("MosquittoBroker", "InfluxServer", "start_influxd", "RedisServer",
                "XappProcess", "subprocess", "Popen", "helm_binary", "mosquitto_binary")),
)
#: Fixtures (of the conftests) that start a server, or a tool (``helm``: every test rendering the
#: chart, whether or not its module names a process).
SERVER_FIXTURES = frozenset({"broker", "proxy_broker", "pre_deny_broker", "influx", "influx_db",
                             "redis", "stack", "process", "xapp", "submgr", "mediator", "helm"})


@cache
def _module_tier(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    for tier, needles in TIERS:
        if any(n in text for n in needles):
            return tier
    return "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = _module_tier(Path(str(item.fspath)))
        if tier == "unit" and SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            tier = "server"
        item.add_marker(getattr(pytest.mark, tier))
