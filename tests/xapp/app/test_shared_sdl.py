"""What replicas that share a fleet share in SDL (a real RedisServer): one A1 book, what one
replica takes in (A1 reaches one pod through the Service) the others follow; and the CPE
records, which a replica that gains or loses a shard stops mirroring."""

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


def test_forgotten_cpe_records_stay_in_sdl_and_are_not_written_again(
        redis: RedisServer) -> None:
    """A replica that gains or loses a shard drops its own copy of the shard's CPE records
    (stale by then), without deleting them in SDL or flushing them later."""
    from xapp.adapters.sdl import SdlStateStore, ricsdl_backend
    from xapp.core.ports import CpeRecord

    a = SdlStateStore("mcw-t", ricsdl_backend)
    b = SdlStateStore("mcw-t", ricsdl_backend)
    try:
        assert a.sync() and b.sync()
        old = CpeRecord.from_dict({"version": 5, "time_s": 1.0, "weights": {"nr": 1}})
        new = CpeRecord.from_dict({"version": 105, "time_s": 2.0, "weights": {"nr": 2}})
        a.put_cpe("c1", old)
        assert a.forget_cpes(lambda c: c == "c1") == 1 and a.cpe("c1") is None
        b.put_cpe("c1", new)
        assert b.sync() and a.sync()  # a writes nothing over b's record
        fresh = SdlStateStore("mcw-t", ricsdl_backend)
        assert fresh.sync()
        stored = fresh.cpe("c1")
        assert stored is not None and stored.version == 105
        fresh.stop()
    finally:
        a.stop()
        b.stop()
