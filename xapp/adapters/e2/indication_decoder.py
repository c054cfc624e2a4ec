"""The decoding half of a RIC indication: payload bytes to one :class:`Decoded`, never raising.

:class:`IndicationDecoder` is the decoding half of :class:`~xapp.adapters.e2.ingest.KpmIngest`
(which runs it in-process in :meth:`KpmIngest.handle`, for tests and tools): the same code
runs in the decoder process (:mod:`xapp.adapters.e2.decoder_process`) against
:class:`BookCopy`, the main process's copy of the subscription book.  It knows nothing but
bytes in and plain data out; mapping to CPEs, counting and the intake are the main process's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from xapp.adapters.e2 import e2ap, kpm_decode
from xapp.adapters.e2.records import (
    ActiveSubscription,
    E2DecodeError,
    KpmIndication,
    RicRequestId,
)

#: An indication of 1,000 UEs with a dozen measurements each is some tens of KiB; RMR's own
#: default maximum message is 4 KiB unless the route is configured larger.
MAX_PAYLOAD: Final = 1 << 20
#: Outcomes the decoding half gives (the rest of :data:`~xapp.adapters.e2.ingest.OUTCOMES`
#: are the main process's): "decoded", or the reason it was refused.
DECODE_OUTCOMES: Final = ("decoded", "refused_empty", "refused_too_large", "refused_e2ap",
                          "refused_insert", "refused_unknown_subscription",
                          "refused_wrong_node", "refused_kpm", "internal_errors")
#: Dialect detection: "" (the remembered dialect read it), "checked" (every dialect was
#: tried), "skipped" (a recent check failed, so only the assumed one was).
CHECKS: Final = ("", "checked", "skipped")
#: (node, RAN function) pairs whose failed dialect check is remembered; beyond, forgotten.
MAX_TRACKED_FUNCTIONS: Final = 4096


@dataclass(frozen=True, slots=True)
class Decoded:
    """What decoding one RIC indication gave: plain data, the same in-process and across the
    pipe.  ``outcome`` is one of :data:`DECODE_OUTCOMES`; ``kpm`` is set when "decoded"."""

    outcome: str
    detail: str = ""
    request: RicRequestId | None = None
    ran_function_id: int | None = None
    #: The RMR meid the indication came with, and the node whose dialect was used.
    meid: str | None = None
    node: str = ""
    kpm: KpmIndication | None = None
    #: The dialect remembered for the node before this indication (None: none yet).
    known: str | None = None
    check: str = ""


class DecodeBook(Protocol):
    """What decoding needs of the subscription book (the book itself, or the process's copy)."""

    def peek(self, request: RicRequestId, ran_function_id: int
             ) -> ActiveSubscription | None: ...

    def dialect(self, node: str, ran_function_id: int) -> str | None: ...

    def remember_dialect(self, node: str, ran_function_id: int, dialect: str) -> None: ...


class IndicationDecoder:
    """An RMR payload of type 12050 to a :class:`Decoded`; never raises.

    The subscription the indication names gives the KPM version, the dialect assumed and the
    measurement names; the dialect its node's indications last decoded with is tried first,
    and on the node's first indication (or when that one fails) every dialect is, the first
    that reads header and message is remembered (in ``book``: the main process's answer
    comes after, and the next indication must not be checked again).  A failed check is not
    repeated for the same node and function within ``recheck_interval_s``: a node sending
    bytes no dialect reads costs one decode per indication, not one per dialect.
    """

    def __init__(self, book: DecodeBook, *, max_payload: int = MAX_PAYLOAD,
                 recheck_interval_s: float = 10.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.book = book
        self.max_payload = max_payload
        self.recheck_interval_s = recheck_interval_s
        self.monotonic = monotonic
        #: (node, RAN function) -> monotonic time of its last failed dialect check
        self._failed_checks: dict[tuple[str, int], float] = {}

    def decode(self, payload: bytes, meid: str | None = None, *,
               size: int | None = None) -> Decoded:
        """``payload`` from node ``meid`` (``size``: its length where only its first bytes
        were shipped, see :class:`~xapp.adapters.e2.decoder_process.DecoderProcess`)."""
        try:
            return self._decode(payload, meid, len(payload) if size is None else size)
        except Exception as exc:  # a bug, not bad input: reported, never raised
            return Decoded("internal_errors", f"{type(exc).__name__}: {exc}"[:500], meid=meid)

    def _decode(self, payload: bytes, meid: str | None, size: int) -> Decoded:
        if not size:
            return Decoded("refused_empty", "empty payload", meid=meid)
        if size > self.max_payload:
            return Decoded("refused_too_large", f"{size} bytes, more than {self.max_payload}",
                           meid=meid)
        try:
            ind = e2ap.decode_ric_indication(bytes(payload))
        except E2DecodeError as exc:
            return Decoded("refused_e2ap", str(exc), meid=meid)
        if ind.indication_type != "report":
            return Decoded("refused_insert", f"indication type {ind.indication_type}",
                           meid=meid)
        fn = ind.ran_function_id
        sub = self.book.peek(ind.request, fn)
        if sub is None:
            return Decoded("refused_unknown_subscription", "", ind.request, fn, meid)
        if meid and sub.node and meid != sub.node:
            return Decoded("refused_wrong_node", "", ind.request, fn, meid)
        node = sub.node or meid or ""
        known = self.book.dialect(node, fn)
        key = (node, fn)
        ids = sub.measurement_ids or None
        names = sub.measurements or None
        first = known or sub.dialect

        def decoded(kpm: KpmIndication, check: str) -> Decoded:
            return Decoded("decoded", "", ind.request, fn, meid, node, kpm, known, check)

        def refused(exc: E2DecodeError, check: str) -> Decoded:
            return Decoded("refused_kpm", str(exc), ind.request, fn, meid, node, None, known,
                           check)

        failed_at = self._failed_checks.get(key)
        if failed_at is not None and self.monotonic() - failed_at < self.recheck_interval_s:
            try:
                return decoded(kpm_decode.decode_kpm_indication(
                    ind.header, ind.message, sub.kpm_version, dialect=first,
                    measurement_ids=ids, measurement_names=names), "skipped")
            except E2DecodeError as exc:
                return refused(exc, "skipped")
        if known is not None:
            try:
                return decoded(kpm_decode.decode_kpm_indication(
                    ind.header, ind.message, sub.kpm_version, dialect=known,
                    measurement_ids=ids, measurement_names=names), "")
            except E2DecodeError:
                pass
        try:
            kpm = kpm_decode.detect_kpm_indication(ind.header, ind.message, sub.kpm_version,
                                                   first=first, measurement_ids=ids,
                                                   measurement_names=names)
        except E2DecodeError as exc:
            if len(self._failed_checks) >= MAX_TRACKED_FUNCTIONS:
                self._failed_checks.clear()
            self._failed_checks[key] = self.monotonic()
            return refused(exc, "checked")
        self._failed_checks.pop(key, None)
        if kpm.dialect != known:
            self.book.remember_dialect(node, fn, kpm.dialect)
        return decoded(kpm, "checked")


class BookCopy:
    """The decoder process's copy of the subscription book: what :class:`IndicationDecoder`
    needs, loaded from :meth:`SubscriptionBook.decode_view` (the main process's, trusted)."""

    def __init__(self) -> None:
        self.version = -1
        self._requestor: int | None = None
        self._subs: dict[tuple[int, int], ActiveSubscription] = {}
        self._dialects: dict[tuple[str, int], str] = {}

    def load(self, view: Mapping[str, Any]) -> None:
        subs: dict[tuple[int, int], ActiveSubscription] = {}
        requestor = view["requestor"]
        for instance, fn, sid, node, version, dialect, ids, names in view["subscriptions"]:
            subs[(int(instance), int(fn))] = ActiveSubscription(
                str(sid), str(node), RicRequestId(-1 if requestor is None else int(requestor),
                                                  int(instance)),
                int(fn), int(version), 0, measurement_ids={int(i): str(n) for i, n in ids},
                dialect=str(dialect), measurements=tuple(str(n) for n in names))
        self._subs = subs
        self._requestor = None if requestor is None else int(requestor)
        self._dialects = {(str(n), int(f)): str(d) for n, f, d in view["dialects"]}
        self.version = int(view["version"])

    def peek(self, request: RicRequestId, ran_function_id: int) -> ActiveSubscription | None:
        sub = self._subs.get((request.instance, ran_function_id))
        if sub is None or (self._requestor is not None and request.requestor != self._requestor):
            return None
        return sub

    def dialect(self, node: str, ran_function_id: int) -> str | None:
        return self._dialects.get((node, ran_function_id))

    def remember_dialect(self, node: str, ran_function_id: int, dialect: str) -> None:
        self._dialects[(node, ran_function_id)] = dialect

