"""The book the indication path checks RIC Indications against."""

from __future__ import annotations

from tests.xapp.adapters.e2.submgr_stand_in import MEID
from xapp.adapters.e2.records import RicRequestId
from xapp.adapters.e2.subscription_book import SubscriptionBook


def test_requestor_must_match_unless_told_not_to() -> None:
    from xapp.adapters.e2.records import ActiveSubscription

    sub = ActiveSubscription("s", MEID, RicRequestId(123, 7), 2, 3, 1)
    strict, lax = SubscriptionBook(123), SubscriptionBook(123, match_requestor=False)
    for book in (strict, lax):
        book.add(sub)
    assert strict.lookup(RicRequestId(123, 7), 2) == sub
    assert strict.lookup(RicRequestId(1, 7), 2) is None  # the simulator's requestor
    assert lax.lookup(RicRequestId(1, 7), 2) == sub
    assert strict.lookup(RicRequestId(123, 7), 3) is None  # other RAN function
    assert strict.lookup(RicRequestId(123, 8), 2) is None  # other instance
    assert strict.misses == 3
