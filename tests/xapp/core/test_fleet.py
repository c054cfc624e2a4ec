"""The loop's per-CPE table: rows added in order and restored from the state store, a batch
stored column by column, rows reset, the decision in force read back."""

from __future__ import annotations

import numpy as np
import pytest

from xapp.core.fleet import FleetTable
from xapp.core.policy import Policy
from xapp.core.ports import CpeRecord, DirectionBatch, DirectionRecord

WATS = ("nr", "wifi", "lifi")


def _record(version: int, ul: dict[str, int], dl: dict[str, int]) -> CpeRecord:
    def direction(weights: dict[str, int]) -> DirectionRecord:
        total = sum(weights.values())
        return DirectionRecord(weights, {w: v / total for w, v in weights.items()}, 90.0,
                               tuple(sorted(weights)), "restored", "load_balancing", "p1",
                               {"nr": 60.0} if "nr" in weights else {})
    return CpeRecord(version, 12.5, direction(dl), direction(ul))


def _batch(weights: list[list[int]], present: list[list[bool]]) -> DirectionBatch:
    n = len(weights)
    return DirectionBatch(np.array(weights, dtype=np.int64), np.array(present),
                          np.array(present), np.full(n, 100.0), ["load_balancing"] * n,
                          ["ok"] * n, ["default"] * n)


def test_rows_are_added_once_in_first_seen_order() -> None:
    table = FleetTable(lambda _: None, wats=WATS)
    assert table.rows(["b", "a", "b"]).tolist() == [0, 1, 0]
    assert table.rows(["c", "a"]).tolist() == [2, 1]
    assert table.ids == ["b", "a", "c"] and len(table) == 3
    assert not table.has.any()


def test_growing_past_the_first_block_keeps_every_row() -> None:
    table = FleetTable(lambda _: None, wats=WATS)
    ids = [f"cpe-{i:04d}" for i in range(200)]
    rows = table.rows(ids)
    table.store(rows, _batch([[i, 1, 0] for i in range(200)], [[True, True, False]] * 200),
                np.arange(200, dtype=np.int64), 3.0)
    more = table.rows([f"x-{i}" for i in range(100)])
    assert more.tolist() == list(range(200, 300))
    assert table.weights[:200, 0].tolist() == list(range(200))
    assert not table.has[200:].any() and np.isnan(table.decided_s[200:]).all()


@pytest.mark.parametrize(("direction", "expected"), [("ul", {"nr": 3, "wifi": 1}),
                                                     ("dl", {"wifi": 5, "lifi": 2})])
def test_a_cpe_seen_first_is_restored_from_its_stored_direction(
        direction: str, expected: dict[str, int]) -> None:
    stored = _record(41, ul={"nr": 3, "wifi": 1}, dl={"wifi": 5, "lifi": 2})
    table = FleetTable(lambda cpe: stored if cpe == "cpe-1" else None, direction=direction,
                       wats=WATS)
    r = int(table.rows(["cpe-1"])[0])
    assert table.has[r] and table.version[r] == 41 and table.published_s[r] == 12.5
    decision = table.in_force(r)
    assert decision.weights == expected and decision.usable == frozenset(expected)
    assert decision.reason == "restored" and not decision.changed
    assert table.mode[r] == "load_balancing" and table.source[r] == "p1"
    caps = dict(zip(WATS, table.caps[r].tolist(), strict=True))
    assert (caps["nr"] == 60.0) == ("nr" in expected)


def test_a_stored_batch_is_in_force_and_reset_forgets_it() -> None:
    table = FleetTable(lambda _: None, wats=WATS)
    rows = table.rows(["a", "b"])
    table.store(rows, _batch([[3, 1, 9], [0, 2, 2]], [[True, True, False], [False, True, True]]),
                np.array([7, 8], dtype=np.int64), 5.0, follows=np.array([False, True]))
    a = table.in_force(0)
    assert a.weights == {"nr": 3, "wifi": 1}  # an absent WAT's weight is not carried
    assert a.shares == {"nr": 0.75, "wifi": 0.25}
    assert table.version[rows].tolist() == [7, 8] and table.follows[rows].tolist() == [False, True]
    assert not table.unpublished.any() and np.isnan(table.caps[rows]).all()
    table.unpublished[1] = True
    table.reset(np.array([1]))
    assert table.ids == ["a", "b"] and table.index["b"] == 1
    assert not table.has[1] and table.version[1] == 0 and not table.unpublished[1]
    assert table.in_force(1).weights == {} and table.has[0]


def test_a_decision_made_under_another_policy_has_changed() -> None:
    table = FleetTable(lambda _: None, wats=WATS)
    rows = table.rows(["known", "restored"])
    old, new = Policy(), Policy(max_weight=50)
    table.applied[0] = old  # "restored" keeps None: unknown, so not a change
    assert table.policy_changed(rows, old).tolist() == [False, False]
    assert table.policy_changed(rows, new).tolist() == [True, False]


def test_rules_applied_per_row() -> None:
    table = FleetTable(lambda cpe_id: None)
    rows = table.rows(["a", "b", "c"])
    p = Policy.from_dict({"rules": [{"name": "v", "match": {"dscp": [46]}}]})
    rules = p.classes_for("ul")
    table.apply(rows[:2], p, rules)
    assert table.rules_applied[0] is rules and table.rules_applied[1] is rules
    # The same rules (equal, or the same object) are no change; other rules are; unknown is not.
    again = Policy.from_dict(p.to_dict()).classes_for("ul")
    assert table.rules_changed(rows, again).tolist() == [False, False, False]
    assert table.rules_changed(rows, ()).tolist() == [True, True, False]
    table.reset(rows[:1])
    assert table.rules_applied[0] is None
