"""Per-CPE versions: they only grow, also across restarts, with batched store writes."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

import pytest

from xapp.adapters.mqtt import FileVersionStore, MemoryVersionStore, VersionAllocator
from xapp.core.ports import VersionStore


def test_versions_grow_per_cpe_and_blocks_batch_the_writes() -> None:
    store = MemoryVersionStore()
    alloc = VersionAllocator(store, block=10)
    got = [alloc.take("a") for _ in range(25)]
    assert got == list(range(1, 26))
    assert alloc.take("b") == 1
    # 25 versions of "a" need 3 blocks, "b" one: 4 writes, not 26.
    assert store.writes == 4
    assert store.get_ceilings(["a", "b", "c"]) == {"a": 30, "b": 10, "c": 0}


def test_reserve_is_one_write_for_many_cpes() -> None:
    store = MemoryVersionStore()
    alloc = VersionAllocator(store, block=5)
    alloc.reserve([f"cpe-{i}" for i in range(1000)])
    assert store.writes == 1
    assert all(alloc.take(f"cpe-{i}") == 1 for i in range(1000))
    assert store.writes == 1


@pytest.mark.parametrize("block", [1, 7, 100])
def test_a_restart_never_reuses_a_version(tmp_path: Path, block: int) -> None:
    path = tmp_path / "versions.json"
    first = VersionAllocator(FileVersionStore(path), block=block)
    used = [first.take("cpe-0001") for _ in range(12)]
    # A new process: new store object reading the same file.
    second = VersionAllocator(FileVersionStore(path), block=block)
    nxt = second.take("cpe-0001")
    assert nxt > max(used)
    assert nxt - max(used) <= block


def test_store_never_lowers_a_ceiling(tmp_path: Path) -> None:
    stores: list[VersionStore] = [MemoryVersionStore(), FileVersionStore(tmp_path / "v.json")]
    for store in stores:
        store.set_ceilings({"x": 50})
        store.set_ceilings({"x": 10, "y": 3})
        assert store.get_ceilings(["x", "y"]) == {"x": 50, "y": 3}


def test_file_store_is_atomic_json_and_refuses_garbage(tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    FileVersionStore(path).set_ceilings({"cpe-0001": 100})
    assert json.loads(path.read_text()) == {"cpe-0001": 100}
    assert [p.name for p in tmp_path.iterdir()] == ["v.json"]  # no temp file left behind
    for garbage in ['["x"]', '{"a": -1}', '{"a": "3"}', '{"a": true}', "{"]:
        path.write_text(garbage)
        with pytest.raises(ValueError):
            FileVersionStore(path)


def test_block_must_be_positive() -> None:
    with pytest.raises(ValueError):
        VersionAllocator(MemoryVersionStore(), block=0)


@pytest.mark.parametrize("batches", [
    [["a", "b", "c"], ["a", "b", "c"], ["c", "d"], ["a", "b", "c", "d", "e"]],
    [["a", "a", "b"], ["b", "b", "b"], ["a"]],  # a CPE named twice in one batch
])
@pytest.mark.parametrize("block", [1, 2, 5])
def test_take_many_hands_out_what_take_would(batches: list[list[str]], block: int) -> None:
    """The batched path (each CPE once) and the per-CPE one give the same versions, and the
    store's ceilings stay at or above every version handed out."""
    batched_store, single_store = MemoryVersionStore(), MemoryVersionStore()
    batched = VersionAllocator(batched_store, block=block)
    single = VersionAllocator(single_store, block=block)
    for ids in batches:
        got = batched.take_many(ids)
        assert got == [single.take(c) for c in ids]
        ceilings = batched_store.get_ceilings(ids)
        assert all(v <= ceilings[c] for c, v in zip(ids, got, strict=True))


class LostStore(MemoryVersionStore):
    """A store that lost its data (SDL's Redis after FLUSHALL) and a floor from a clock that has
    not moved on: every read gives ``floor``."""

    def __init__(self, floor: int) -> None:
        super().__init__()
        self.floor = floor

    def get_ceilings(self, cpe_ids: Collection[str]) -> dict[str, int]:
        return dict.fromkeys(cpe_ids, self.floor)


def test_a_forgotten_block_never_hands_this_process_a_version_again() -> None:
    """CI's run of tests/xapp/app/test_sdl_loss.py: three versions, FLUSHALL and the takeover's
    forget in the same millisecond, and the clock floor gave the first of them again."""
    alloc = VersionAllocator(LostStore(1_000), block=100)
    sent = [alloc.take("cpe-1") for _ in range(3)]
    assert alloc.forget(lambda c: True) == 1
    again = alloc.take("cpe-1")
    assert again > sent[-1]
    alloc.forget(lambda c: True)
    assert alloc.take_many(["cpe-1", "cpe-2"]) == [again + 1, 1_001]
