"""RIC Indications (RMR 12050) to the intake: decode, match the subscription, map, hand over.

One :class:`KpmIngest` sits behind :class:`~xapp.adapters.rmr.RmrGlue`'s ``on_indication``::

    payload --decode_ric_indication--> RicIndication --book.lookup--> ActiveSubscription
            --decode_kpm_indication(version, measIDs)--> KpmIndication
            --map_indication(registry, names)--> one KpiFrame --> sink (intake + InfluxDB)

:meth:`KpmIngest.handle` never raises: RMR's dispatch thread serves A1 and health checks too,
and one malformed indication must not stop them.  Every outcome is counted in
:attr:`KpmIngest.counters` (fixed keys, read at scrape time) and every refusal is logged, at
most once per ``log_interval_s`` per reason with the number since the last line, because a
node sending garbage every 10 ms must not flood the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final, Protocol

from xapp.adapters.e2 import codec
from xapp.adapters.e2.mapping import (
    DEFAULT_MAP,
    CpeLookup,
    MappingCounts,
    MeasurementMap,
    map_indication,
)
from xapp.adapters.e2.records import (
    ActiveSubscription,
    E2DecodeError,
    KpmIndication,
    RicIndication,
    RicRequestId,
)
from xapp.core.forecast import KpiFrame

log = logging.getLogger(__name__)

#: An indication of 1,000 UEs with a dozen measurements each is some tens of KiB; RMR's own
#: default maximum message is 4 KiB unless the route is configured larger.
MAX_PAYLOAD: Final = 1 << 20

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
    *(f"decoded_{d}" for d in codec.DIALECTS), "dialect_checks", "dialect_changes",
    "dialect_checks_skipped")
#: (node, RAN function) pairs whose failed dialect check is remembered; beyond, forgotten.
MAX_TRACKED_FUNCTIONS: Final = 4096
MAPPING_COUNTS: Final[tuple[str, ...]] = tuple(MappingCounts().as_dict())


class SubscriptionLookup(Protocol):
    """What the ingest needs of :class:`~xapp.adapters.e2.subscriptions.SubscriptionBook`."""

    def lookup(self, request: RicRequestId, ran_function_id: int
               ) -> ActiveSubscription | None: ...

    def dialect(self, node: str, ran_function_id: int) -> str | None: ...

    def remember_dialect(self, node: str, ran_function_id: int, dialect: str) -> None: ...


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
        #: (node, RAN function) -> monotonic time of its last failed dialect check
        self._failed_checks: dict[tuple[str, int], float] = {}
        self.counters: dict[str, int] = dict.fromkeys(OUTCOMES + MAPPING_COUNTS + DIALECT_COUNTS, 0)
        #: family -> the table with that family's rules on top of ``names``
        self._tables: dict[str, MeasurementMap] = {}
        #: reason -> (monotonic time of the last log line, refusals not logged since)
        self._logged: dict[str, tuple[float, int]] = {}

    def handle(self, payload: bytes, meid: str | None = None) -> None:
        """One RMR payload of type 12050 from node ``meid``; counted, never raised."""
        c = self.counters
        c["received"] += 1
        try:
            self._handle(payload, meid)
        except Exception as exc:  # a bug, not bad input: still never out of the RMR thread
            c["internal_errors"] += 1
            self._refuse("internal_errors", f"{type(exc).__name__}: {exc}", exc_info=True)

    def _handle(self, payload: bytes, meid: str | None) -> None:
        c = self.counters
        if not payload:
            self._refuse("refused_empty", "empty payload")
            return
        if len(payload) > self.max_payload:
            self._refuse("refused_too_large",
                         f"{len(payload)} bytes, more than {self.max_payload}")
            return
        try:
            ind = codec.decode_ric_indication(bytes(payload))
        except E2DecodeError as exc:
            self._refuse("refused_e2ap", str(exc))
            return
        if ind.indication_type != "report":
            self._refuse("refused_insert", f"indication type {ind.indication_type}")
            return
        sub = self.book.lookup(ind.request, ind.ran_function_id)
        if sub is None:
            self._refuse("refused_unknown_subscription",
                         f"requestor {ind.request.requestor} instance {ind.request.instance} "
                         f"RAN function {ind.ran_function_id} from {meid or 'unknown node'}")
            return
        if meid and sub.node and meid != sub.node:
            self._refuse("refused_wrong_node",
                         f"subscription {sub.subscription_id} is for {sub.node}, "
                         f"the indication came from {meid}")
            return
        node = sub.node or meid or ""
        try:
            kpm = self._decode_kpm(ind, sub, node)
        except E2DecodeError as exc:
            self._refuse("refused_kpm", f"subscription {sub.subscription_id} "
                         f"(KPM v{sub.kpm_version}): {exc}")
            return
        c[f"decoded_{kpm.dialect}"] += 1
        table = self._tables.get(sub.family)
        if table is None:
            table = self._tables[sub.family] = self.names.for_family(sub.family)
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

    def _decode_kpm(self, ind: RicIndication, sub: ActiveSubscription,
                    node: str) -> KpmIndication:
        """The KPM payload read with the node's remembered dialect; on the node's first
        indication, or when the remembered dialect fails, with every dialect (the remembered,
        else the assumed one first), remembering what reads it.

        A failed check is not repeated for the same node and function within
        ``recheck_interval_s``: a node sending bytes no dialect reads costs one decode per
        indication, not one per dialect (counted as ``dialect_checks_skipped``)."""
        c = self.counters
        key = (node, sub.ran_function_id)
        known = self.book.dialect(node, sub.ran_function_id)
        ids = sub.measurement_ids or None
        names = sub.measurements or None
        first = known or sub.dialect
        failed_at = self._failed_checks.get(key)
        if failed_at is not None and self.monotonic() - failed_at < self.recheck_interval_s:
            c["dialect_checks_skipped"] += 1
            return codec.decode_kpm_indication(ind.header, ind.message, sub.kpm_version,
                                               dialect=first, measurement_ids=ids,
                                               measurement_names=names)
        if known is not None:
            try:
                return codec.decode_kpm_indication(ind.header, ind.message, sub.kpm_version,
                                                   dialect=known, measurement_ids=ids,
                                                   measurement_names=names)
            except E2DecodeError:
                pass
        c["dialect_checks"] += 1
        try:
            kpm = codec.detect_kpm_indication(ind.header, ind.message, sub.kpm_version,
                                              first=first, measurement_ids=ids,
                                              measurement_names=names)
        except E2DecodeError:
            if len(self._failed_checks) >= MAX_TRACKED_FUNCTIONS:
                self._failed_checks.clear()
            self._failed_checks[key] = self.monotonic()
            raise
        self._failed_checks.pop(key, None)
        if kpm.dialect != known:
            if known is not None:
                c["dialect_changes"] += 1
                log.warning("E2 node %s RAN function %d: indications now decode as %s, not %s",
                            node, sub.ran_function_id, kpm.dialect, known)
            self.book.remember_dialect(node, sub.ran_function_id, kpm.dialect)
        return kpm

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
