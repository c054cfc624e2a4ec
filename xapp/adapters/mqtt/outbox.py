"""The weight publisher's outbox: per CPE, the newest weights waiting and the one in flight.

One message in flight per CPE (its next weights wait for the broker's acknowledgement, so they
can never overtake it, not even across a reconnect), newer weights replacing queued ones
(coalescing), and the packet identifiers of the messages in flight within the connection's
window. Not thread-safe: :class:`~xapp.adapters.mqtt.publisher.MqttWeightPublisher` holds its
lock around every call.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field


@dataclass
class Outgoing:
    """One weights message, ready for the wire but for its packet identifier."""

    cpe_id: str
    version: int
    #: The PUBLISH packet around its packet identifier (see ``publish_parts``).
    head: bytes
    tail: bytes
    #: The CPE's shard (-1 without a fence).
    shard: int = -1


@dataclass
class Outbox:
    """The messages of one publisher, queued and in flight."""

    #: Messages in flight over the whole connection (the broker's Receive Maximum at most).
    window: int = 1000
    #: CPEs with nothing in flight whose latest message waits for a send slot (FIFO).
    ready: OrderedDict[str, Outgoing] = field(default_factory=OrderedDict)
    #: CPEs with a message in flight: their newest message waits for the acknowledgement.
    waiting: dict[str, Outgoing] = field(default_factory=dict)
    #: cpe_id -> message in flight.
    inflight: dict[str, Outgoing] = field(default_factory=dict)
    #: packet identifier -> cpe_id of the message in flight under it.
    pids: dict[int, str] = field(default_factory=dict)
    #: cpe_id -> last version the broker acknowledged.
    acked_version: dict[str, int] = field(default_factory=dict)
    next_pid: int = 1

    def put(self, msg: Outgoing) -> bool:
        """Queue ``msg`` behind its CPE's message in flight, if any; True if it replaced
        weights of the CPE that were still queued (coalesced)."""
        cpe_id = msg.cpe_id
        queue = self.waiting if cpe_id in self.inflight else self.ready
        coalesced = cpe_id in queue
        queue[cpe_id] = msg
        return coalesced

    def pending(self) -> int:
        """Messages queued or in flight."""
        return len(self.ready) + len(self.waiting) + len(self.inflight)

    def forget(self, shard_wanted: Callable[[int], bool]) -> None:
        """Drop the queued messages (not those in flight) of the shards ``shard_wanted``."""
        for queue in (self.ready, self.waiting):
            for cpe_id in [c for c, m in queue.items() if shard_wanted(m.shard)]:
                del queue[cpe_id]

    def reconnected(self, window: int) -> tuple[int, int]:
        """A new connection of ``window``: the messages in flight when the last one dropped go
        first, in their order, unless newer weights for their CPE are waiting (then only the
        newer ones go). Returns (sent again, replaced by newer)."""
        self.window = window
        resent = coalesced = 0
        again: OrderedDict[str, Outgoing] = OrderedDict()
        for cpe_id, msg in self.inflight.items():
            newer = self.waiting.pop(cpe_id, None)
            if newer is not None:
                coalesced += 1
                again[cpe_id] = newer
            else:
                resent += 1
                again[cpe_id] = msg
        self.inflight.clear()
        self.pids.clear()
        again.update(self.ready)
        self.ready = again
        return resent, coalesced

    def fill(self, out: bytearray, allowed: Callable[[int], bool] | None) -> tuple[int, int]:
        """Move ready messages into flight while the window allows and append their packets to
        ``out``; a message whose shard is not ``allowed`` (any more) is dropped instead.
        Returns (sent, dropped)."""
        ready, inflight, pids = self.ready, self.inflight, self.pids
        free = self.window - len(inflight)
        if free <= 0 or not ready:
            return 0, 0
        pid = self.next_pid
        sent = dropped = 0
        while ready and free > 0:
            cpe_id, msg = ready.popitem(last=False)
            if allowed is not None and not allowed(msg.shard):
                # The last check before the wire: the lease lapsed while it waited.
                dropped += 1
                continue
            while pid in pids:  # identifiers still in use (at most window of them)
                pid = pid % 65535 + 1
            pids[pid] = cpe_id
            inflight[cpe_id] = msg
            out += msg.head
            out += pid.to_bytes(2, "big")
            out += msg.tail
            pid = pid % 65535 + 1
            free -= 1
            sent += 1
        self.next_pid = pid
        return sent, dropped

    def acknowledge(self, acks: Collection[tuple[int, int]]
                    ) -> tuple[int, list[tuple[Outgoing, int]]]:
        """The broker's PUBACKs (packet identifier, reason code): each CPE's next weights
        become ready. Returns the number acknowledged with success and the messages rejected
        with their reason codes (not retried)."""
        acked = 0
        rejected: list[tuple[Outgoing, int]] = []
        for pid, code in acks:
            cpe_id = self.pids.pop(pid, None)
            if cpe_id is None:
                continue  # not ours (e.g. from before a reconnect): nothing waits for it
            msg = self.inflight.pop(cpe_id)
            if code >= 0x80:
                rejected.append((msg, code))
            else:
                acked += 1
                if msg.version > self.acked_version.get(cpe_id, 0):
                    self.acked_version[cpe_id] = msg.version
            newer = self.waiting.pop(cpe_id, None)
            if newer is not None:
                self.ready[cpe_id] = newer
        return acked, rejected
