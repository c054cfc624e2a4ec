"""The pure part of sharing a fleet: lease plans, the local fence and the filtered KPIs."""

from __future__ import annotations

import numpy as np
import pytest

from xapp.adapters.mqtt.versions import MemoryVersionStore, VersionAllocator
from xapp.core.forecast import KpiFrame
from xapp.core.ownership import ShardedKpis, ShardFence, local_deadline, plan_leases
from xapp.core.shards import shard_of, target_shards


def test_plan_acquires_targets_and_releases_the_rest() -> None:
    alone = plan_leases("a", ["a"], [], 8)
    assert alone.acquire == frozenset(range(8)) and not alone.release
    both = plan_leases("a", ["a", "b"], range(8), 8)
    assert both.release == frozenset(range(8)) - target_shards("a", ["a", "b"], 8)
    assert both.renew == target_shards("a", ["a", "b"], 8) and not both.acquire
    # What "b" acquires is exactly what "a" releases.
    assert plan_leases("b", ["a", "b"], [], 8).acquire == both.release


def test_local_deadline_is_before_the_lease_ends() -> None:
    assert local_deadline(10.0, 1.0) == pytest.approx(10.8)
    with pytest.raises(ValueError):
        local_deadline(0.0, 1.0, margin_fraction=1.0)


def test_fence_lapses_by_itself() -> None:
    now = [100.0]
    fence = ShardFence(4, clock=lambda: now[0])
    cpe = next(f"cpe-{i}" for i in range(100) if shard_of(f"cpe-{i}", 4) == 2)
    assert not fence.allows(cpe)
    fence.grant(2, 100.8)
    assert fence.allows(cpe) and fence.held() == frozenset({2})
    now[0] = 100.81
    assert not fence.allows(cpe) and fence.held() == frozenset()
    assert ShardFence(4, everything=True).mask([cpe, "x"]).all()


def test_sharded_kpis_show_held_shards_only_and_keep_key_arrays() -> None:
    ids = [f"cpe-{i}" for i in range(40)]
    cpe = np.array(ids)

    class Source:
        def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
            return KpiFrame(time_s=now_s, cpe=cpe, wat=np.array(["nr"] * 40),
                            values={"delivered_mbps": np.arange(40.0)})

    fence = ShardFence(4)
    fence.grant(1, float("inf"))
    kpis = ShardedKpis(Source(), fence)
    a, b = kpis.latest(1.0, 5.0), kpis.latest(2.0, 5.0)
    assert set(a.cpe.tolist()) == {c for c in ids if shard_of(c, 4) == 1}
    assert a.cpe is b.cpe  # the loop's caches hold while the holdings do
    assert a.column("delivered_mbps").tolist() == [float(ids.index(c)) for c in a.cpe]
    fence.grant(3, float("inf"))
    assert set(kpis.latest(3.0, 5.0).cpe.tolist()) == {c for c in ids
                                                       if shard_of(c, 4) in (1, 3)}


def test_a_forgotten_block_restarts_above_the_other_owners_ceiling() -> None:
    store = MemoryVersionStore()
    mine, theirs = VersionAllocator(store, block=10), VersionAllocator(store, block=10)
    assert mine.take("c") == 1
    # The shard moves: the other owner reads the ceiling (10) and goes above it.
    assert theirs.take("c") == 11
    # Back to the first owner: without forgetting it would send 2, behind 11.
    assert mine.forget(lambda c: c == "c") == 1
    assert mine.take("c") == 21


def test_sharding_controls_are_checked_and_default_to_one_replica() -> None:
    from xapp.app.config import ConfigError, Controls, apply_env_overrides, parse_controls

    assert Controls().sharding.enabled is False and Controls().sharding.shards == 64
    on = parse_controls({"sharding": {"enabled": True, "lease_s": 2}})
    assert on.sharding.effective_lease_s(on.loop.control_period_s) == 2
    # The default lease: one and a half control periods, at least a second.
    assert parse_controls({"loop": {"control_period_s": 0.2}}).sharding.effective_lease_s(0.2) \
        == 1.0
    assert parse_controls({"loop": {"control_period_s": 2.0}}).sharding.effective_lease_s(2.0) \
        == 3.0
    with pytest.raises(ConfigError, match=r"below controls\.loop\.lease_s"):
        parse_controls({"sharding": {"enabled": True, "lease_s": 30}})
    with pytest.raises(ConfigError, match="sharding"):
        parse_controls({"sharding": {"shards": 0}})
    with pytest.raises(ConfigError, match="replica_id"):
        parse_controls({"sharding": {"replica_id": "a|b"}})
    env = {"MCW_REPLICA_ID": "pod-7", "MCW_SHARDING_ENABLED": "true", "HOSTNAME": "mcw-xapp"}
    controls = parse_controls(apply_env_overrides({}, env))
    assert controls.sharding.enabled
    assert controls.sharding.effective_replica_id(env) == "pod-7"
    assert controls.sharding.effective_replica_id({"HOSTNAME": "h"}) == "h"
