"""The shard function both sides compute, and the replicas' target assignment."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xapp.core.shards import DEFAULT_SHARDS, assign, fnv1a32, shard_of, target_shards

#: The same table is in kernel-agent/mqttclient's test: agent and xApp must agree.
VECTORS = [
    ("cpe-0001", 0xFB22A72F, 47),
    ("cpe-0002", 0xFC22A8C2, 2),
    ("cpe-0003", 0xFD22AA55, 21),
    ("cpe-10000", 0xB4D397A7, 39),
    ("a", 0xE40C292C, 44),
    ("Z9._-x", 0x94373E5E, 30),
]


@pytest.mark.parametrize(("cpe_id", "hash32", "shard"), VECTORS)
def test_vectors(cpe_id: str, hash32: int, shard: int) -> None:
    assert fnv1a32(cpe_id.encode()) == hash32
    assert shard_of(cpe_id) == shard == hash32 % DEFAULT_SHARDS


def test_fnv1a_reference() -> None:
    # The published FNV-1a 32 test values (empty string and "a").
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C


@pytest.mark.parametrize("shards", [0, -1, 4097])
def test_shard_count_bounds(shards: int) -> None:
    with pytest.raises(ValueError, match="shards"):
        shard_of("cpe-0001", shards)


def test_spread_over_a_fleet() -> None:
    counts = [0] * DEFAULT_SHARDS
    for i in range(1, 10_001):
        counts[shard_of(f"cpe-{i:04d}")] += 1
    assert min(counts) > 0.85 * 10_000 / DEFAULT_SHARDS
    assert max(counts) < 1.15 * 10_000 / DEFAULT_SHARDS


@given(st.sets(st.text("abcdefgh0123456789-", min_size=1, max_size=12), min_size=1, max_size=8),
       st.integers(1, 128))
def test_assignment_covers_every_shard_once_and_evenly(replicas: set[str], shards: int) -> None:
    owners = assign(replicas, shards)
    assert sorted(owners) == list(range(shards))
    held = [target_shards(r, replicas, shards) for r in replicas]
    assert sum(len(h) for h in held) == shards
    assert max(len(h) for h in held) <= -(-shards // len(replicas))


def test_assignment_is_deterministic_and_moves_little() -> None:
    three = ["xapp-0", "xapp-1", "xapp-2"]
    before = assign(three)
    assert before == assign(list(reversed(three)))
    after_join = assign([*three, "xapp-3"])
    moved = sum(before[s] != after_join[s] for s in before)
    assert moved <= 1.25 * DEFAULT_SHARDS / 4
    after_leave = assign(["xapp-0", "xapp-2"])
    lost = sum(o == "xapp-1" for o in before.values())
    assert all(after_leave[s] == before[s] for s in before if before[s] != "xapp-1"
               ) or sum(before[s] != after_leave[s] for s in before) <= 1.25 * lost


def test_no_replicas() -> None:
    assert assign([]) == {}
    assert target_shards("me", []) == frozenset(range(DEFAULT_SHARDS))
