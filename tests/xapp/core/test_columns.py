"""One direction's sets of a tick's messages (xapp.core.columns)."""

from __future__ import annotations

import math

import numpy as np

from xapp.core.class_columns import ClassColumns
from xapp.core.columns import Appliers, Columns
from xapp.core.fleet import FleetTable
from xapp.core.ports import DirectionBatch

NAN = math.nan
# KNOWN_WATS: nr, lte, wifi, lifi.


def columns(weights: list[list[int]], reasons: list[str] | None = None,
            caps: list[list[float]] | None = None) -> Columns:
    w = np.array(weights, dtype=np.int64)
    n = len(w)
    return Columns(w, w > 0, w > 0, np.arange(n, dtype=np.float64) + 10.0,
                   np.array(["load_balancing"] * n, dtype=object),
                   np.array(reasons or [f"r{i}" for i in range(n)], dtype=object),
                   np.array(["default"] * n, dtype=object),
                   np.full(w.shape, np.nan) if caps is None else np.array(caps),
                   ClassColumns.empty(n, w.shape[1]))


def fleet_in_force() -> FleetTable:
    """Three CPEs with sets in force; b has caps."""
    fleet = FleetTable(lambda cpe_id: None, "ul")
    rows = fleet.rows(["a", "b", "c"])
    w = np.array([[1, 0, 1, 0], [2, 0, 2, 0], [3, 0, 0, 3]], dtype=np.int64)
    caps = np.array([[NAN] * 4, [4.0, NAN, 5.0, NAN], [NAN] * 4])
    fleet.store(rows, DirectionBatch(w, w > 0, w > 0, np.array([1.0, 2.0, 3.0]),
                                     ["m"] * 3, ["ra", "rb", "rc"], ["s"] * 3, caps),
                np.array([1, 1, 1], dtype=np.int64), 100.0)
    return fleet


def test_in_force_takes_the_sets_with_caps_only_where_still_rate_capped() -> None:
    fleet = fleet_in_force()
    rows = np.array([1, 2], dtype=np.intp)
    c = Columns.in_force(fleet, rows, Appliers(np.array([True, True, False])))
    assert c.weights.tolist() == [[2, 0, 2, 0], [3, 0, 0, 3]]
    assert c.reasons.tolist() == ["rb", "rc"] and c.aggregate.tolist() == [2.0, 3.0]
    np.testing.assert_array_equal(c.caps, [[4.0, NAN, 5.0, NAN], [NAN] * 4])
    # The applier of b no longer rate-caps: its caps do not go again.
    assert np.isnan(Columns.in_force(fleet, rows,
                                     Appliers(np.array([False, False, False]))).caps).all()
    assert np.isnan(Columns.in_force(fleet, rows, Appliers()).caps).all()
    # Copies: changing the columns leaves the table alone.
    c.weights[0] = 9
    assert fleet.weights[1].tolist() == [2, 0, 2, 0]


def test_put_places_new_sets_at_their_positions() -> None:
    c = columns([[1, 0, 0, 0], [2, 0, 0, 0], [3, 0, 0, 0]])
    c.put(np.array([2, 0], dtype=np.intp),
          columns([[0, 7, 0, 0], [0, 0, 8, 0]], ["new2", "new0"],
                  caps=[[NAN, 1.5, NAN, NAN], [NAN] * 4]))
    assert c.weights.tolist() == [[0, 0, 8, 0], [2, 0, 0, 0], [0, 7, 0, 0]]
    assert c.reasons.tolist() == ["new0", "r1", "new2"]
    np.testing.assert_array_equal(c.caps[2], [NAN, 1.5, NAN, NAN])


def test_follow_copies_the_other_direction_without_its_caps() -> None:
    dl = columns([[1, 0, 0, 0], [2, 0, 0, 0]], caps=[[5.0, NAN, NAN, NAN]] * 2)
    ul = columns([[0, 0, 4, 4], [0, 0, 6, 6]], ["lb", "held"], caps=[[NAN, NAN, 1.0, 2.0]] * 2)
    dl.follow(np.array([False, True]), ul, "ul")
    assert dl.weights.tolist() == [[1, 0, 0, 0], [0, 0, 6, 6]]
    assert dl.reasons.tolist() == ["r0", "follows ul: held"]
    np.testing.assert_array_equal(dl.caps, [[5.0, NAN, NAN, NAN], [NAN] * 4])
    dl.follow(np.array([False, False]), ul, "ul")
    assert dl.reasons.tolist() == ["r0", "follows ul: held"]


def test_exclude_drops_excluded_wats_or_keeps_a_set_it_would_empty() -> None:
    c = columns([[5, 0, 5, 0], [0, 0, 5, 5], [0, 0, 9, 0]])
    at = np.array([0, 2, 1], dtype=np.intp)
    excluded = np.array([[False, False, True, False],   # position 0: wifi goes
                         [True, False, True, False],    # position 2: only wifi, nothing left
                         [False, False, False, False]])  # position 1: nothing excluded
    c.exclude(at, excluded)
    assert c.weights.tolist() == [[5, 0, 0, 0], [0, 0, 5, 5], [0, 0, 9, 0]]
    assert c.usable.tolist()[0] == [True, False, False, False]
    assert c.reasons.tolist() == [
        "r0 (without excluded wifi)", "r1",
        "r2 (as it is: its own policy excludes all of it, nr, wifi)"]


def test_subset_and_batch() -> None:
    c = columns([[1, 0, 0, 0], [2, 0, 0, 0], [3, 0, 0, 0]])
    batch = c.subset(np.array([2, 0], dtype=np.intp)).batch()
    assert batch.weights.tolist() == [[3, 0, 0, 0], [1, 0, 0, 0]]
    assert batch.reasons == ["r2", "r0"] and batch.modes == ["load_balancing"] * 2
    assert batch.caps_mbps is None  # no cap anywhere: the message is as without caps
    c.caps[1, 0] = 2.5
    capped = c.batch().caps_mbps
    assert capped is not None and capped[1, 0] == 2.5 and np.isnan(capped[0]).all()
