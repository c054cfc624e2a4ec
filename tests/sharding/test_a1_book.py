"""Replicas that share a fleet share one A1 book: what one replica takes in (A1 reaches one
pod through the Service) the others follow from SDL (a real RedisServer)."""

from __future__ import annotations

from tests.support.redis_server import RedisServer
from xapp.app.config import load_config
from xapp.app.runtime import RunOptions, XappProcess
from xapp.core.policy_book import PolicyInstance


def replica() -> XappProcess:
    return XappProcess(RunOptions(sdl="redis", rmr="off"), load_config(None))


def test_a_policy_taken_by_one_replica_reaches_the_other(redis: RedisServer) -> None:
    a, b = replica(), replica()
    inst = PolicyInstance("p1", {"mode": "load_balancing", "max_weight": 7},
                          frozenset({"cpe-1"}), 1.0)
    try:
        assert a.state.sync() and b.state.sync()
        a.book.put(inst)
        a.state.save_policy(inst)
        b._sync_book()  # not written yet: nothing to follow, and a keeps its own
        a._sync_book()
        assert b.book.get("p1") is None and a.book.get("p1") == inst
        assert a.state.sync()
        b._sync_book()
        assert b.book.get("p1") == inst
        assert b.book.resolver().for_cpe("cpe-1")[1] == "p1"
        a.book.remove("p1")
        a.state.delete_policy("p1")
        assert a.state.sync()
        b._sync_book()
        assert b.book.get("p1") is None and b.state.policies() == []
    finally:
        a.state.stop()
        b.state.stop()
