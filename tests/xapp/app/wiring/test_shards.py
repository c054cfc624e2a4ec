"""A replica's share of the fleet (real redis-server): the A1 book it follows from SDL, and
what its parts drop and re-subscribe when the lease worker brings it shards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import redis as redis_py

from tests.support.redis_server import RedisServer
from xapp.adapters.mqtt import ChannelSubscriber, MqttWeightPublisher
from xapp.adapters.sdl import SdlStateStore, ricsdl_backend
from xapp.app.config import load_config, parse_controls
from xapp.app.process import XappProcess
from xapp.app.reload import timings_of
from xapp.app.run_options import RunOptions
from xapp.app.wiring.shards import FleetSharing, sync_book
from xapp.core.issue_clock import IssueClock
from xapp.core.loop import ControlLoop
from xapp.core.ownership import ShardFence
from xapp.core.policy_book import PolicyBook, PolicyInstance
from xapp.core.workers import Supervisor, Worker


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
        sync_book(b.state, b.book)  # not written yet: nothing to follow, and a keeps its own
        sync_book(a.state, a.book)
        assert b.book.get("p1") is None and a.book.get("p1") == inst
        assert a.state.sync()
        sync_book(b.state, b.book)
        assert b.book.get("p1") == inst
        assert b.book.resolver().for_cpe("cpe-1")[1] == "p1"
        a.book.remove("p1")
        a.state.delete_policy("p1")
        assert a.state.sync()
        sync_book(b.state, b.book)
        assert b.book.get("p1") is None and b.state.policies() == []
    finally:
        a.state.stop()
        b.state.stop()


class Calls:
    """Stands in for the loop, the publisher, the subscriber and the E2 worker: records what
    the shard hooks ask of them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def forget(self, what: frozenset[int] | Callable[[str], bool]) -> None:
        self.calls.append(("forget", what))

    def set_shards(self, shards: frozenset[int]) -> None:
        self.calls.append(("set_shards", shards))

    def wake(self) -> None:
        self.calls.append(("wake", None))


def test_a_replica_alone_takes_every_shard_and_its_parts_follow(redis: RedisServer) -> None:
    controls = parse_controls({"sharding": {"enabled": True, "shards": 4, "replica_id": "r1"},
                               "sdl_namespace": "mcw-t"})
    old = redis_py.Redis(host=redis.host, port=redis.port)
    for n in range(4):  # a fleet that has run for long: no forgotten holder to wait out
        old.set(f"mcw-t:shard:{{{n}}}:since", 0)
    fence = ShardFence(4)
    state = SdlStateStore("mcw-t", ricsdl_backend)
    loop, publisher, subscriber, e2 = Calls(), Calls(), Calls(), Calls()
    sharing = FleetSharing(controls, timings_of(controls), fence, "r1", IssueClock(), state,
                           PolicyBook(controls.default_policy), cast(ControlLoop, loop),
                           cast(MqttWeightPublisher, publisher),
                           cast(ChannelSubscriber, subscriber), cast(Worker, e2))
    supervisor = Supervisor()
    sharing.start(supervisor)  # the first round, before any tick
    try:
        every = frozenset(range(4))
        assert fence.held() == every
        assert publisher.calls == [("forget", every)]
        [(name, which)] = loop.calls
        assert name == "forget" and all(which(f"cpe-{n}") for n in range(20))
        assert subscriber.calls == [("set_shards", every)]
        assert e2.calls == [("wake", None)]  # granted: the nodes are subscribed now
        assert {s.name for s in supervisor.check()} == {"mcw-shard-leases", "mcw-a1-book"}
    finally:
        sharing.book_sync.stop()
        sharing.manager.stop()
        state.stop()
    assert fence.held() == frozenset()  # handed back
