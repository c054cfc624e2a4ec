"""The RIC glue: ricxappframe's ``RMRXapp`` with A1, health checks and appmgr registration.

This is the only module that imports ``ricxappframe.rmr`` or ``ricxappframe.xapp_frame``, and it
does so inside :meth:`RmrGlue.start`, because importing them loads RMR's C library
(``librmr_si.so``), which only an image built with RMR has.  :func:`rmr_library_available` tells
whether it can load.

What the frame gets wrong for us, and what is done about it:

* ``post_init`` runs before ``RMRXapp`` has its dispatch table: callbacks are registered after
  the constructor returns, not in ``post_init``.
* ``stop()`` deregisters, then sleeps 10 s, then waits for the receive thread: :meth:`RmrGlue.stop`
  deregisters only if registered, never sleeps, and bounds every wait.
* Registration tries 5 times in 10 s and gives up (and crashes the thread when ``HOSTNAME`` or
  the ``SERVICE_*`` variables are missing): here it checks those variables first and says which
  one is missing, then retries with back-off until registered or stopped.
* ``rmr_wait_for_ready`` would block start-up until a route table arrives: we start at once and
  send ``A1_POLICY_QUERY`` from a thread as soon as RMR can route it.
* mdclogpy starts at ERROR: the frame's own logger gets our level.
* The frame's receive thread builds each payload from a tuple of one Python int per byte
  (``rmr.get_payload``): 60-80 ms for a 282 KiB A1 request, the interpreter lock held, and
  every message received behind it (a health check) waits for it.  :func:`_xapp_class` makes
  it one ``memcpy`` (:func:`_copy_payload`), for RIC indications too.
* The frame's one dispatch thread runs every handler in turn, so one slow message holds up all
  the others: here it only routes.  A1 requests go through a bounded queue to their own
  supervised worker (:class:`~xapp.core.workers.QueueWorker`); RIC indications through a
  bounded queue to the E2 decoder process
  (:class:`~xapp.adapters.e2.decoder_process.DecoderProcess`, what ``mcw run`` uses: decoding
  holds no lock of this interpreter) or, given a plain callable, to a worker thread; health
  checks are answered on the dispatch thread at once.  A
  full queue drops the message and counts it (an A1 request dropped so is answered ERROR,
  naming its instance).
* The frame's SDL client is the in-memory fake: the xApp's state goes through
  :mod:`xapp.adapters.sdl`, which survives Redis going away; RIC health checks (100 -> 101)
  answer from that store's state.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from xapp.adapters.a1 import (
    A1_POLICY_QUERY,
    A1_POLICY_REQ,
    A1_POLICY_RESP,
    A1Handler,
    A1Response,
    Status,
    query_message,
    scan_ids,
)
from xapp.core.workers import QueueWorker, Worker, WorkerStatus

log = logging.getLogger(__name__)

RMR_LIBRARY = "librmr_si.so"
RIC_HEALTH_CHECK_REQ = 100
RIC_HEALTH_CHECK_RESP = 101
#: E2AP RIC Indication, as the E2 termination forwards it (RIC_INDICATION in RMR's message types).
RIC_INDICATION = 12050
#: RMR_ERR_RETRY: the send may succeed if tried again (transient back-pressure).
_RMR_ERR_RETRY = 10
#: Keys of the frame's message summary (``rmr.RMR_MS_*``), here so that routing a message
#: needs no RMR library (the in-process tests drive :meth:`RmrGlue.dispatch` without one).
MS_PAYLOAD = "payload"
MS_MEID = "meid"
MS_MSG_TYPE = "message type"
#: A1 requests waiting for the A1 worker: the mediator sends one per instance, and resends all
#: of them after ``A1_POLICY_QUERY``.
A1_QUEUE = 256
#: RIC indications waiting for the E2 worker (one granularity period of a few hundred nodes).
E2_QUEUE = 1024


class IndicationHandoff(Protocol):
    """Where RIC indications go from the dispatch thread: a bounded queue that never blocks
    (:class:`~xapp.adapters.e2.decoder_process.DecoderProcess`, or a :class:`QueueWorker`)."""

    maxsize: int

    @property
    def dropped(self) -> int: ...

    def offer(self, item: tuple[bytes, str | None]) -> bool: ...

    def pending(self) -> int: ...

    def status(self) -> WorkerStatus: ...

    def start(self) -> Any: ...

    def stop(self, timeout_s: float = 5.0) -> bool: ...

    def workers(self) -> list[Worker]: ...


def rmr_library_available() -> tuple[bool, str]:
    """Whether ``librmr_si.so`` loads here, and if not, why (for logs and test skips)."""
    try:
        ctypes.CDLL(RMR_LIBRARY)
    except OSError as exc:
        return False, (f"{RMR_LIBRARY} cannot be loaded ({exc}); install RMR's runtime library "
                       "(the O-RAN SC rmr package) or point LD_LIBRARY_PATH at it")
    return True, ""


def registration_env_missing(environ: dict[str, str] | None = None,
                             namespace: str = "ricxapp") -> list[str]:
    """Environment variables the frame's appmgr registration needs and that are not set."""
    env = dict(os.environ) if environ is None else environ
    host = env.get("HOSTNAME", "")
    if not host:
        return ["HOSTNAME"]
    missing = []
    for kind in ("HTTP", "RMR"):
        key = f"SERVICE_{namespace}_{host}_{kind}_PORT".upper().replace("-", "_")
        if not env.get(key):
            missing.append(key)
    return missing


def appmgr_register_body(config: Mapping[str, Any], *, hostname: str, replica_id: str,
                         http_endpoint: str, rmr_endpoint: str) -> dict[str, Any]:
    """The body of the appmgr's ``POST /ric/v1/register`` for this pod.

    The frame sends ``appName`` = ``$HOSTNAME`` and ``appInstanceName`` = the descriptor's
    name; the chart gives every pod the xApp name as hostname, so N pods register one entry and
    the first to deregister removes it for all.  The appmgr keys its entries by
    ``[appName][appInstanceName]`` and derives an instance's RMR route endpoint from
    ``appInstanceName`` (``service-ricxapp-<appInstanceName>-rmr.ricxapp``, ric-plt-appmgr
    ``pkg/restful/restful.go`` ``FillInstanceData``).  So the instance name must stay the xApp
    name, the one Service that exists (a pod name there would make rtmgr route A1 to a Service
    that does not), and the pod tells itself apart by ``appName``: ``replica_id`` (the pod
    name) when given, else ``hostname`` as the frame does.  rtmgr keys endpoints by
    address, so N entries naming one Service are one route endpoint."""
    return {
        "appName": replica_id or hostname,
        "appVersion": config.get("version"),
        "configPath": "",
        "appInstanceName": config.get("name"),
        "httpEndpoint": http_endpoint,
        "rmrEndpoint": rmr_endpoint,
        "config": json.dumps(dict(config)),
    }


def appmgr_deregister_body(config: Mapping[str, Any], *, hostname: str,
                           replica_id: str) -> dict[str, Any]:
    """``POST /ric/v1/deregister``: removes exactly the entry :func:`appmgr_register_body`
    made, and with a replica id no other pod's."""
    return {"appName": replica_id or hostname, "appInstanceName": config.get("name")}


class RmrGlue:
    """Owns the ``RMRXapp``: A1 requests, health checks, the start-up query, registration.

    Parameters
    ----------
    a1 : A1Handler
        Applies ``A1_POLICY_REQ``; its response goes back by RTS as ``A1_POLICY_RESP``.
    healthy : callable
        The answer to ``RIC_HEALTH_CHECK_REQ`` besides RMR itself (SDL reachable), and the
        condition for registering with the appmgr.
    port : int, default=4560
        RMR data port.
    on_config_event : callable, default=None
        Called when the frame's inotify watch sees ``CONFIG_FILE`` change.
    on_query_sent : callable, default=None
        Called once ``A1_POLICY_QUERY`` is sent (starts the A1 resync).
    log_level : int, default=logging.INFO
        Level for the frame's own mdclogpy logger.
    query_retry_s : float, default=2.0
        Interval between attempts to send ``A1_POLICY_QUERY`` until one succeeds.
    indications : IndicationHandoff, default=None
        Takes the payload and the sending E2 node's name (RMR meid, None when the message has
        none) of every ``RIC_INDICATION`` (12050): ``mcw run`` gives the E2 decoder process
        (:class:`~xapp.adapters.e2.decoder_process.DecoderProcess`); started, stopped and
        supervised with the glue's workers.
    on_indication : callable, default=None
        Instead of ``indications``: called with the same in a worker thread of this process,
        ``mcw-e2-indications`` (tests; its decoding holds this interpreter's lock).  Neither
        given: 12050 is not registered.
    a1_queue, e2_queue : int
        Room in the queues in front of the A1 and the indication workers; what arrives when
        one is full is dropped and counted (``dropped`` in ``/ric/v1/health/alive`` and
        ``mcw_worker_queue_dropped``).
    replica_id : str, default=""
        With several replicas, this pod's id (the pod name): its own appmgr entry, so one
        pod's deregistration leaves the others registered (:func:`appmgr_register_body`).
        Empty: the frame's registration (one entry under ``$HOSTNAME``).
    http_endpoint : str, default=""
        With ``replica_id``, this pod's own ``host:port`` as the entry's HTTP endpoint (the
        appmgr drops from its SDL list every entry of the same endpoint when one registers).
        Empty: the xApp's HTTP Service, as the frame finds it.
    """

    def __init__(self, a1: A1Handler, healthy: Callable[[], bool], *, port: int = 4560,
                 on_config_event: Callable[[], object] | None = None,
                 on_query_sent: Callable[[], object] | None = None,
                 log_level: int = logging.INFO, query_retry_s: float = 2.0,
                 on_indication: Callable[[bytes, str | None], None] | None = None,
                 indications: IndicationHandoff | None = None,
                 a1_queue: int = A1_QUEUE, e2_queue: int = E2_QUEUE,
                 replica_id: str = "", http_endpoint: str = "") -> None:
        self.a1 = a1
        self.replica_id = replica_id
        self.http_endpoint = http_endpoint
        self._on_indication = on_indication
        self._on_query_sent = on_query_sent
        self._healthy = healthy
        self.port = port
        self._on_config_event = on_config_event
        self._log_level = log_level
        self._query_retry_s = query_retry_s
        self._xapp: Any = None
        self._stop = threading.Event()
        #: Dispatches received messages to the handlers; made by :meth:`start`.
        self.dispatcher: Worker | None = None
        self.query_worker = Worker("mcw-a1-query", self._send_query, query_retry_s,
                                   deadline_s=60.0)
        self.query_sent = threading.Event()
        #: The policy types whose A1_POLICY_QUERY went out.
        self._queried: set[int] = set()
        #: Applies A1 requests and answers them by RTS, off the dispatch thread.
        self.a1_worker: QueueWorker[tuple[bytes, Any]] = QueueWorker(
            "mcw-a1", self._answer_a1, maxsize=a1_queue, deadline_s=10.0)
        #: Decodes RIC indications, off the dispatch thread (None without either).
        self.e2_worker: IndicationHandoff | None = indications
        if indications is not None and on_indication is not None:
            raise ValueError("give indications or on_indication, not both")
        if on_indication is not None:
            self.e2_worker = QueueWorker("mcw-e2-indications", self._ingest, maxsize=e2_queue,
                                         deadline_s=30.0)
        self.registered = False
        #: Messages whose handler failed outside the A1 handler (RTS errors), answered or not.
        self.callback_errors = 0

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Initialise RMR on ``port`` and start dispatching; raises OSError without RMR."""
        cls = _xapp_class()
        self._xapp = cls(glue=self, default_handler=_default_handler,
                         config_handler=self._config_handler, rmr_port=self.port,
                         rmr_wait_for_ready=False, use_fake_sdl=True)
        self.start_handlers()
        # Our own dispatch loop, a supervised worker (see McwRmrXapp.run); rmr_timeout bounds
        # how long stop() waits for it.
        self._xapp.run(thread=True, rmr_timeout=0.5)
        self.query_worker.start()
        log.info("RMR started on port %d", self.port)

    def start_handlers(self) -> None:
        """Start the A1 and indication workers (:meth:`start` does; tests without RMR too)."""
        for worker in (self.a1_worker, self.e2_worker):
            if worker is not None:
                worker.start()

    def callbacks(self) -> dict[int, Callable[[Any, dict[str, Any], Any], None]]:
        """Message type -> handler, each quick: it answers or hands over, never works."""
        table: dict[int, Callable[[Any, dict[str, Any], Any], None]] = {
            A1_POLICY_REQ: self._on_a1_request, RIC_HEALTH_CHECK_REQ: self._on_health_check}
        if self.e2_worker is not None:
            table[RIC_INDICATION] = self._on_ric_indication
        return table

    def dispatch(self, xapp: Any, summary: dict[str, Any], sbuf: Any) -> None:
        """Route one received message (one step of the dispatch worker)."""
        handler = self.callbacks().get(summary.get(MS_MSG_TYPE, -1), _default_handler)
        handler(xapp, summary, sbuf)

    def workers(self) -> list[Worker]:
        """The threads this glue owns, for the supervisor (the dispatch loop, the query, the
        A1 and indication workers)."""
        e2 = [] if self.e2_worker is None else self.e2_worker.workers()
        return [w for w in (self.dispatcher, self.query_worker, self.a1_worker, *e2)
                if w is not None]

    def rmr_healthy(self) -> bool:
        """RMR's receive thread is running and not stuck."""
        x = self._xapp
        return x is not None and not self._stop.is_set() and bool(x._rmr_loop.healthcheck())

    def stop(self, timeout_s: float = 8.0) -> None:
        """Deregister (if registered), stop dispatching and close RMR, within ``timeout_s``."""
        self._stop.set()
        x = self._xapp
        deadline = time.monotonic() + timeout_s
        if x is None:
            self._stop_handlers(deadline)
            return
        x._keep_registration = False
        x._keep_going = False
        self.query_worker.stop(timeout_s=1.0)
        if self.dispatcher is not None:
            self.dispatcher.stop(timeout_s=max(0.0, deadline - time.monotonic()))
        handlers_stopped = self._stop_handlers(deadline)
        if self.registered:
            try:
                x.deregister()
            except Exception as exc:
                log.warning("appmgr deregistration failed: %s", exc)
        loop = x._rmr_loop
        loop._keep_going = False
        # The frame's receive thread waits up to 5 s in rmr_torcv_msg; closing the context under
        # it would crash, so wait for it (bounded) and close only when it has finished.
        loop._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if loop._thread.is_alive() or not handlers_stopped:
            # An A1 answer may still be on its way out of the A1 worker: same rule.
            log.warning("RMR receive thread or a handler still running at shutdown; context "
                        "left open")
            return
        from ricxappframe.rmr import rmr

        rmr.rmr_close(loop.mrc)
        log.info("RMR stopped")

    def _stop_handlers(self, deadline: float) -> bool:
        """Stop the A1 and indication workers; False if one is still in a step."""
        stopped = True
        for worker in (self.a1_worker, self.e2_worker):
            if worker is not None:
                stopped &= worker.stop(
                    timeout_s=max(0.0, min(1.0, deadline - time.monotonic())))
        # A1 requests never handled hold RMR buffers; the mediator resends after the restart.
        for _payload, sbuf in self.a1_worker.drain():
            self._free(sbuf)
        return stopped

    # --- handlers (run in the dispatch thread: quick, and catch everything) --------------------

    # An exception out of a callback would cost the dispatch step, and a slow one holds every
    # message behind it: each handler answers at once or hands over to a worker.

    def _on_a1_request(self, xapp: Any, summary: dict[str, Any], sbuf: Any) -> None:
        try:
            payload = bytes(summary.get(MS_PAYLOAD) or b"")
            if self.a1_worker.offer((payload, sbuf)):
                return
            # Full: answer at once, so the mediator knows, naming the instance when the
            # request's first bytes carry it (a bounded scan, not a parse).
            type_id, iid = scan_ids(payload)
            log.error("A1 request for policy instance %r dropped: %d requests waiting",
                      iid, self.a1_worker.maxsize)
            busy = A1Response(type_id or self.a1.default_type_id, iid,
                              self.a1.handler_id, Status.ERROR)
            self._rts(sbuf, busy.encode(), A1_POLICY_RESP)
        except Exception:
            self.callback_errors += 1
            log.exception("A1 request could not be answered")
            self._free(sbuf)

    def _answer_a1(self, item: tuple[bytes, Any]) -> None:
        payload, sbuf = item
        try:
            response = self.a1.handle(payload)  # never raises
            self._rts(sbuf, response.encode(), A1_POLICY_RESP)
        except Exception:
            self.callback_errors += 1
            log.exception("A1 request could not be answered")
            self._free(sbuf)

    def _on_health_check(self, xapp: Any, summary: dict[str, Any], sbuf: Any) -> None:
        try:
            # OK only while A1 requests can be handled: an A1 worker held by a stuck request
            # (or dead) is as broken as a dead dispatch thread.  Reading its state never waits.
            ok = self.frame_healthy() and self.a1_worker.status().healthy
            payload = b"OK\n" if ok else b"ERROR [RMR, SDL or A1 handling is unhealthy]\n"
            self._rts(sbuf, payload, RIC_HEALTH_CHECK_RESP)
        except Exception:
            self.callback_errors += 1
            log.exception("RIC health check could not be answered")
            self._free(sbuf)

    def _on_ric_indication(self, xapp: Any, summary: dict[str, Any], sbuf: Any) -> None:
        try:
            payload = bytes(summary.get(MS_PAYLOAD) or b"")
            raw_meid = summary.get(MS_MEID) or b""
            meid = raw_meid.decode("utf-8", "replace") if isinstance(raw_meid, bytes) \
                else str(raw_meid)
            worker = self.e2_worker
            if worker is not None and not worker.offer((payload, meid or None)) \
                    and worker.dropped & (worker.dropped - 1) == 0:  # 1, 2, 4, ...: no log flood
                log.warning("RIC indication dropped: %d waiting to be decoded (%d dropped)",
                            worker.maxsize, worker.dropped)
        except Exception:
            self.callback_errors += 1
            log.exception("RIC indication could not be handled")
        finally:
            self._free(sbuf)

    def _ingest(self, item: tuple[bytes, str | None]) -> None:
        if self._on_indication is not None:
            self._on_indication(*item)

    def _free(self, sbuf: Any) -> None:
        try:
            from ricxappframe.rmr import rmr

            rmr.rmr_free_msg(sbuf)
        except Exception:
            log.debug("freeing an RMR buffer failed", exc_info=True)

    def _config_handler(self, xapp: Any, config: Any) -> None:
        try:
            if self._on_config_event is not None:
                self._on_config_event()
        except Exception:
            log.exception("config change handling failed")

    def frame_healthy(self) -> bool:
        """What the frame calls ``healthcheck``: RMR and SDL."""
        try:
            return self.rmr_healthy() and bool(self._healthy())
        except Exception:
            log.debug("health check raised", exc_info=True)
            return False

    def _rts(self, sbuf: Any, payload: bytes, mtype: int) -> bool:
        """Return to sender with a new payload and type; frees the buffer in every case."""
        from ricxappframe.rmr import rmr

        mrc = self._xapp._mrc
        if rmr.rmr_payload_size(sbuf) < len(payload):
            sbuf = rmr.rmr_realloc_payload(sbuf, len(payload), False)
        sbuf = rmr.rmr_rts_msg(mrc, sbuf, payload=payload, mtype=mtype)
        for _ in range(20):
            if sbuf.contents.state != _RMR_ERR_RETRY:
                break
            time.sleep(0.01)
            sbuf = rmr.rmr_rts_msg(mrc, sbuf)
        ok = sbuf.contents.state == 0
        if not ok:
            log.error("RMR return-to-sender of type %d failed (state %d)", mtype,
                      sbuf.contents.state)
        rmr.rmr_free_msg(sbuf)
        return bool(ok)

    def _send_query(self) -> None:
        """Send ``A1_POLICY_QUERY`` for each policy type once RMR can route it, so the mediator
        resends the instances (one attempt per type and step of :attr:`query_worker`, which
        stops once every type's is sent)."""
        from ricxappframe.rmr import rmr

        if self.query_sent.is_set() or self._stop.is_set():
            self.query_worker.stop()
            return
        x = self._xapp
        for type_id in self.a1.type_ids:
            if type_id in self._queried or not rmr.rmr_ready(x._mrc):
                continue
            if x.rmr_send(query_message(type_id), A1_POLICY_QUERY, retries=5):
                self._queried.add(type_id)
                log.info("A1_POLICY_QUERY sent for policy type %d", type_id)
        if self._queried >= set(self.a1.type_ids):
            self.query_sent.set()
            if self._on_query_sent is not None:
                self._on_query_sent()
            self.query_worker.stop()


def _copy_payload(mbuf: Any) -> bytes:
    """The payload of an RMR message buffer (``rmr_mbuf_t*``) as bytes, in one copy."""
    length = int(mbuf.contents.len)
    return ctypes.string_at(mbuf.contents.payload, length) if length > 0 else b""


def _default_handler(xapp: Any, summary: dict[str, Any], sbuf: Any) -> None:
    log.warning("RMR message of unexpected type %s ignored", summary.get(MS_MSG_TYPE))
    xapp.rmr_free(sbuf)


def _plt_namespace() -> str:
    from ricxappframe.util.constants import Constants

    return os.environ.get("PLT_NAMESPACE") or str(Constants.DEFAULT_PLT_NS)


def _xapp_class() -> type:
    """The frame's ``RMRXapp`` with the fixes listed in the module docstring (imports RMR)."""
    import requests
    from mdclogpy import Level
    from ricxappframe.rmr import rmr
    from ricxappframe.util.constants import Constants
    from ricxappframe.xapp_frame import RMRXapp

    # The frame's receive thread summarises every message with rmr.message_summary, which
    # looks get_payload up in its module at each call: replaced before RmrLoop starts.
    rmr.get_payload = _copy_payload

    class McwRmrXapp(RMRXapp):  # type: ignore[misc]
        def __init__(self, glue: RmrGlue, **kwargs: Any) -> None:
            # Set before the base constructor: it starts the registration thread.
            self._glue = glue
            self._wake = glue._stop
            super().__init__(**kwargs)
            level = {logging.DEBUG: Level.DEBUG, logging.INFO: Level.INFO,
                     logging.WARNING: Level.WARNING}.get(glue._log_level, Level.ERROR)
            self.logger.set_level(level)

        def healthcheck(self) -> bool:
            return self._glue.frame_healthy()

        def run(self, thread: bool = True, rmr_timeout: float = 0.5,
                inotify_timeout: int = 0) -> None:
            # The frame's own loop runs in an anonymous thread that nobody can watch and that
            # ends with the first exception out of a handler; this one is a supervised worker
            # with the same body, one message (or timeout) per step.
            self._glue.dispatcher = Worker("mcw-rmr-dispatch",
                                           lambda: self._dispatch_one(rmr_timeout), 0.0,
                                           deadline_s=30.0).start()

        def _dispatch_one(self, timeout_s: float) -> None:
            try:
                summary, sbuf = self._rmr_loop.rcv_queue.get(block=True, timeout=timeout_s)
            except queue.Empty:
                pass
            else:
                self._glue.dispatch(self, summary, sbuf)
            for _event in self.config_check(timeout=0):
                self._config_handler(self, None)

        def registerXapp(self) -> None:
            missing = registration_env_missing(
                namespace=(self._config_data or {}).get("APP_NAMESPACE")
                or Constants.DEFAULT_XAPP_NS)
            if missing:
                log.warning("not registering with the appmgr: %s not set (the Helm chart sets "
                            "them; outside a RIC this is expected)", ", ".join(missing))
                return
            delay = 2.0
            while self._keep_registration and not self._wake.wait(delay):
                delay = min(delay * 2, 30.0)
                if not self.healthcheck():
                    log.info("not registering yet: RMR or SDL not healthy")
                    continue
                if self.register() is True:
                    self._glue.registered = True
                    log.info("registered with the appmgr")
                    return
                log.warning("appmgr registration failed; retrying in %.0f s", delay)

        def register(self) -> bool:
            # The frame's body, with this pod's own entry (appmgr_register_body).
            hostname = os.environ.get("HOSTNAME", "")
            config = self._config_data or {}
            http = self.get_service(hostname, Constants.SERVICE_HTTP)
            rmr_ep = self.get_service(hostname, Constants.SERVICE_RMR)
            if not http or not rmr_ep:
                log.warning("appmgr registration: the xApp's Service endpoints are not known "
                            "(http %r, rmr %r)", http, rmr_ep)
                return False
            body = appmgr_register_body(
                config, hostname=hostname, replica_id=self._glue.replica_id,
                http_endpoint=(self._glue.http_endpoint if self._glue.replica_id
                               and self._glue.http_endpoint else http),
                rmr_endpoint=rmr_ep)
            log.info("registering with the appmgr as %s/%s", body["appName"],
                     body["appInstanceName"])
            return self.do_post(_plt_namespace(), Constants.REGISTER_PATH, body)

        def deregister(self) -> bool:
            body = appmgr_deregister_body(self._config_data or {},
                                          hostname=os.environ.get("HOSTNAME", ""),
                                          replica_id=self._glue.replica_id)
            return self.do_post(_plt_namespace(), Constants.DEREGISTER_PATH, body)

        def do_post(self, plt_namespace: str, url: str, msg: dict[str, Any]) -> bool:
            # The frame posts without a timeout; a hanging appmgr must not hang shutdown.
            try:
                resp = requests.post(url.format(plt_namespace, plt_namespace), json=msg,
                                     timeout=5)
            except requests.RequestException as exc:
                log.warning("appmgr request failed: %s", exc)
                return False
            return resp.status_code in (200, 201)

        def xapp_shutdown(self) -> None:
            # The frame sleeps 10 s here; RmrGlue.stop deregisters without sleeping.
            if self._glue.registered:
                self.deregister()

    return McwRmrXapp
