"""The e2e-k8s checks over N pods' /ric/v1/shards and /ric/v1/cpes, on canned answers."""

from __future__ import annotations

from typing import Any, cast

from tests.k8s.context import CPES_PATH, SHARDS_PATH, Run, owners_publish, shard_split
from xapp.core.shards import shard_of


class Pods:
    """What :func:`shard_split` and :func:`owners_publish` read from a :class:`Run`."""

    def __init__(self, held: dict[str, list[int]], applied: dict[str, int]) -> None:
        self.held = held
        self.cpes = sorted(applied)
        self.applied = applied

    def xapp_get_all(self, path: str) -> dict[str, tuple[int, Any]]:
        if path == SHARDS_PATH:
            return {n: (200, {"enabled": True, "shards": 64, "held": h})
                    for n, h in self.held.items()}
        assert path == CPES_PATH
        return {n: (200, {"cpes": {c: {"shard": shard_of(c), "published": {"version": v},
                                       "owner": n if shard_of(c) in h else None}
                                   for c, v in self.applied.items()}})
                for n, h in self.held.items()}

    def latest(self) -> dict[str, tuple[int, dict[str, int]]]:
        return {c: (v, {}) for c, v in self.applied.items()}


def run(held: dict[str, list[int]], applied: dict[str, int] | None = None) -> Run:
    return cast(Run, Pods(held, applied or {"cpe-0001": 3, "cpe-0002": 5}))


def test_disjoint_and_covering_passes() -> None:
    ok, detail, held = shard_split(run({"a": list(range(32)), "b": list(range(32, 64))}))
    assert ok and "64 of 64 covered, disjoint" in detail and len(held["b"]) == 32


def test_a_gap_an_overlap_or_a_missing_pod_fails() -> None:
    assert not shard_split(run({"a": list(range(32)), "b": list(range(33, 64))}))[0]
    overlap = shard_split(run({"a": list(range(33)), "b": list(range(32, 64))}))
    assert not overlap[0] and "OVERLAPPING" in overlap[1]
    assert not shard_split(run({"a": list(range(64))}))[0]
    assert shard_split(run({"a": list(range(64))}), count=1)[0]


def test_every_cpe_owned_once_by_the_holder_of_its_shard() -> None:
    assert owners_publish(run({"a": list(range(32)), "b": list(range(32, 64))}))[0]
    # Both pods claim every shard: two owners per CPE.
    assert not owners_publish(run({"a": list(range(64)), "b": list(range(64))}))[0]
    # Nobody holds the CPEs' shards.
    nobody = [s for s in range(64) if s not in (shard_of("cpe-0001"), shard_of("cpe-0002"))]
    assert "owner none" in owners_publish(run({"a": nobody, "b": []}))[1]
