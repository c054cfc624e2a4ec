"""The lease worker of a replica that shares the fleet (``controls.sharding.enabled``).

One :class:`ShardManager` step: heartbeat the membership and read the live replicas (one
round trip), decide (:func:`xapp.core.ownership.plan_leases`), then release, renew and acquire
in one pipeline.  What it learns goes to the :class:`~xapp.core.ownership.ShardFence`, which
the publisher checks before any weights leave.

Order matters at both ends of a shard's life here:

* a shard to release is revoked in the fence *before* the compare-and-delete is sent, so no
  publish for it can leave once another replica may hold it;
* a shard acquired is handed to ``on_acquired`` (the runtime forgets what it cached about its
  CPEs: the publisher's version blocks, the loop's decisions in force) *before* the fence
  grants it, so the first weights of the new owner start above the ceiling the previous
  owner stored in SDL.

A failed round grants nothing: the fence's deadlines lapse by themselves, which is the whole
point of a local deadline (a replica cut off from Redis goes quiet before its leases expire).

When the lease table has forgotten (FLUSHALL, Redis restarted empty), a shard's key is free
while its holder may still act on its local deadline: the acquisition then comes with a wait
(:mod:`xapp.adapters.shard_leases`) and the fence grants the shard only from its end.  The
holder's renewal finds no key and drops the shard at its next round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from xapp.adapters.shard_leases import ShardLeases
from xapp.core.issue_clock import IssueClock
from xapp.core.ownership import ShardFence, local_deadline, plan_leases
from xapp.core.workers import Worker

log = logging.getLogger(__name__)


class ShardManager:
    """Holds this replica's shard leases; :attr:`worker` runs :meth:`step`."""

    def __init__(self, leases: ShardLeases, fence: ShardFence, replica_id: str, *,
                 lease_s: float,
                 on_acquired: Callable[[frozenset[int]], None] | None = None,
                 on_released: Callable[[frozenset[int]], None] | None = None,
                 on_granted: Callable[[frozenset[int]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 issue_clock: IssueClock | None = None) -> None:
        self.leases = leases
        #: Its value goes into the lease table at each round, and the previous holder's
        #: comes back from each acquisition (issue times never go back across owners).
        self.issue_clock = issue_clock
        self.fence = fence
        self.replica_id = replica_id
        self.lease_s = lease_s
        self.on_acquired = on_acquired
        self.on_released = on_released
        #: Called with the shards acquired once the fence grants them (may act for them now).
        self.on_granted = on_granted
        self._clock = clock
        self._lock = threading.Lock()
        #: shard -> epoch of the leases this replica holds (as far as it knows).
        self.held: dict[int, int] = {}
        #: shard -> monotonic time before which it may not be acted on (acquired from a lease
        #: table younger than a lease).
        self.pending: dict[int, float] = {}
        self.live: list[str] = []
        self.target: frozenset[int] = frozenset()
        self.last_ok: float | None = None
        self.rounds = 0
        self.acquisitions = 0
        self.losses = 0
        # A round every fifth of a lease: a dead replica's shards are taken a fifth of a lease
        # after they expire at most, and three rounds can fail before the local deadline
        # (80 %).
        self.worker = Worker("mcw-shard-leases", self.step, lease_s / 5,
                             deadline_s=max(1.0, lease_s))

    @property
    def ttl_ms(self) -> int:
        return max(1, int(self.lease_s * 1000))

    def step(self) -> None:
        sent = self._clock()
        live = self.leases.heartbeat(self.replica_id, self.ttl_ms)
        with self._lock:
            held = dict(self.held)
        plan = plan_leases(self.replica_id, live, held, self.fence.shards)
        release = {s: held[s] for s in plan.release}
        for s in release:
            self.fence.revoke(s)
        # The pipeline's commands reach Redis after ``sent``: deadlines counted from here are
        # earlier than Redis' own expiries.
        sent = self._clock()
        issued = None if self.issue_clock is None else self.issue_clock.now_ms()
        result = self.leases.round(self.replica_id, self.ttl_ms, plan.acquire,
                                   {s: held[s] for s in plan.renew}, release, issued)
        until = local_deadline(sent, self.lease_s)
        # The wait is counted on Redis' clock from when it ran the script, before now.
        received = self._clock()
        for s in result.lost:
            self.fence.revoke(s)
        fresh = frozenset(result.acquired)
        if self.issue_clock is not None:
            for s in fresh:
                self.issue_clock.raise_floor(result.issued_ms.get(s, 0))
        if fresh and self.on_acquired is not None:
            self.on_acquired(fresh)
        with self._lock:
            pending = self.pending
            for s in (*release, *result.lost):
                pending.pop(s, None)
            for s in fresh:
                wait = result.wait_s.get(s, 0.0)
                if wait > 0:
                    pending[s] = received + wait
            now = self._clock()
            due = frozenset(s for s, t in pending.items() if t <= now and s not in fresh)
            for s in due:
                del pending[s]
            not_before = dict(pending)
        for s in (*result.renewed, *fresh):
            self.fence.grant(s, until, not_before.get(s, float("-inf")))
        granted = frozenset(s for s in fresh if s not in not_before) | (due & result.renewed)
        if granted and self.on_granted is not None:
            self.on_granted(granted)
        with self._lock:
            for s in (*release, *result.lost):
                self.held.pop(s, None)
            self.held.update(result.acquired)
            self.live = live
            self.target = plan.target
            self.last_ok = self._clock()
            self.rounds += 1
            self.acquisitions += len(fresh)
            self.losses += len(result.lost)
        gone = frozenset(release) | frozenset(result.lost)
        if gone and self.on_released is not None:
            self.on_released(gone)
        if fresh or gone:
            log.info("replica %s: shards +%s -%s (holds %d of %d; %d live replicas)",
                     self.replica_id, sorted(fresh), sorted(gone), len(self.held),
                     self.fence.shards, len(live))
        if not_before and fresh & frozenset(not_before):
            log.warning("replica %s: shards %s acquired from a lease table younger than a lease "
                        "(a new fleet, or Redis lost its data): acting for them in %.2f s, when "
                        "a forgotten holder's lease has ended", self.replica_id,
                        sorted(fresh & frozenset(not_before)),
                        max(not_before[s] for s in fresh if s in not_before) - received)
        if result.lost:
            log.warning("replica %s lost shards %s (lease expired or taken over)",
                        self.replica_id, sorted(result.lost))

    def healthy(self) -> bool:
        """The last successful round is recent (within a lease): readiness."""
        last = self.last_ok
        return last is not None and self._clock() - last < self.lease_s

    def start(self) -> Worker:
        return self.worker.start()

    def stop(self, timeout_s: float = 3.0) -> None:
        """Stop the rounds and hand every shard back at once (a rolling update then moves
        shards within a round of the others, not after a lease)."""
        self.worker.stop(timeout_s=timeout_s)
        self.fence.revoke_all()
        with self._lock:
            held, self.held = dict(self.held), {}
            self.pending.clear()
        last = None if self.issue_clock is None else self.issue_clock.last_ms() or None
        try:
            self.leases.leave(self.replica_id, held, last)
        except Exception as exc:  # Redis away: the leases expire by themselves
            log.warning("could not hand back shards %s: %s", sorted(held), exc)
        self.leases.close()

    def view(self) -> dict[str, Any]:
        """``/ric/v1/shards``."""
        with self._lock:
            held = sorted(self.held)
            pending = sorted(self.pending)
            epochs = {str(s): e for s, e in sorted(self.held.items())}
            live, target = list(self.live), sorted(self.target)
        now = self._clock()
        return {"enabled": True, "replica_id": self.replica_id, "shards": self.fence.shards,
                "lease_s": self.lease_s, "live_replicas": live, "target": target,
                "held": held, "pending": pending, "epochs": epochs,
                "valid": sorted(self.fence.held(now)),
                "acquisitions": self.acquisitions, "losses": self.losses}
