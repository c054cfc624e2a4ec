"""A tick's outgoing sets and the messages they make (xapp.core.outgoing)."""

from __future__ import annotations

import math

import numpy as np

from xapp.core.columns import Appliers
from xapp.core.fleet import FleetTable
from xapp.core.forecast import DIRECTIONS
from xapp.core.outgoing import Outgoing, excluded_wats, message_sets
from xapp.core.policy_book import PolicyBook, PolicyInstance
from xapp.core.ports import DirectionBatch

NAN = math.nan
# KNOWN_WATS: nr, lte, wifi, lifi.
DEFAULTS = {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
            "capacity_floor_mbps": 1.0}


def rows(*r: int) -> np.ndarray:
    return np.array(r, dtype=np.intp)


def add(o: Outgoing, at: list[int], weights: list[list[int]], reason: str = "lb",
        caps: list[list[float]] | None = None) -> None:
    w = np.array(weights, dtype=np.int64)
    n = len(at)
    o.add(rows(*at), w, w > 0, w > 0, np.full(n, 50.0), ["load_balancing"] * n, [reason] * n,
          ["default"] * n, None if caps is None else np.array(caps))


def fleets(*cpes: str) -> dict[str, FleetTable]:
    out = {d: FleetTable(lambda cpe_id: None, d) for d in DIRECTIONS}
    for fleet in out.values():
        fleet.rows(list(cpes))
    return out


def publish(fleet: FleetTable, r: int, weights: list[int], reason: str = "held",
            follows: bool = False) -> None:
    w = np.array([weights], dtype=np.int64)
    fleet.store(rows(r), DirectionBatch(w, w > 0, w > 0, np.array([9.0]), ["load_balancing"],
                                        [reason], ["default"]),
                np.array([1], dtype=np.int64), 100.0, np.array([follows]))


def test_outgoing_gathers_parts_and_skips_empty_ones() -> None:
    o = Outgoing()
    add(o, [], [])
    assert o.rows == []
    add(o, [3], [[1, 0, 1, 0]], "first")
    add(o, [0, 5], [[0, 2, 0, 0], [0, 0, 0, 4]], "second", caps=[[NAN, 3.0, NAN, NAN]] * 2)
    c = o.columns()
    assert c.weights.tolist() == [[1, 0, 1, 0], [0, 2, 0, 0], [0, 0, 0, 4]]
    assert c.reasons.tolist() == ["first", "second", "second"]
    # The part without caps has NaN caps.
    np.testing.assert_array_equal(c.caps, [[NAN] * 4, [NAN, 3.0, NAN, NAN],
                                           [NAN, 3.0, NAN, NAN]])


def test_outgoing_in_force_resends_sets_with_caps_while_rate_capped() -> None:
    fl = fleets("a", "b")["ul"]
    w = np.array([[1, 0, 1, 0], [2, 0, 2, 0]], dtype=np.int64)
    fl.store(rows(0, 1), DirectionBatch(w, w > 0, w > 0, np.array([1.0, 2.0]), ["m"] * 2,
                                        ["ra", "rb"], ["s"] * 2,
                                        np.array([[4.0, NAN, 5.0, NAN]] * 2)),
             np.array([1, 1], dtype=np.int64), 100.0)
    o = Outgoing()
    o.in_force(fl, rows(1, 0), Appliers(np.array([False, True])))  # by fleet row: b is capped
    c = o.columns()
    assert c.weights.tolist() == [[2, 0, 2, 0], [1, 0, 1, 0]]
    assert c.reasons.tolist() == ["rb", "ra"]
    np.testing.assert_array_equal(c.caps, [[4.0, NAN, 5.0, NAN], [NAN] * 4])
    none = Outgoing()
    none.in_force(fl, rows(0), Appliers())
    assert none.caps == [None]


def sets(fl: dict[str, FleetTable], out: dict[str, Outgoing],
         lent: dict[str, Outgoing] | None = None,
         seen: dict[str, list[int]] | None = None, book: PolicyBook | None = None
         ) -> tuple[list[int], dict[str, list[list[int]]], dict[str, list[str]],
                    dict[str, list[bool]]]:
    lent = lent or {d: Outgoing() for d in DIRECTIONS}
    seen = seen or {d: [] for d in DIRECTIONS}
    m = message_sets(fl, out, lent, {d: rows(*s) for d, s in seen.items()},
                     {d: Appliers() for d in DIRECTIONS}, (book or PolicyBook(DEFAULTS)).resolver)
    return (m.rows.tolist(), {d: c.weights.tolist() for d, c in m.sets.items()},
            {d: c.reasons.tolist() for d, c in m.sets.items()},
            {d: f.tolist() for d, f in m.follows.items()})


def test_each_direction_goes_with_its_own_set_or_the_one_in_force() -> None:
    fl = fleets("a", "b", "c")
    publish(fl["dl"], 2, [0, 0, 3, 0])
    out = {d: Outgoing() for d in DIRECTIONS}
    add(out["ul"], [2, 0], [[0, 0, 0, 8], [1, 0, 0, 0]])
    add(out["dl"], [0], [[0, 5, 0, 0]])
    at, weights, reasons, follows = sets(fl, out, seen={"dl": [0, 2], "ul": [0, 2]})
    assert at == [0, 2]  # sorted fleet rows, each CPE once
    assert weights == {"dl": [[0, 5, 0, 0], [0, 0, 3, 0]], "ul": [[1, 0, 0, 0], [0, 0, 0, 8]]}
    assert reasons["dl"] == ["lb", "held"]
    assert follows == {"dl": [False, False], "ul": [False, False]}


def test_a_direction_with_nothing_of_its_own_follows_the_other() -> None:
    fl = fleets("a")
    out = {d: Outgoing() for d in DIRECTIONS}
    add(out["ul"], [0], [[0, 0, 4, 2]])
    _, weights, reasons, follows = sets(fl, out, seen={"dl": [], "ul": [0]})
    assert weights["dl"] == weights["ul"] == [[0, 0, 4, 2]]
    assert reasons["dl"] == ["follows ul: lb"]
    assert follows == {"dl": [True], "ul": [False]}


def test_a_copied_set_loses_the_wats_its_own_policy_excludes() -> None:
    book = PolicyBook(DEFAULTS)
    book.put(PolicyInstance("p", {"directions": {"dl": {"excluded_wats": ["wifi"]}}},
                            frozenset(), 1.0))
    fl = fleets("a")
    out = {d: Outgoing() for d in DIRECTIONS}
    add(out["ul"], [0], [[3, 0, 4, 0]])
    _, weights, reasons, _ = sets(fl, out, seen={"dl": [], "ul": [0]}, book=book)
    assert weights == {"dl": [[3, 0, 0, 0]], "ul": [[3, 0, 4, 0]]}
    assert reasons["dl"] == ["follows ul: lb (without excluded wifi)"]
    assert excluded_wats(book.resolver(), "dl", ["a"], rows(0)).tolist() == [
        [False, False, True, False]]
    assert not excluded_wats(book.resolver(), "ul", ["a"], rows(0)).any()


def test_a_lent_set_goes_as_it_was_decided() -> None:
    """A set decided under its own policy from the other direction's forecasts is not
    copied again (and not stripped: its policy made it)."""
    fl = fleets("a")
    out = {d: Outgoing() for d in DIRECTIONS}
    lent = {d: Outgoing() for d in DIRECTIONS}
    add(out["ul"], [0], [[3, 0, 4, 0]])
    add(lent["dl"], [0], [[9, 0, 1, 0]], "follows ul: lb")
    _, weights, reasons, follows = sets(fl, out, lent, seen={"dl": [], "ul": [0]})
    assert weights["dl"] == [[9, 0, 1, 0]] and reasons["dl"] == ["follows ul: lb"]
    assert follows["dl"] == [True]


def test_a_message_with_an_empty_set_and_nothing_in_force_does_not_go() -> None:
    fl = fleets("a", "b")
    out = {d: Outgoing() for d in DIRECTIONS}
    add(out["ul"], [0, 1], [[0, 0, 0, 0], [2, 0, 0, 0]])
    add(out["dl"], [0, 1], [[1, 0, 0, 0], [2, 0, 0, 0]])
    at, _, _, follows = sets(fl, out, seen={"dl": [0, 1], "ul": [0, 1]})
    assert at == [1] and follows == {"dl": [False], "ul": [False]}
    # With sets in force in both directions it goes (as decided).
    publish(fl["dl"], 0, [1, 0, 0, 0])
    publish(fl["ul"], 0, [1, 0, 0, 0])
    at, _, _, _ = sets(fl, out, seen={"dl": [0, 1], "ul": [0, 1]})
    assert at == [0, 1]
