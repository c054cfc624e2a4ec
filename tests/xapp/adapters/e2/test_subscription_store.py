"""What outlives the process in SDL (a real redis-server): the ids a restart deletes, and the
node records through which a replica's successor deletes what it left; the stores alone, then
through the subscriber."""

from __future__ import annotations

import json

from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from tests.xapp.adapters.e2.submgr_stand_in import (
    MEID,
    StandInSubmgr,
    Xapp,
    own,
    sharded_pair,
    static,
)
from xapp.adapters.e2.subscription_store import (
    MemoryNodeRecords,
    NodeRecords,
    NodeSubscription,
    SdlIdStore,
    SdlNodeRecords,
)


def test_a_record_is_cleared_only_while_it_is_still_the_one_named(redis: RedisServer) -> None:
    """Compare-and-delete, in memory and in SDL: an old owner's late clear leaves its
    successor's record."""
    from xapp.adapters.dbaas import redis_from_env

    old, new = NodeSubscription("sub-1", "replica-a"), NodeSubscription("sub-2", "replica-b")
    stores: list[NodeRecords] = [
        MemoryNodeRecords(), SdlNodeRecords("mcw-e2-test", lambda: redis_from_env("mcw-e2-test"))]
    for records in stores:
        assert records.get(MEID) is None
        records.put(MEID, new)
        records.clear(MEID, old)
        assert records.get(MEID) == new
        records.clear(MEID, new)
        assert records.get(MEID) is None


def test_unreadable_ids_and_records_in_sdl_are_ignored(redis: RedisServer) -> None:
    from xapp.adapters.dbaas import redis_from_env
    from xapp.adapters.sdl import ricsdl_backend

    ids = SdlIdStore("mcw-e2-test", ricsdl_backend, key="e2/subscriptions/r")
    assert ids.load() == set()
    ids.save({"sub-1", "sub-2"})
    assert ids.load() == {"sub-1", "sub-2"}
    records = SdlNodeRecords("mcw-e2-test", lambda: redis_from_env("mcw-e2-test"))
    records.put(MEID, NodeSubscription("sub-1", "r"))
    sdl = ricsdl_backend()  # overwrites both keys, as the rest of SDL names them
    try:
        sdl.set("mcw-e2-test", {ids.key: b'{"ids": "sub-1"}', f"e2/node/{MEID}": b"{"})
    finally:
        sdl.close()
    assert ids.load() == set() and records.get(MEID) is None


def test_restart_deletes_stale_and_subscribes_again(submgr: StandInSubmgr,
                                                     redis: RedisServer) -> None:
    from xapp.adapters.sdl import ricsdl_backend

    first = Xapp(submgr, static(), ids=SdlIdStore("mcw-e2-test", ricsdl_backend))
    try:
        first.sub.step()
        assert wait_until(lambda: first.state() == "active", timeout_s=5)
    finally:
        first.close()  # killed: no stop(), sub-1 stays live at submgr
    assert SdlIdStore("mcw-e2-test", ricsdl_backend).load() == {"sub-1"}
    second = Xapp(submgr, static(), ids=SdlIdStore("mcw-e2-test", ricsdl_backend))
    try:
        second.sub.step()
        assert submgr.deletes == ["sub-1"]
        assert second.sub.counters["stale_deleted"] == 1
        assert wait_until(lambda: second.state() == "active", timeout_s=5)
        assert [s.subscription_id for s in second.book.active()] == ["sub-2"]
        assert SdlIdStore("mcw-e2-test", ricsdl_backend).load() == {"sub-2"}
        second.sub.stop()
        assert submgr.deletes == ["sub-1", "sub-2"]
        assert SdlIdStore("mcw-e2-test", ricsdl_backend).load() == set()
    finally:
        second.close()


def test_the_new_owner_deletes_what_a_dead_replica_left(submgr: StandInSubmgr,
                                                        redis: RedisServer) -> None:
    """Replica a dies with its subscription live at submgr; b takes the node's shard over,
    finds a's subscription in the node's SDL record and deletes it before subscribing, and
    the record then names b's."""
    from xapp.adapters.dbaas import redis_from_env
    from xapp.adapters.sdl import ricsdl_backend
    from xapp.core.shards import shard_of

    records = SdlNodeRecords("mcw-e2-test", lambda: redis_from_env("mcw-e2-test"))
    first, second, a, b = sharded_pair(submgr, records)
    shard = shard_of(MEID)
    posts_at_delete: list[int] = []
    submgr.on_delete = lambda: posts_at_delete.append(len(submgr.posts))
    try:
        own(first, a, shard)
        # A key of the xApp's SDL namespace, as ricsdl (the rest of SDL) reads it.
        sdl = ricsdl_backend()
        try:
            stored = sdl.find_and_get("mcw-e2-test", "e2/node/*")
        finally:
            sdl.close()
        assert {k: json.loads(v) for k, v in stored.items()} == {
            f"e2/node/{MEID}": {"id": "sub-1", "owner": "replica-a"}}
        a.close()  # killed: no stop(), no step; sub-1 stays live at submgr
        second.grant(shard, float("inf"))
        b.sub.step()
        assert submgr.deletes == ["sub-1"] and posts_at_delete == [1]  # before b's POST
        assert b.sub.counters["taken_over"] == 1
        assert wait_until(lambda: b.state() == "active", timeout_s=5)
        assert [s.subscription_id for s in b.book.active()] == ["sub-2"]
        assert records.get(MEID) == NodeSubscription("sub-2", "replica-b")
        b.sub.stop()
        assert submgr.deletes == ["sub-1", "sub-2"] and records.get(MEID) is None
    finally:
        b.close()


def test_a_late_old_owner_does_not_clear_the_new_owners_record(submgr: StandInSubmgr,
                                                               redis: RedisServer) -> None:
    """A partitioned replica learns it lost the shard after the new owner took the node over:
    its own delete is a no-op at submgr, and it leaves the new owner's record alone."""
    from xapp.adapters.dbaas import redis_from_env
    from xapp.core.shards import shard_of

    records = SdlNodeRecords("mcw-e2-test", lambda: redis_from_env("mcw-e2-test"))
    first, second, a, b = sharded_pair(submgr, records)
    shard = shard_of(MEID)
    try:
        own(first, a, shard)
        first.revoke(shard)
        own(second, b, shard)  # takes over: deletes sub-1, subscribes sub-2
        a.sub.step()  # a sees the node gone only now and deletes sub-1 again
        assert submgr.deletes == ["sub-1", "sub-1"] and a.book.active() == []
        assert records.get(MEID) == NodeSubscription("sub-2", "replica-b")
    finally:
        a.close()
        b.close()
