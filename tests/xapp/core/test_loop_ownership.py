"""The loop's side of sharing a fleet: it decides only the held shards' CPEs, a fenced publish
is no error, and forgetting a shard's CPEs makes the next tick send them afresh."""

from __future__ import annotations

from tests.xapp.core.test_loop import FakePublisher, make, paper
from xapp.core.ownership import Fenced, ShardedKpis, ShardFence
from xapp.core.ports import PublishResult, WeightBatch
from xapp.core.shards import shard_of


def test_forget_resends_without_hysteresis_and_filtering_by_shard() -> None:
    loop, kpis, _pub, _sink, _book, _state, _m = make()
    a, b = "cpe-1", next(f"cpe-{i}" for i in range(2, 99) if shard_of(f"cpe-{i}")
                         != shard_of("cpe-1"))
    paper(kpis, a)
    paper(kpis, b)
    fence = ShardFence(64)
    fence.grant(shard_of(a), float("inf"))
    loop.kpis = ShardedKpis(kpis, fence)
    assert set(loop.tick(100.0).published) == {a}
    assert loop.tick(101.0).published == {}  # nothing changed, nothing owed
    # The shard changed hands and came back: forget, and the next tick sends it again.
    loop.forget(lambda c: shard_of(c) == shard_of(a))
    assert set(loop.tick(102.0).published) == {a}
    fence.grant(shard_of(b), float("inf"))
    assert set(loop.tick(103.0).published) == {b}


def test_a_fenced_publish_is_counted_not_an_error() -> None:
    loop, kpis, _pub, _sink, _book, _state, _m = make()
    paper(kpis, "cpe-1")

    class Fencing(FakePublisher):
        def publish_many(self, batch: WeightBatch) -> PublishResult:
            return PublishResult(errors={c: Fenced(c) for c in batch.cpe_ids})

    loop.publisher = Fencing()
    r = loop.tick(100.0)
    assert r.fenced == 1 and r.publish_errors == 0 and r.published == {}
    loop.publisher = FakePublisher()
    assert set(loop.tick(101.0).published) == {"cpe-1"}  # owed, sent once allowed
