"""RIC Indications (RMR 12050) to the intake: decode, match the subscription, map, hand over.

One :class:`KpmIngest` sits behind :class:`~xapp.adapters.rmr.RmrGlue`, in two halves::

    payload --decode_ric_indication--> RicIndication --book--> ActiveSubscription
            --decode_kpm_indication(dialect, measIDs)--> KpmIndication      (decoding half)
            --book.lookup, map_indication(registry, names)--> one KpiFrame --> sink  (apply)

The decoding half (:class:`~xapp.adapters.e2.indication_decoder.IndicationDecoder`) runs in
the decoder process that ``mcw run`` starts
(:class:`~xapp.adapters.e2.decoder_process.DecoderProcess`), which hands each result to
:meth:`KpmIngest.apply` in the main process; :meth:`KpmIngest.handle` runs both halves in the
caller's thread (tests, tools, the in-process bench figures).

Neither raises: one malformed indication must not stop anything.  Every outcome is counted in
:attr:`KpmIngest.counters` (fixed keys, read at scrape time) and every refusal is logged, at
most once per ``log_interval_s`` per reason with the number since the last line, because a
node sending garbage every 10 ms must not flood the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from xapp.adapters.e2 import aper
from xapp.adapters.e2.indication_decoder import MAX_PAYLOAD, Decoded, IndicationDecoder
from xapp.adapters.e2.mapping import (
    DEFAULT_MAP,
    CpeLookup,
    MappingCounts,
    MeasurementMap,
    family_of,
    map_indication,
)
from xapp.adapters.e2.records import ActiveSubscription, RicRequestId
from xapp.core.forecast import KpiFrame

log = logging.getLogger(__name__)

#: Outcomes counted per indication; every key exists from the start so a scrape can iterate the
#: dict while the dispatch thread updates it.
OUTCOMES: Final[tuple[str, ...]] = (
    "received",
    "accepted",  # decoded, matched, mapped, handed to the sink with at least one row
    "accepted_no_rows",  # decoded and matched, but nothing mapped to a registered CPE
    "refused_empty",
    "refused_too_large",
    "refused_e2ap",  # not a well-formed RIC Indication
    "refused_insert",  # an INSERT indication: KPM reports only
    "refused_unknown_subscription",
    "refused_wrong_node",  # the RMR meid is not the subscription's node
    "refused_kpm",  # the E2SM-KPM header/message decodes under no dialect
    "sink_errors",
    "internal_errors",
)
#: E2SM-KPM dialect detection: indications decoded per dialect; a node's first indication
#: (or one that failed under the remembered dialect) checked against every dialect, and how
#: often that changed the node's dialect.
DIALECT_COUNTS: Final[tuple[str, ...]] = (
    *(f"decoded_{d}" for d in aper.DIALECTS), "dialect_checks", "dialect_changes",
    "dialect_checks_skipped")
MAPPING_COUNTS: Final[tuple[str, ...]] = tuple(MappingCounts().as_dict())


class SubscriptionLookup(Protocol):
    """What the ingest needs of :class:`~xapp.adapters.e2.subscription_book.SubscriptionBook`."""

    version: int

    def lookup(self, request: RicRequestId, ran_function_id: int
               ) -> ActiveSubscription | None: ...

    def peek(self, request: RicRequestId, ran_function_id: int
             ) -> ActiveSubscription | None: ...

    def dialect(self, node: str, ran_function_id: int) -> str | None: ...

    def remember_dialect(self, node: str, ran_function_id: int, dialect: str) -> None: ...

    def decode_view(self) -> dict[str, Any]: ...


#: Refusals decided before a subscription is looked up (no hit or miss is counted for them).
_EARLY: Final = frozenset(("refused_empty", "refused_too_large", "refused_e2ap",
                           "refused_insert", "internal_errors"))


class KpmIngest:
    """Decodes and maps KPM indications into ``sink``; never raises out of :meth:`handle`.

    Parameters
    ----------
    book : SubscriptionLookup
        The confirmed subscriptions; an indication matching none is refused.
    registry : CpeLookup
        UE ids and cells -> CPEs (:class:`~xapp.adapters.e2.registry.CpeRegistry`).
    sink : callable
        Takes each indication's :class:`KpiFrame` (the runtime's intake + InfluxDB writer).
    names : MeasurementMap, optional
        Measurement table; the defaults of :mod:`xapp.adapters.e2.mapping` when None.
    clock : callable
        Time of each frame (arrival time, like every other intake source).
    recheck_interval_s : float
        How long after a failed dialect check a node's undecodable indications are refused
        without trying every dialect again.
    monotonic : callable
        The clock of that interval.
    """

    def __init__(self, book: SubscriptionLookup, registry: CpeLookup,
                 sink: Callable[[KpiFrame], None], *, names: MeasurementMap | None = None,
                 clock: Callable[[], float] = time.time, max_payload: int = MAX_PAYLOAD,
                 log_interval_s: float = 10.0, recheck_interval_s: float = 10.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.book = book
        self.registry = registry
        self.sink = sink
        self.names = names if names is not None else DEFAULT_MAP
        self.clock = clock
        self.max_payload = max_payload
        self.log_interval_s = log_interval_s
        self.recheck_interval_s = recheck_interval_s
        self.monotonic = monotonic
        #: The decoding half, for :meth:`handle` (the decoder process runs its own).
        self.decoder = IndicationDecoder(book, max_payload=max_payload,
                                         recheck_interval_s=recheck_interval_s,
                                         monotonic=monotonic)
        self.counters: dict[str, int] = dict.fromkeys(OUTCOMES + MAPPING_COUNTS + DIALECT_COUNTS, 0)
        #: family -> the table with that family's rules on top of ``names``
        self._tables: dict[str, MeasurementMap] = {}
        #: reason -> (monotonic time of the last log line, refusals not logged since)
        self._logged: dict[str, tuple[float, int]] = {}

    def handle(self, payload: bytes, meid: str | None = None) -> None:
        """One RMR payload of type 12050 from node ``meid``, decoded in this thread and
        applied; counted, never raised."""
        self.apply(self.decoder.decode(payload, meid))

    def apply(self, decoded: Decoded) -> None:
        """One decoded indication (the decoder process's answer) matched, mapped and handed
        to the sink; counted, never raised."""
        c = self.counters
        c["received"] += 1
        try:
            self._apply(decoded)
        except Exception as exc:  # a bug, not bad input: still never out of the thread
            c["internal_errors"] += 1
            self._refuse("internal_errors", f"{type(exc).__name__}: {exc}", exc_info=True)

    def _apply(self, d: Decoded) -> None:
        c = self.counters
        if d.outcome in _EARLY:
            if d.outcome == "internal_errors":  # not a refusal: _refuse only logs it
                c["internal_errors"] += 1
            self._refuse(d.outcome, d.detail)
            return
        if d.request is None or d.ran_function_id is None:
            raise ValueError(f"{d.outcome} indication without its request id")
        meid = d.meid
        # The book is the authority (it counts hits and misses): a subscription deleted
        # since the indication was decoded refuses it here.
        sub = self.book.lookup(d.request, d.ran_function_id)
        if sub is None or d.outcome == "refused_unknown_subscription":
            self._refuse("refused_unknown_subscription",
                         f"requestor {d.request.requestor} instance {d.request.instance} "
                         f"RAN function {d.ran_function_id} from {meid or 'unknown node'}")
            return
        if (meid and sub.node and meid != sub.node) or d.outcome == "refused_wrong_node":
            self._refuse("refused_wrong_node",
                         f"subscription {sub.subscription_id} is for {sub.node}, "
                         f"the indication came from {meid}")
            return
        if d.check == "checked":
            c["dialect_checks"] += 1
        elif d.check == "skipped":
            c["dialect_checks_skipped"] += 1
        kpm = d.kpm
        if d.outcome != "decoded" or kpm is None:
            self._refuse("refused_kpm", f"subscription {sub.subscription_id} "
                         f"(KPM v{sub.kpm_version}): {d.detail}")
            return
        c[f"decoded_{kpm.dialect}"] += 1
        if kpm.dialect != d.known:
            if d.known is not None:
                c["dialect_changes"] += 1
                log.warning("E2 node %s RAN function %d: indications now decode as %s, not %s",
                            d.node, d.ran_function_id, kpm.dialect, d.known)
            self.book.remember_dialect(d.node, d.ran_function_id, kpm.dialect)
        # The family was chosen at subscription time from the dialect then assumed; bytes
        # that decoded in another dialect are that dialect's node (FlexRIC's is OAI's gNB,
        # whose RRU.PrbTotDl is a PRB count, not 3GPP's percentage).
        family = sub.family if kpm.dialect == sub.dialect else family_of(
            kpm.dialect, sub.measurements, sub.kpm_version)
        table = self._tables.get(family)
        if table is None:
            table = self._tables[family] = self.names.for_family(family)
        frame, counts = map_indication(kpm, self.registry, time_s=self.clock(),
                                       names=table, default_cell=sub.cell,
                                       prb_total=sub.prb_total,
                                       granularity_ms=sub.granularity_ms)
        for key, n in counts.as_dict().items():
            if n:
                c[key] += n
        if frame is None:
            c["accepted_no_rows"] += 1
            return
        try:
            self.sink(frame)
        except Exception as exc:
            c["sink_errors"] += 1
            self._refuse("sink_errors", f"{type(exc).__name__}: {exc}", exc_info=True)
            return
        c["accepted"] += 1

    def _refuse(self, reason: str, detail: str, *, exc_info: bool = False) -> None:
        if reason.startswith("refused_"):
            self.counters[reason] += 1
        now = time.monotonic()
        last, quiet = self._logged.get(reason, (-float("inf"), 0))
        if now - last < self.log_interval_s:
            self._logged[reason] = (last, quiet + 1)
            return
        self._logged[reason] = (now, 0)
        more = f" ({quiet} more since the last report)" if quiet else ""
        log.warning("E2 indication %s: %s%s", reason.replace("_", " "), detail, more,
                    exc_info=exc_info)
