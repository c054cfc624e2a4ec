"""A replica's share of the fleet for ``mcw run`` (``controls.sharding.enabled``): the lease
worker that grants the fence its shards, what the replica drops and re-subscribes when shards
come and go, and the fleet's A1 book followed from SDL."""

from __future__ import annotations

import logging

from xapp.adapters.dbaas import redis_from_env
from xapp.adapters.mqtt import ChannelSubscriber, MqttWeightPublisher
from xapp.adapters.sdl import SdlStateStore
from xapp.adapters.shard_leases import ShardLeases
from xapp.app.config import Controls
from xapp.app.sharding import ShardManager
from xapp.core.issue_clock import IssueClock
from xapp.core.loop import ControlLoop
from xapp.core.ownership import ShardFence
from xapp.core.policy import PolicyError
from xapp.core.policy_book import PolicyBook
from xapp.core.timings import Timings
from xapp.core.workers import Supervisor, Worker

log = logging.getLogger(__name__)

#: How often a replica that shares the fleet reads the A1 book from SDL.
A1_BOOK_SYNC_S = 1.0


class FleetSharing:
    """The lease worker and the A1 book's follower of a replica that shares the fleet.

    Built once the loop, the publisher, the subscriber and the E2 subscriber exist: a shard
    acquired makes them forget what they cached about its CPEs, and a shard granted or
    released wakes the E2 subscriber (``e2_worker``) so its nodes are subscribed or deleted
    now, not after a poll period."""

    def __init__(self, controls: Controls, timings: Timings, fence: ShardFence,
                 replica_id: str, issue_clock: IssueClock, state: SdlStateStore,
                 book: PolicyBook, loop: ControlLoop, publisher: MqttWeightPublisher | None,
                 subscriber: ChannelSubscriber | None, e2_worker: Worker | None) -> None:
        self.fence = fence
        self.state = state
        self.loop = loop
        self.publisher = publisher
        self.subscriber = subscriber
        self.e2_worker = e2_worker
        self.replica_id = replica_id
        self.namespace = controls.sdl_namespace
        client = redis_from_env(controls.sdl_namespace,
                                timeout_s=timings.shard_redis_timeout_s)
        self.manager = ShardManager(ShardLeases(client, controls.sdl_namespace), fence,
                                    replica_id, lease_s=timings.shard_lease_s,
                                    on_acquired=self._acquired, on_released=self._released,
                                    on_granted=self._granted, issue_clock=issue_clock)
        # A step is one SCAN of the policy keys: a few per second cost Redis nothing.
        self.book_sync = Worker("mcw-a1-book", lambda: sync_book(state, book), A1_BOOK_SYNC_S,
                                deadline_s=30.0)

    def start(self, supervisor: Supervisor) -> None:
        """One lease round before the first tick, so a replica that starts alone decides from
        its first tick, then a round every fifth of a lease; the book read every second."""
        try:
            self.manager.step()
        except Exception as exc:
            log.warning("first shard lease round failed (%s); the worker retries", exc)
        supervisor.add(self.manager.start())
        supervisor.add(self.book_sync).start()
        log.info("replica %s shares the fleet: %d shards, leases of %.2f s in %s:*",
                 self.replica_id, self.fence.shards, self.manager.lease_s, self.namespace)

    def _acquired(self, shards: frozenset[int]) -> None:
        """Before the fence grants ``shards``: forget what was cached about their CPEs, so
        versions start above the previous owner's ceiling and no decision is held against
        weights another replica has replaced."""
        fence = self.fence

        def which(cpe_id: str) -> bool:
            return fence.shard(cpe_id) in shards

        if self.publisher is not None:
            self.publisher.forget(shards)
        # The records loaded at start (or written while this replica last held the shard)
        # would seed the loop's rows of CPEs it has not seen yet with stale weights.
        self.state.forget_cpes(which)
        self.loop.forget(which)
        self._subscribe(acquired=shards)

    def _granted(self, _shards: frozenset[int]) -> None:
        if self.e2_worker is not None:
            # The new shards' E2 nodes are subscribed now, not after a whole poll period.
            self.e2_worker.wake()

    def _released(self, shards: frozenset[int]) -> None:
        fence = self.fence
        # Not written later over the records of the shards' next owner (a replica cut off from
        # Redis would flush them when it comes back).
        self.state.forget_cpes(lambda cpe_id: fence.shard(cpe_id) in shards)
        self._subscribe(released=shards)
        if self.e2_worker is not None:
            self.e2_worker.wake()  # delete the released nodes' subscriptions now

    def _subscribe(self, acquired: frozenset[int] = frozenset(),
                   released: frozenset[int] = frozenset()) -> None:
        """Agent state and telemetry of the held shards only (the subscriber's topic
        filters, when it has them)."""
        if self.subscriber is None:
            return
        held = set(self.manager.held) | set(acquired)
        self.subscriber.set_shards(frozenset(held - released))


def sync_book(state: SdlStateStore, book: PolicyBook) -> None:
    """Every replica answers A1 (the Service picks one per request) and every replica
    decides with the same policies: the book in SDL is the fleet's, and each replica
    follows it, an instance one replica took in reaching the others within a step."""
    stored = state.read_policies()
    if stored is None:
        return
    pending = state.pending_policies
    for iid, inst in stored.items():
        if book.get(iid) != inst:
            try:
                book.put(inst)
            except PolicyError as exc:
                log.error("A1 instance %s from SDL does not build: %s", iid, exc)
                continue
            log.info("A1 instance %s taken from SDL (another replica received it)", iid)
    for inst in book.instances():
        if inst.instance_id not in stored and inst.instance_id not in pending:
            book.remove(inst.instance_id)
            log.info("A1 instance %s deleted in SDL (by another replica)", inst.instance_id)
