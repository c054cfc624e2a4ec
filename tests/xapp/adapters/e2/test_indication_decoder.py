"""The decoding half of a RIC indication: the decoder process's copy of the book decides as the
book does, and decoding never raises (issue 21)."""

from __future__ import annotations

import json

from tests.xapp.adapters.e2.decoder_inputs import (
    FUNCTION,
    NODE,
    REQUEST,
    indication,
    make_ingest,
)
from xapp.adapters.e2.indication_decoder import BookCopy, IndicationDecoder
from xapp.adapters.e2.records import ActiveSubscription, RicRequestId
from xapp.adapters.e2.subscription_book import SubscriptionBook


def test_the_book_copy_decides_as_the_book_does() -> None:
    book = SubscriptionBook(REQUEST.requestor)
    book.add(ActiveSubscription("sub-1", NODE, REQUEST, FUNCTION, 3, 4,
                                measurement_ids={1: "DRB.UEThpDl"}, dialect="flexric-v3",
                                measurements=("DRB.UEThpDl", "RRU.PrbTotDl")))
    book.remember_dialect(NODE, FUNCTION, "flexric-v3")
    copy = BookCopy()
    copy.load(json.loads(json.dumps(book.decode_view())))
    assert copy.version == book.version
    for request in (REQUEST, RicRequestId(999, 7), RicRequestId(123, 8)):
        want, got = book.peek(request, FUNCTION), copy.peek(request, FUNCTION)
        assert (want is None) == (got is None)
    sub = copy.peek(REQUEST, FUNCTION)
    assert sub is not None
    assert (sub.subscription_id, sub.node, sub.kpm_version, sub.dialect, sub.measurement_ids,
            sub.measurements) == ("sub-1", NODE, 3, "flexric-v3", {1: "DRB.UEThpDl"},
                                  ("DRB.UEThpDl", "RRU.PrbTotDl"))
    assert copy.dialect(NODE, FUNCTION) == "flexric-v3"
    # Every change of what decoding needs moves the version (the copy is sent again).
    v = book.version
    book.remember_dialect(NODE, FUNCTION, "flexric-v3")
    assert book.version == v  # no change
    book.remember_dialect(NODE, FUNCTION, "v3")
    book.remove_subscription("sub-1")
    assert book.version == v + 2
    unmatched = SubscriptionBook(REQUEST.requestor, match_requestor=False)
    unmatched.add(ActiveSubscription("sub-1", NODE, REQUEST, FUNCTION, 3, 1))
    copy.load(unmatched.decode_view())
    assert copy.peek(RicRequestId(999, 7), FUNCTION) is not None


def test_the_decoding_half_never_raises() -> None:
    class Broken:
        def peek(self, request: RicRequestId, ran_function_id: int) -> ActiveSubscription:
            raise RuntimeError("boom")

        def dialect(self, node: str, ran_function_id: int) -> str | None:
            return None

        def remember_dialect(self, node: str, ran_function_id: int, dialect: str) -> None:
            pass

    d = IndicationDecoder(Broken()).decode(indication(), NODE)
    assert (d.outcome, d.detail) == ("internal_errors", "RuntimeError: boom")
    ingest, _ = make_ingest()
    ingest.apply(d)
    assert ingest.counters["internal_errors"] == 1 and ingest.counters["received"] == 1
