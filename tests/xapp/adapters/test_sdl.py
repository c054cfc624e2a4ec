"""The SDL state store against a real redis-server, outages and a black-holed Redis included."""

from __future__ import annotations

import json
import threading
import time
from functools import partial

import pytest
import redis as redis_py

from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import CuttableProxy
from xapp.adapters.sdl import (
    Restored,
    SdlStateStore,
    ricsdl_backend,
)
from xapp.core.policy_book import PolicyInstance
from xapp.core.ports import CpeRecord, DirectionRecord
from xapp.core.weights import WeightDecision
from xapp.core.workers import WorkerState

NS = "mcw-test"


def decision(nr: int, wifi: int) -> WeightDecision:
    total = nr + wifi
    return WeightDecision({"nr": nr, "wifi": wifi}, {"nr": nr / total, "wifi": wifi / total},
                          100.0, frozenset({"nr", "wifi"}), True, "load_balancing")


def record(version: int, nr: int = 30, wifi: int = 100) -> CpeRecord:
    return CpeRecord.from_decision(version, decision(nr, wifi), mode="load_balancing",
                                   policy_source="default", time_s=1.0)


def raw_keys() -> dict[str, bytes]:
    """What Redis holds in the namespace, read with a fresh ricsdl client."""
    sdl = ricsdl_backend()
    try:
        return sdl.find_and_get(NS, "*")
    finally:
        sdl.close()




def test_state_survives_a_restart_of_the_xapp(redis: RedisServer) -> None:
    a = SdlStateStore(NS, ricsdl_backend)
    a.save_policy(PolicyInstance("p1", {"max_weight": 9}, frozenset({"cpe-1"}), 12.5))
    a.put_cpe("cpe-1", record(7))
    a.set_model_version("model-2024-01")
    assert a.sync() and a.connected and a.pending() == 0
    stored = raw_keys()
    assert json.loads(stored["cpe/cpe-1"])["version"] == 7
    a.stop()

    restored: list[Restored] = []
    b = SdlStateStore(NS, ricsdl_backend, on_restore=restored.append)
    assert b.sync()
    assert b.policies() == [PolicyInstance("p1", {"max_weight": 9}, frozenset({"cpe-1"}), 12.5)]
    assert b.cpe("cpe-1") == record(7)
    assert b.cpe("cpe-1").ul.decision().weights == {"nr": 30, "wifi": 100}  # type: ignore[union-attr]
    assert b.model_version == "model-2024-01"
    assert len(restored) == 1 and restored[0].model_version == "model-2024-01"
    # Deletions reach Redis too.
    b.delete_policy("p1")
    assert b.sync() and "policy/p1" not in raw_keys()
    b.stop()


def test_directions_survive_a_restart_and_old_records_read_as_both(redis: RedisServer
                                                                   ) -> None:
    a = SdlStateStore(NS, ricsdl_backend)
    dl = DirectionRecord.from_decision(decision(200, 5), mode="load_balancing",
                                       policy_source="dl-only")
    ul = DirectionRecord.from_decision(decision(1, 90), mode="fixed_split",
                                       policy_source="default")
    a.put_cpe("cpe-2", CpeRecord(11, 3.0, dl, ul))
    assert a.sync()
    a.stop()
    # A record as the xApp wrote it before directions existed: one set, for both.
    old = {"version": 4, "weights": {"nr": 3, "lifi": 1}, "shares": {"nr": 0.75, "lifi": 0.25},
           "aggregate_mbps": 40.0, "usable": ["lifi", "nr"], "reason": "load_balancing",
           "mode": "load_balancing", "policy_source": "default", "time_s": 2.0}
    b = SdlStateStore(NS, ricsdl_backend)
    assert b.sync()
    got = b.cpe("cpe-2")
    assert got == CpeRecord(11, 3.0, dl, ul)
    assert got is not None and got.dl.weights == {"nr": 200, "wifi": 5}
    assert got.ul.mode == "fixed_split" and got.dl.policy_source == "dl-only"
    b.stop()
    restored = CpeRecord.from_dict(old)
    assert restored.dl == restored.ul and restored.version == 4
    assert restored.ul.weights == {"nr": 3, "lifi": 1}


def test_redis_outage_runs_from_memory_and_catches_up(redis: RedisServer) -> None:
    errors: list[int] = []
    store = SdlStateStore(NS, ricsdl_backend, on_error=lambda: errors.append(1), interval_s=0.05)
    store.save_policy(PolicyInstance("p1", {"max_weight": 9}, frozenset(), 1.0))
    store.put_cpe("cpe-1", record(1))
    assert store.sync()
    store.start()
    try:
        redis.stop()
        assert wait_until(lambda: not store.connected), "outage not noticed"
        assert errors
        # The loop goes on: memory takes writes while Redis is away.
        store.put_cpe("cpe-1", record(2, nr=50))
        store.put_cpe("cpe-2", record(1))
        assert store.cpe("cpe-1") == record(2, nr=50)
        assert store.pending() >= 2
        redis.start()   # comes back EMPTY (no persistence)
        assert wait_until(lambda: store.connected and store.pending() == 0), store.last_error
        stored = raw_keys()
        # What changed during the outage, and what did not (Redis lost it), is all back.
        assert json.loads(stored["cpe/cpe-1"])["version"] == 2
        assert json.loads(stored["cpe/cpe-2"])["version"] == 1
        assert json.loads(stored["policy/p1"])["payload"] == {"max_weight": 9}
    finally:
        store.stop()


def test_redis_absent_at_start_restores_when_it_appears(redis: RedisServer) -> None:
    seed = SdlStateStore(NS, ricsdl_backend)
    seed.save_policy(PolicyInstance("old", {"max_weight": 5}, frozenset(), 1.0))
    seed.save_policy(PolicyInstance("gone", {"max_weight": 6}, frozenset(), 1.0))
    assert seed.sync()
    seed.stop()
    # Simulate "Redis down at start" with a factory that fails until allowed.
    allowed = {"ok": False}

    def factory():  # type: ignore[no-untyped-def]
        if not allowed["ok"]:
            raise ConnectionError("no route to dbaas")
        return ricsdl_backend()

    restored: list[Restored] = []
    store = SdlStateStore(NS, factory, on_restore=restored.append)
    assert not store.sync() and not store.connected
    # Before Redis is back, an A1 update of "old" and a delete of "gone" arrive.
    store.save_policy(PolicyInstance("old", {"max_weight": 50}, frozenset(), 2.0))
    store.delete_policy("gone")
    allowed["ok"] = True
    assert store.sync()
    # Local changes win over the stored ones; the restore hands back only what was untouched.
    assert [p.payload for p in store.policies()] == [{"max_weight": 50}]
    assert restored[0].policies == []
    assert set(raw_keys()) >= {"policy/old"} and "policy/gone" not in raw_keys()
    store.stop()


def test_a_redis_that_stops_answering_fails_the_flush_within_the_timeout(
        redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis behind a proxy that black-holes it (accepts, never answers): each flush gives up
    after the client's socket timeout instead of blocking the flusher until it counts as
    stuck; when traffic passes again, what changed meanwhile is written."""
    proxy = CuttableProxy(redis.port)
    monkeypatch.setenv("DBAAS_SERVICE_PORT", str(proxy.port))
    errors: list[int] = []
    store = SdlStateStore(NS, partial(ricsdl_backend, timeout_s=0.3),
                          on_error=lambda: errors.append(1), interval_s=0.05)
    real = redis_py.Redis(host=redis.host, port=redis.port, socket_timeout=2.0)
    try:
        store.put_cpe("cpe-1", record(1))
        assert store.sync() and store.connected
        proxy.cut()
        store.put_cpe("cpe-1", record(2, nr=50))
        store.save_policy(PolicyInstance("p1", {"max_weight": 9}, frozenset(), 1.0))
        # In a thread of its own, so that a flush that hangs fails the test instead of it.
        result: list[bool] = []
        started = time.monotonic()
        flush = threading.Thread(target=lambda: result.append(store.sync()), daemon=True)
        flush.start()
        flush.join(5.0)
        elapsed = time.monotonic() - started
        assert result == [False], f"the flush did not return in {elapsed:.1f} s"
        assert elapsed < 1.5
        assert not store.connected and errors == [1]
        assert "NotConnected" in store.last_error or "not active" in store.last_error
        # The flusher keeps failing, pass after pass: each one ends.
        store.start()
        assert wait_until(lambda: len(errors) >= 3, 10)
        assert store.worker.status().state is WorkerState.OK  # not stuck in a pass
        assert store.pending() == 2
        proxy.heal()
        assert wait_until(lambda: store.connected and store.pending() == 0, 10), \
            store.last_error
        cpe = real.get(f"{{{NS}}},cpe/cpe-1")
        assert cpe is not None and json.loads(cpe)["version"] == 2
        assert real.get(f"{{{NS}}},policy/p1") is not None
    finally:
        store.stop()
        real.close()
        proxy.close()


def test_memory_only_store_needs_no_redis() -> None:
    store = SdlStateStore(NS)
    store.put_cpe("c", record(1))
    assert store.sync() and store.connected and store.cpe("c") == record(1)
