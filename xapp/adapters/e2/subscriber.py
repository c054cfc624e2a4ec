"""Keeps one KPM subscription per connected E2 node through the Subscription Manager.

:class:`E2Subscriber` is one supervised worker's step: it reads the nodes
(:mod:`xapp.adapters.e2.nodes`), subscribes the connected ones with a KPM function (what it
asks for: :mod:`xapp.adapters.e2.subscription_request`), retries failures with back-off, drops
and resubscribes a node that went away and came back, deletes at start what a previous run
left (:mod:`xapp.adapters.e2.subscription_store`), and deletes everything it made at stop.
What submgr confirmed goes into the :class:`~xapp.adapters.e2.subscription_book.SubscriptionBook`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from xapp import bounded_json
from xapp.adapters.e2.mapping import family_of
from xapp.adapters.e2.nodes import NodeSource
from xapp.adapters.e2.records import ActiveSubscription, E2Node, RicRequestId
from xapp.adapters.e2.submgr_client import (
    CALLBACK_LIMITS,
    SubmgrApi,
    SubmgrBusy,
    SubmgrClient,
    SubmgrError,
    parse_callback,
    submgr_busy,
)
from xapp.adapters.e2.subscription_book import SubscriptionBook
from xapp.adapters.e2.subscription_request import (
    CodecEncoder,
    Detail,
    DetailMaker,
    E2SubscribeSettings,
    Encoder,
    subscription_params,
)
from xapp.adapters.e2.subscription_state import InstanceState, NodeState, node_state_view
from xapp.adapters.e2.subscription_store import (
    IdStore,
    MemoryIdStore,
    NodeRecords,
    NodeSubscription,
)

log = logging.getLogger(__name__)

#: Callbacks that arrive before the POST that asked for them returned (submgr answers from a
#: goroutine), kept this long at most, this many at most.
EARLY_CALLBACK_S = 60.0
MAX_EARLY_CALLBACKS = 64
#: Requests to submgr in one step at most, so a step against a hung submgr stays well inside
#: the worker's deadline (each request is bounded by ``http_timeout_s``); the rest waits for
#: the next step.
MAX_REQUESTS_PER_STEP = 8
#: A DELETE answered 400 (submgr still handling the subscription's POST) at stop: tried this
#: many times at most, the waits doubling from DELETE_RETRY_S, within the stop's time.
MAX_DELETE_ATTEMPTS = 6
DELETE_RETRY_S = 0.25
#: Quick retries of a subscription submgr refused because a transaction of the node is still
#: ongoing (its asynchronous delete); past this many in a row the usual back-off applies.
MAX_BUSY_RETRIES = 30
#: Ids this process deleted, remembered so one is not deleted twice (bounded).
MAX_DELETED_IDS = 4096


class E2Subscriber:
    """Keeps one KPM subscription per connected E2 node; :meth:`step` is a worker's step.

    Thread use: :meth:`step` and :meth:`stop` run on the worker's (or the stopping) thread,
    :meth:`on_response` on the HTTP server's threads, :meth:`view` on any; one lock guards the
    per-node state, and no HTTP request is made while holding it.
    """

    def __init__(self, settings: E2SubscribeSettings, nodes: NodeSource, book: SubscriptionBook,
                 *, api: SubmgrApi | None = None, ids: IdStore | None = None,
                 encoder: Encoder | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 records: NodeRecords | None = None, owner: str = "",
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        #: Waits between DELETE attempts at stop (tests advance their clock with it).
        self._sleep = sleep
        #: Ids deleted by this process (oldest first), so none is deleted twice.
        self._deleted: dict[str, None] = {}
        #: Stale ids submgr was still busy with -> (attempts, when to try again).
        self._retry_delete: dict[str, tuple[int, float]] = {}
        #: Shared per-node records (None: no other replica can leave one of ours behind).
        self._records = records
        self.owner = owner
        #: The node of each subscription this process made, until deleted (clears its record).
        self._sid_node: dict[str, str] = {}
        self.book = book
        self._nodes = nodes
        self._api: SubmgrApi = api if api is not None else SubmgrClient(
            settings.submgr_url, settings.http_timeout_s)
        self._ids: IdStore = ids if ids is not None else MemoryIdStore()
        self._detail_maker = DetailMaker(settings,
                                         encoder if encoder is not None else CodecEncoder())
        self._clock = clock
        self._lock = threading.Lock()
        self._subs: dict[str, NodeState] = {}
        self._early: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._stale: set[str] | None = None  # None: not loaded from the id store yet
        self.counters: dict[str, int] = {}
        self._counters_lock = threading.Lock()
        self._budget = MAX_REQUESTS_PER_STEP
        self.nodes_seen: list[E2Node] = []

    # --- counters -----------------------------------------------------------------------------

    def _count(self, event: str, n: int = 1) -> None:
        with self._counters_lock:  # HTTP threads and the worker count concurrently
            self.counters[event] = self.counters.get(event, 0) + n

    def counts(self) -> dict[str, int]:
        with self._counters_lock:
            return dict(self.counters)

    def _spend(self) -> bool:
        """One request of this step's budget; False when it is used up."""
        if self._budget <= 0:
            return False
        self._budget -= 1
        return True

    # --- the worker's step ----------------------------------------------------------------------

    def step(self) -> None:
        """Delete stale subscriptions, read the nodes, (re)subscribe what needs it."""
        self._budget = MAX_REQUESTS_PER_STEP
        self._delete_stale()
        nodes = self._nodes.nodes()
        now = self._clock()
        current = {n.inventory_name: n for n in nodes}
        to_delete: list[str] = []
        to_subscribe: list[NodeState] = []
        with self._lock:
            self.nodes_seen = nodes
            for name, sub in list(self._subs.items()):
                node = current.get(name)
                if node is None or not node.connected or node.kpm != sub.node.kpm:
                    why = ("gone from the RIC" if node is None else "disconnected"
                           if not node.connected else "changed its KPM function")
                    if sub.subscription_id is not None:
                        log.info("E2 node %s %s; subscription %s dropped", name, why,
                                 sub.subscription_id)
                        to_delete.append(self._forget(sub))
                    if node is None:
                        del self._subs[name]
                        continue
                    sub.node, sub.state, sub.last_error = node, "disconnected", why
                    sub.next_at, sub.backoff_s = now, 0.0
            for node in nodes:
                found = self._subs.get(node.inventory_name)
                if found is None:
                    found = self._subs[node.inventory_name] = NodeState(node, next_at=now)
                sub = found
                sub.node = node
                if not node.connected:
                    sub.state = "disconnected"
                    continue
                if node.kpm is None:
                    sub.state, sub.last_error = "unusable", "no supported KPM RAN function"
                    continue
                if sub.state == "pending" and now - sub.requested_at > \
                        self.settings.response_timeout_s:
                    self._count("response_timeouts")
                    self._fail(sub, f"no answer from submgr within "
                                    f"{self.settings.response_timeout_s:.0f} s", now)
                    to_delete.append(self._forget(sub))
                if sub.state in ("new", "failed", "disconnected") and now >= sub.next_at:
                    to_subscribe.append(sub)
            self._expire_early(now)
        for sid in to_delete:
            self._delete(sid)
        for sub in to_subscribe:
            if not self._spend():
                self._count("requests_deferred")
                continue  # still due: the next step asks
            self._subscribe(sub)

    def _forget(self, sub: NodeState) -> str:
        """Drop ``sub``'s subscription from the book; its id (to delete at submgr)."""
        sid = sub.subscription_id
        assert sid is not None
        self.book.remove_subscription(sid)
        sub.subscription_id = None
        sub.instances = {}
        return sid

    def _fail(self, sub: NodeState, error: str, now: float) -> None:
        s = self.settings
        sub.state, sub.last_error = "failed", error
        if submgr_busy(error) and sub.busy < MAX_BUSY_RETRIES:
            # submgr is still deleting at the node (ours, or what a previous run left): that
            # ends by itself within its E2 time-outs, so ask again soon, not later and later.
            sub.busy += 1
            self._count("submgr_busy")
            sub.backoff_s = s.retry_min_s
        else:
            sub.busy = 0
            sub.backoff_s = min(s.retry_max_s, max(s.retry_min_s, sub.backoff_s * 2))
        sub.next_at = now + sub.backoff_s
        log.warning("E2 subscription of node %s failed (%s); retry in %.0f s",
                    sub.node.inventory_name, error, sub.backoff_s)

    def _speaks(self, node: E2Node) -> tuple[str, str]:
        """(dialect, measurement table family) of ``node``: what its indications decoded with
        once one has (a resubscription then uses it), until then the description's guess."""
        kpm = node.kpm
        assert kpm is not None
        dialect = self.book.dialect(node.inventory_name, kpm.ran_function_id) or kpm.dialect
        return dialect, family_of(dialect, (m for ms in kpm.measurements.values() for m in ms),
                                  kpm.kpm_version)

    def _details(self, node: E2Node) -> list[Detail]:
        details, errors = self._detail_maker.make(node, *self._speaks(node))
        for error in errors:
            self._count("encode_errors")
            log.warning("E2 node %s: %s left out", node.inventory_name, error)
        return details

    def _subscribe(self, sub: NodeState) -> None:
        node = sub.node
        assert node.kpm is not None
        now = self._clock()
        try:
            details = self._details(node)
        except ValueError as exc:  # the codec cannot encode for this node's KPM version
            with self._lock:
                sub.state, sub.last_error = "unusable", f"cannot encode: {exc}"
            self._count("encode_errors")
            log.error("E2 node %s: %s", node.inventory_name, sub.last_error)
            return
        if not details:
            with self._lock:
                sub.state = "unusable"
                sub.last_error = ("the node offers none of the report styles "
                                  f"{list(self.settings.report_styles)} with the configured "
                                  "measurements")
            return
        self._detail_maker.warn_no_cell(node, details)
        if not self._take_over(sub, now):
            return
        params = subscription_params(self.settings, node, details)
        with self._lock:
            sub.attempts += 1
        self._count("requests")
        try:
            sid = self._api.subscribe(params)
        except SubmgrError as exc:
            self._count("request_errors")
            with self._lock:
                self._fail(sub, str(exc), now)
            return
        with self._lock:
            sub.subscription_id = sid
            sub.instances = {d.xapp_event_instance_id: InstanceState(d) for d in details}
            sub.state, sub.requested_at, sub.last_error = "pending", now, ""
            early = self._early.pop(sid, None)
            self._sid_node[sid] = node.inventory_name
        self._remember(sid)
        self._record(node.inventory_name, sid)
        log.info("E2 node %s: KPM v%d subscription %s requested (styles %s)",
                 node.inventory_name, node.kpm.kpm_version, sid,
                 [d.style for d in details])
        for instance in ([] if early is None else early[1]):
            self._apply(sid, instance)

    def _take_over(self, sub: NodeState, now: float) -> bool:
        """Delete at submgr the subscription the node's record names, if any, before this one
        subscribes it; False when that has to wait (the attempt then counts as failed).

        This process holds no subscription of the node while it subscribes, so a recorded one
        is another replica's (it died with it live, or lost the shard and has not deleted it
        yet) or a previous run's: submgr would otherwise keep delivering its indications."""
        if self._records is None:
            return True
        name = sub.node.inventory_name
        try:
            found = self._records.get(name)
        except Exception as exc:
            self._count("store_errors")
            with self._lock:
                self._fail(sub, f"the node's subscription record is not readable: {exc}", now)
            return False
        if found is None:
            return True
        with self._lock:
            done = found.subscription_id in self._deleted
            pending = found.subscription_id in (self._stale or ())
        if pending:
            # Already being deleted (a previous run's, submgr still busy with it): the delete
            # retries on its own schedule; subscribing now would collide with it.
            self._count("requests_deferred")
            with self._lock:
                sub.last_error = (f"waiting for submgr to delete subscription "
                                  f"{found.subscription_id} first")
            return False
        if done:
            # Deleted already (by _delete_stale: a previous run's id is in the id store and in
            # the node's record); a second DELETE would only race submgr's first one.
            self._clear_record(name, found)
            return True
        if not self._spend():
            self._count("requests_deferred")
            return False  # still due: the next step deletes, then subscribes
        try:
            self._api.unsubscribe(found.subscription_id)
        except SubmgrError as exc:
            self._count("delete_errors")
            with self._lock:
                self._fail(sub, f"subscription {found.subscription_id} of {found.owner or '?'} "
                                f"not deleted: {exc}", now)
            return False
        self._count("taken_over")
        self._mark_deleted(found.subscription_id)
        log.info("E2 node %s: deleted subscription %s that %s left", name,
                 found.subscription_id, found.owner or "a previous run")
        self._clear_record(name, found)
        return True

    def _clear_record(self, name: str, found: NodeSubscription) -> None:
        if self._records is None:
            return
        try:
            self._records.clear(name, found)
        except Exception as exc:  # the record written after subscribing replaces it anyway
            self._count("store_errors")
            log.warning("E2 node %s: clearing its subscription record failed: %s", name, exc)

    def _mark_deleted(self, sid: str) -> None:
        with self._lock:
            self._deleted[sid] = None
            while len(self._deleted) > MAX_DELETED_IDS:
                del self._deleted[next(iter(self._deleted))]

    def _record(self, node: str, sid: str) -> None:
        if self._records is None:
            return
        try:
            self._records.put(node, NodeSubscription(sid, self.owner))
        except Exception as exc:
            self._count("store_errors")
            log.error("E2 node %s: recording subscription %s failed (if this replica dies, the "
                      "node's next owner will not delete it): %s", node, sid, exc)

    # --- submgr's callback ----------------------------------------------------------------------

    def on_response(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """``POST /ric/v1/subscriptions/response``: (HTTP status, JSON answer).  Never raises.

        200 for every well-formed notification (also one for a subscription this process does
        not know: submgr would retry it ten times for nothing); 400 for a malformed one."""
        try:
            doc = bounded_json.loads(body, CALLBACK_LIMITS)
            sid, instances = parse_callback(doc)
        except ValueError as exc:
            self._count("callbacks_refused")
            log.warning("subscription callback refused: %s", exc)
            return 400, {"error": str(exc)}
        except Exception as exc:  # outside bytes: nothing gets out of here
            self._count("callbacks_refused")
            log.exception("subscription callback failed")
            return 400, {"error": f"{type(exc).__name__}"}
        self._count("callbacks")
        with self._lock:
            known = any(s.subscription_id == sid for s in self._subs.values())
            if not known:
                # The POST that made it may not have returned yet (submgr answers from a
                # goroutine): keep it for a while.
                if len(self._early) < MAX_EARLY_CALLBACKS:
                    entry = self._early.setdefault(sid, (self._clock(), []))
                    entry[1].extend(instances)
                self._count("callbacks_unknown")
                return 200, {}
        for instance in instances:
            self._apply(sid, instance)
        return 200, {}

    def _apply(self, sid: str, instance: dict[str, Any]) -> None:
        now = self._clock()
        to_delete: str | None = None
        with self._lock:
            sub = next((s for s in self._subs.values() if s.subscription_id == sid), None)
            if sub is None or sub.node.kpm is None:
                return
            inst = sub.instances.get(instance["xapp"])
            if inst is None:
                self._count("callbacks_unknown")
                return
            if instance["error"]:
                inst.error = instance["error"]
                self._count("instances_failed")
            else:
                inst.e2_instance_id, inst.error = instance["e2"], ""
                inst.note = instance["note"]
                if inst.note:
                    self._count("instances_partial")
                    log.warning("E2: subscription %s style %d active with submgr's note: %s",
                                sid, inst.detail.style, inst.note)
                kpm = sub.node.kpm
                dialect, family = self._speaks(sub.node)
                self.book.add(ActiveSubscription(
                    subscription_id=sid, node=sub.node.inventory_name,
                    request=RicRequestId(self.settings.requestor_id, instance["e2"]),
                    ran_function_id=kpm.ran_function_id, kpm_version=kpm.kpm_version,
                    report_style=inst.detail.style,
                    measurement_ids=dict(kpm.measurement_ids), dialect=dialect,
                    measurements=inst.detail.measurements,
                    cell=sub.node.cell if inst.detail.style in (1, 3) else None,
                    family=family,
                    prb_total=sub.node.prb_total, granularity_ms=self.settings.granularity_ms))
                self._count("instances_active")
            answered = [i for i in sub.instances.values() if i.e2_instance_id is not None
                        or i.error]
            if len(answered) < len(sub.instances):
                return
            ok = [i for i in sub.instances.values() if i.e2_instance_id is not None]
            errors = "; ".join(f"style {i.detail.style}: {i.error}"
                               for i in sub.instances.values() if i.error)
            if not ok:
                # Nothing usable: delete it at submgr and try again after a back-off.
                self._fail(sub, errors, now)
                to_delete = self._forget(sub)
            else:
                # A style the node refused is not retried while another one works.
                sub.state = "active" if not errors else "partial"
                sub.last_error, sub.backoff_s, sub.busy = errors, 0.0, 0
                log.info("E2 node %s: subscription %s %s (instances %s)%s",
                         sub.node.inventory_name, sid, sub.state,
                         [i.e2_instance_id for i in ok], f"; {errors}" if errors else "")
        if to_delete is not None:
            self._delete(to_delete, budgeted=False)  # on submgr's callback thread

    def _expire_early(self, now: float) -> None:
        for sid in [k for k, (t, _) in self._early.items() if now - t > EARLY_CALLBACK_S]:
            del self._early[sid]

    # --- deletion and persistence ---------------------------------------------------------------

    def _remember(self, sid: str) -> None:
        with self._lock:
            ids = {s.subscription_id for s in self._subs.values() if s.subscription_id}
            ids |= self._stale or set()
        ids.add(sid)
        try:
            self._ids.save(ids)
        except Exception as exc:
            self._count("store_errors")
            log.error("storing E2 subscription ids failed (a restart may leave %s at submgr): "
                      "%s", sid, exc)

    def _delete(self, sid: str, *, budgeted: bool = True) -> bool:
        return self._try_delete(sid, budgeted=budgeted) == "deleted"

    def _try_delete(self, sid: str, *, budgeted: bool = True) -> str:
        """"deleted", "busy" (400: submgr still handles its request; retried with back-off),
        "failed" or "deferred" (no request left in this step); what is not deleted stays
        stale, in the id store, for a later step or the next run."""
        if budgeted and not self._spend():
            with self._lock:  # deleted by a later step
                self._stale = (self._stale or set()) | {sid}
            return "deferred"
        try:
            self._api.unsubscribe(sid)
        except SubmgrBusy as exc:
            self._count("delete_busy")
            s = self.settings
            with self._lock:
                self._stale = (self._stale or set()) | {sid}
                attempts = self._retry_delete.get(sid, (0, 0.0))[0] + 1
                wait = min(s.retry_max_s, s.retry_min_s * 2 ** min(attempts - 1, 16))
                self._retry_delete[sid] = (attempts, self._clock() + wait)
            log.info("E2 subscription %s not deleted yet (%s); trying again in %.1f s", sid,
                     exc, wait)
            return "busy"
        except SubmgrError as exc:
            self._count("delete_errors")
            log.warning("deleting E2 subscription %s failed: %s", sid, exc)
            with self._lock:  # deleted at the next step (or by the next run)
                self._stale = (self._stale or set()) | {sid}
            return "failed"
        self._count("deletes")
        self._mark_deleted(sid)
        with self._lock:
            if self._stale is not None:
                self._stale.discard(sid)
            self._retry_delete.pop(sid, None)
            node = self._sid_node.pop(sid, None)
        if node is not None and self._records is not None:
            try:
                self._records.clear(node, NodeSubscription(sid, self.owner))
            except Exception as exc:
                self._count("store_errors")
                log.warning("E2 node %s: clearing its subscription record failed: %s", node, exc)
        with self._lock:
            ids = {s.subscription_id for s in self._subs.values() if s.subscription_id}
            ids |= self._stale or set()
        try:
            self._ids.save(ids)
        except Exception as exc:
            self._count("store_errors")
            log.error("storing E2 subscription ids failed: %s", exc)
        return "deleted"

    def _delete_stale(self) -> None:
        """Delete what a previous run (or a failed delete) left at submgr."""
        if self._stale is None:
            try:
                loaded = self._ids.load()
            except Exception as exc:
                self._count("store_errors")
                raise RuntimeError(f"E2 subscription ids not readable from SDL: {exc}") from exc
            with self._lock:
                self._stale = loaded
            if loaded:
                log.info("deleting %d E2 subscriptions a previous run left: %s", len(loaded),
                         sorted(loaded))
        now = self._clock()
        with self._lock:
            # One submgr is still busy with waits for its time (it ends by itself).
            stale = sorted(sid for sid in self._stale or ()
                           if self._retry_delete.get(sid, (0, now))[1] <= now)
        for sid in stale:
            if self._delete(sid):
                self._count("stale_deleted")

    def stop(self, timeout_s: float | None = None) -> None:
        """Delete every subscription this process made, one request at a time (each bounded by
        the client's timeout), starting none after ``timeout_s``: what is not deleted stays in
        SDL for the next run to delete, so a stop with many slow nodes still fits its grace
        period (overrunning it by one request at most)."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._lock:
            subs = [s for s in self._subs.values() if s.subscription_id is not None]
            ids = [self._forget(s) for s in subs]
            for s in subs:
                s.state = "stopped"
            # Kept as stale until deleted, so every save below still lists the ones not done.
            self._stale = (self._stale or set()) | set(ids)
        self.book.clear()
        for done, sid in enumerate(ids):
            if deadline is not None and self._clock() >= deadline:
                self._count("delete_deferred", len(ids) - done)
                log.warning("E2: no time left to delete %d subscriptions; the next start deletes "
                            "them", len(ids) - done)
                break
            self._delete_at_stop(sid, deadline)

    def _delete_at_stop(self, sid: str, deadline: float | None) -> None:
        """Delete ``sid``, again while submgr answers 400 (it is still handling the request
        that made it: stopped during set-up), a bounded number of times with doubling waits
        that end before ``deadline``; what is still not deleted stays in the id store."""
        wait = DELETE_RETRY_S
        for attempt in range(1, MAX_DELETE_ATTEMPTS + 1):
            if self._try_delete(sid, budgeted=False) != "busy":
                return
            left = None if deadline is None else deadline - self._clock()
            if attempt == MAX_DELETE_ATTEMPTS or (left is not None and left <= wait):
                break
            self._sleep(wait)
            wait *= 2
        log.warning("E2: submgr still busy with subscription %s; the next start deletes it", sid)

    # --- what /ric/v1/e2/subscriptions shows ------------------------------------------------------

    def view(self) -> dict[str, Any]:
        with self._lock:
            nodes = {name: node_state_view(name, sub, self.book)
                     for name, sub in sorted(self._subs.items())}
            stale = sorted(self._stale or ())
        counters = self.counts()
        return {"submgr_url": self.settings.submgr_url,
                "requestor_id": self.settings.requestor_id,
                "match_requestor": self.settings.match_requestor,
                "nodes": nodes, "stale": stale, "counters": counters,
                "unmatched_indications": self.book.misses}

    def states(self) -> dict[str, int]:
        """Nodes per subscription state (metrics)."""
        with self._lock:
            out: dict[str, int] = {}
            for sub in self._subs.values():
                out[sub.state] = out.get(sub.state, 0) + 1
        return out
