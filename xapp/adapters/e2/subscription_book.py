"""The confirmed subscriptions the indication path checks every RIC Indication against."""

from __future__ import annotations

import threading
from typing import Any

from xapp.adapters.e2.records import ActiveSubscription, RicRequestId
from xapp.adapters.e2.submgr_client import SUBMGR_REQUESTOR_ID


class SubscriptionBook:
    """Confirmed subscriptions by (RIC instance, RAN function); safe for concurrent use.

    ``lookup`` runs for every RIC Indication (RMR's thread): one dictionary access under a
    lock.  It also counts, per subscription, the indications that matched, and the ones that
    matched none (``misses``).
    """

    def __init__(self, requestor_id: int = SUBMGR_REQUESTOR_ID, *,
                 match_requestor: bool = True) -> None:
        self.requestor_id = requestor_id
        self.match_requestor = match_requestor
        self._subs: dict[tuple[int, int], ActiveSubscription] = {}
        self._hits: dict[tuple[int, int], int] = {}
        self._dialects: dict[tuple[str, int], str] = {}
        self.misses = 0
        #: Changes with every change of what decoding needs (subscriptions, dialects): the
        #: decoder process's copy (:meth:`decode_view`) is sent again when it moved.
        self.version = 0
        self._lock = threading.Lock()

    def lookup(self, request: RicRequestId, ran_function_id: int) -> ActiveSubscription | None:
        key = (request.instance, ran_function_id)
        with self._lock:
            sub = self._subs.get(key)
            if sub is None or (self.match_requestor and request.requestor != self.requestor_id):
                self.misses += 1
                return None
            self._hits[key] = self._hits.get(key, 0) + 1
            return sub

    def peek(self, request: RicRequestId, ran_function_id: int) -> ActiveSubscription | None:
        """What :meth:`lookup` finds, without counting (the decoding half of the ingest)."""
        with self._lock:
            sub = self._subs.get((request.instance, ran_function_id))
            if sub is None or (self.match_requestor and request.requestor != self.requestor_id):
                return None
            return sub

    def add(self, sub: ActiveSubscription) -> None:
        key = (sub.request.instance, sub.ran_function_id)
        with self._lock:
            self._subs[key] = sub
            self._hits.setdefault(key, 0)
            self.version += 1

    def remove_subscription(self, subscription_id: str) -> int:
        """Forget every instance of a submgr subscription; how many there were."""
        with self._lock:
            keys = [k for k, s in self._subs.items() if s.subscription_id == subscription_id]
            for k in keys:
                del self._subs[k]
                self._hits.pop(k, None)
            self.version += 1
        return len(keys)

    def clear(self) -> None:
        with self._lock:
            self._subs.clear()
            self._hits.clear()
            self.version += 1

    def indications(self, instance: int, ran_function_id: int) -> int:
        with self._lock:
            return self._hits.get((instance, ran_function_id), 0)

    def dialect(self, node: str, ran_function_id: int) -> str | None:
        """The E2SM-KPM dialect the node's indications last decoded with, None before one."""
        with self._lock:
            return self._dialects.get((node, ran_function_id))

    def remember_dialect(self, node: str, ran_function_id: int, dialect: str) -> None:
        """Kept per node and RAN function (not per subscription): it outlives resubscribing."""
        with self._lock:
            if self._dialects.get((node, ran_function_id)) != dialect:
                self._dialects[(node, ran_function_id)] = dialect
                self.version += 1

    def active(self) -> list[ActiveSubscription]:
        with self._lock:
            return list(self._subs.values())

    def decode_view(self) -> dict[str, Any]:
        """What decoding indications needs of the book, as plain JSON data (the decoder
        process's copy, :class:`xapp.adapters.e2.indication_decoder.BookCopy`): the
        subscriptions' keys, nodes, KPM versions, dialects and measurement lists, the dialects
        remembered per node and RAN function, and :attr:`version`."""
        with self._lock:
            return {
                "version": self.version,
                "requestor": self.requestor_id if self.match_requestor else None,
                "subscriptions": [
                    [s.request.instance, s.ran_function_id, s.subscription_id, s.node,
                     s.kpm_version, s.dialect, sorted(s.measurement_ids.items()),
                     list(s.measurements)] for s in self._subs.values()],
                "dialects": [[node, fn, d] for (node, fn), d in self._dialects.items()],
            }
