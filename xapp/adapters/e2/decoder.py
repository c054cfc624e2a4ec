"""RIC indications decoded in a process of their own, so that A1 never waits for pycrate.

E2AP and E2SM-KPM are decoded by pycrate, pure Python: a 100-UE format 3 indication holds the
interpreter lock for about 25 ms, a hostile 64 KiB one for about 280 ms, and a thread of the
xApp's process (the A1 worker, the health check) that needs the lock meanwhile waits.  With
the decoding on a worker thread, A1's p99 round trip went from 0.4 ms idle to 6-10 ms while
indications arrived at 10,000 UE measurements/s (issue 21).  So it runs in a child process::

    RMR dispatch thread --offer--> bounded queue --mcw-e2-decoder-feed--> pipe
        --> decoder process: IndicationDecoder (E2AP, the book's copy, KPM dialect detection)
        --> pipe (JSON) --> mcw-e2-decoder thread: KpmIngest.apply (match, map, intake)

The process knows nothing but bytes in and plain data out: the main process sends it, on one
pipe, its copy of the subscription book (:meth:`SubscriptionBook.decode_view`, again whenever
the book's version moved) and each indication (node name + payload, framed, never pickled);
it answers each with one :class:`Decoded` as JSON, which the main process parses with
``json`` (no ``pickle`` of anything a node sent) and checks field by field before building
records.  Mapping to CPEs, counting and the intake stay in the main process (the registry and
the measurement tables live there); that costs ~1 ms of the main interpreter per 100-UE
indication.

Supervision (:class:`DecoderProcess`, a :class:`~xapp.core.workers.Worker`):

* **full queue**: the indication is dropped and counted (``drops["queue_full"]``, the
  worker's ``dropped``).
* **dead** process: the worker's state is ``dead``; the supervisor's next check (its own
  thread, every second) starts a new one, within its restart budget; readiness fails until
  the new process has loaded its codecs.  Meanwhile indications wait in the queue (the
  feeder sends only to a process that is ready), and those the dead process was sent and did
  not answer are sent again to the new one, all but the first: the one it was decoding,
  which may be what killed it, is dropped and counted (``drops["decoder_lost"]``).  So a
  death costs at most one indication.
* **restart budget spent** (the supervisor's, for ``"e2"``): E2 is degraded, not the pod;
  what waits and what arrives is dropped and counted (``drops["decoder_down"]``) until the
  budget has room again.
* **stuck** process (one indication decoding longer than ``decode_deadline_s``, or no
  answer to start-up within ``start_timeout_s``): state ``stuck``, then the process is killed
  (a process can be, a thread cannot) and is dead as above.

:class:`IndicationDecoder` is the decoding half of :class:`~xapp.adapters.e2.ingest.KpmIngest`
(which runs it in-process in :meth:`KpmIngest.handle`, for tests and tools): the same code
runs in the child against :class:`BookCopy`.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from xapp.adapters.e2 import aper, e2ap, kpm_decode
from xapp.adapters.e2.records import (
    ActiveSubscription,
    E2DecodeError,
    KpmIndication,
    KpmReport,
    RicRequestId,
    UeId,
)
from xapp.core.workers import Worker, WorkerState, WorkerStatus

log = logging.getLogger(__name__)

#: An indication of 1,000 UEs with a dozen measurements each is some tens of KiB; RMR's own
#: default maximum message is 4 KiB unless the route is configured larger.
MAX_PAYLOAD: Final = 1 << 20
#: Indications waiting for the decoder process (one granularity period of a few hundred nodes).
QUEUE: Final = 1024
#: Largest answer read from the decoder process (a 64 KiB indication gives at most a few MiB
#: of JSON); a larger one is refused by the process itself, as ``internal_errors``.
MAX_RESULT_BYTES: Final = 16 << 20
#: Reasons an indication is dropped before it is decoded.
DROP_REASONS: Final = ("queue_full", "decoder_down", "decoder_lost")
#: Outcomes the decoding half gives (the rest of :data:`~xapp.adapters.e2.ingest.OUTCOMES`
#: are the main process's): "decoded", or the reason it was refused.
DECODE_OUTCOMES: Final = ("decoded", "refused_empty", "refused_too_large", "refused_e2ap",
                          "refused_insert", "refused_unknown_subscription",
                          "refused_wrong_node", "refused_kpm", "internal_errors")
#: Dialect detection: "" (the remembered dialect read it), "checked" (every dialect was
#: tried), "skipped" (a recent check failed, so only the assumed one was).
CHECKS: Final = ("", "checked", "skipped")
#: Indications written to a process and not yet answered; the feeder waits beyond.  What a
#: process that dies holds is sent again to the next, so this bounds what is kept to resend.
MAX_IN_FLIGHT: Final = 32
#: (node, RAN function) pairs whose failed dialect check is remembered; beyond, forgotten.
MAX_TRACKED_FUNCTIONS: Final = 4096

# Frames on the pipes: one kind byte, then the body.
_JOB: Final = b"I"  # main -> child: !HI (meid length, payload length) + meid + payload
_BOOK: Final = b"B"  # main -> child: the book's decode view, JSON
_READY: Final = b"R"  # child -> main: codecs loaded
_RESULT: Final = b"D"  # child -> main: one Decoded, JSON
_JOB_HEAD: Final = struct.Struct("!HI")
_MAX_MEID: Final = 1024
#: Largest book copy the process accepts (the main process's own data: thousands of
#: subscriptions with their measurement lists are a few MiB).
MAX_BOOK_BYTES: Final = 64 << 20


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
        were shipped, see :meth:`DecoderProcess.offer`)."""
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


# --- the wire: Decoded as JSON ------------------------------------------------------------------


def _ue_wire(ue: UeId | None) -> list[Any] | None:
    if ue is None:
        return None
    return [ue.amf_ue_ngap_id, ue.guami, ue.gnb_cu_ue_f1ap_id, ue.ran_ue_id, ue.c_rnti]


def encode_decoded(d: Decoded) -> bytes:
    """``d`` as compact JSON (the decoder process's answer).  Reports are columnar: each
    distinct list of measurement names once, each report ``[list index, values, UE, cell]``
    (every UE of a format 3 indication has the same names)."""
    kpm = d.kpm
    wire_kpm = None
    if kpm is not None:
        tables: dict[tuple[str, ...], int] = {}
        reports = []
        for r in kpm.reports:
            names = tuple(r.values)
            index = tables.setdefault(names, len(tables))
            reports.append([index, list(r.values.values()), _ue_wire(r.ue), r.cell])
        wire_kpm = [kpm.kpm_version, kpm.format, kpm.collect_start_ms, kpm.granularity_ms,
                    kpm.sender_name, kpm.dialect, list(tables), reports]
    doc: list[Any] = [
        d.outcome, d.detail,
        None if d.request is None else [d.request.requestor, d.request.instance],
        d.ran_function_id, d.meid, d.node, d.known, d.check, wire_kpm]
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


class WireError(ValueError):
    """An answer of the decoder process that is not a well-formed :class:`Decoded`."""


def _reject_constant(name: str) -> Any:
    raise WireError(f"{name} is not a number here")


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise WireError(f"{what}: expected an integer, got {type(v).__name__}")
    return v


def _opt_int(v: Any, what: str) -> int | None:
    return None if v is None else _int(v, what)


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise WireError(f"{what}: expected a string, got {type(v).__name__}")
    return v


def _opt_str(v: Any, what: str) -> str | None:
    return None if v is None else _str(v, what)


def _list(v: Any, what: str, n: int | None = None) -> list[Any]:
    if not isinstance(v, list) or (n is not None and len(v) != n):
        raise WireError(f"{what}: expected a list{'' if n is None else f' of {n}'}")
    return v


def _reports(tables: Any, items: Any) -> tuple[KpmReport, ...]:
    """The reports of an answer (see :func:`encode_decoded`), one loop with the checks
    inline: an indication of 100 UEs is read on the main interpreter."""
    names = []
    for table in _list(tables, "names"):
        if not isinstance(table, list) or any(n.__class__ is not str for n in table):
            raise WireError("names: expected lists of strings")
        names.append(table)
    out = []
    isfinite = math.isfinite
    for item in _list(items, "reports"):
        if not isinstance(item, list) or len(item) != 4:
            raise WireError("report: expected [names, values, UE, cell]")
        index, values, ue, cell = item
        if index.__class__ is not int or not 0 <= index < len(names):
            raise WireError("report: names index out of range")
        if not isinstance(values, list) or len(values) != len(names[index]):
            raise WireError("report values: one per name expected")
        for value in values:
            if value.__class__ not in (int, float) or not isfinite(value):
                raise WireError("report value: expected a finite number")
        uid = None
        if ue is not None:
            if not isinstance(ue, list) or len(ue) != 5:
                raise WireError("UE id: expected a list of 5")
            amf, guami, f1ap, ran, crnti = ue
            for v in (amf, f1ap, crnti):
                if v is not None and v.__class__ is not int:
                    raise WireError("UE id: expected integers")
            for v in (guami, ran):
                if v is not None and v.__class__ is not str:
                    raise WireError("UE id: expected strings")
            uid = UeId(amf, guami, f1ap, ran, crnti)
        if cell is not None and cell.__class__ is not str:
            raise WireError("cell: expected a string")
        out.append(KpmReport(dict(zip(names[index], values, strict=True)), uid, cell))
    return tuple(out)


def decode_decoded(data: bytes) -> Decoded:
    """The :class:`Decoded` the decoder process sent, every field's type checked; raises
    :class:`WireError` (nothing else) when it is not one."""
    try:
        doc = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}"[:300]) from None
    try:
        outcome, detail, request, fn, meid, node, known, check, kpm = _list(doc, "answer", 9)
        outcome = _str(outcome, "outcome")
        if outcome not in DECODE_OUTCOMES or check not in CHECKS:
            raise WireError(f"outcome {outcome!r} or check {check!r} unknown")
        if known is not None and known not in aper.DIALECTS:
            raise WireError(f"dialect {known!r} unknown")
        req = None
        if request is not None:
            requestor, instance = _list(request, "request", 2)
            req = RicRequestId(_int(requestor, "requestor"), _int(instance, "instance"))
        ind = None
        if kpm is not None:
            version, fmt, start, period, sender, dialect, tables, reports = _list(
                kpm, "KPM", 8)
            if dialect not in aper.DIALECTS:
                raise WireError(f"dialect {dialect!r} unknown")
            ind = KpmIndication(
                _int(version, "KPM version"), _int(fmt, "format"), _opt_int(start, "start"),
                _opt_int(period, "granularity"), _opt_str(sender, "sender"),
                _reports(tables, reports), dialect)
        if outcome == "decoded" and (ind is None or req is None):
            raise WireError("decoded without the indication")
        return Decoded(outcome, _str(detail, "detail"), req, _opt_int(fn, "RAN function"),
                       _opt_str(meid, "meid"), _str(node, "node"), ind, known, check)
    except (TypeError, ValueError) as exc:  # WireError is a ValueError; bad unpacking too
        if isinstance(exc, WireError):
            raise
        raise WireError(f"malformed answer: {exc}"[:300]) from None


# --- the decoder process ----------------------------------------------------------------------


class Frames:
    """Length-prefixed frames over one end of a pipe (``os.pipe``): no pickle, no
    ``multiprocessing``; a frame longer than the reader's limit ends the stream."""

    _HEAD: Final = struct.Struct("!I")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._closed = False

    def send(self, data: bytes) -> None:
        view = memoryview(self._HEAD.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]

    def poll(self, timeout_s: float) -> bool:
        return bool(select.select([self.fd], [], [], timeout_s)[0])

    def recv(self, limit: int) -> bytes:
        """One frame; EOFError at the end of the stream, OSError for one over ``limit``."""
        (n,) = self._HEAD.unpack(self._read(self._HEAD.size))
        if n > limit:
            raise OSError(f"frame of {n} bytes, more than {limit}")
        return self._read(n)

    def _read(self, n: int) -> bytes:
        parts, left = [], n
        while left:
            chunk = os.read(self.fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError("pipe closed")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.fd)


def serve(jobs: Frames, results: Frames, max_payload: int, recheck_interval_s: float) -> None:
    """The decoder process's body: book copies and indications in, one answer per indication
    out, until the job pipe closes (the main process stopped it, or is gone)."""
    aper.warm_up()
    book = BookCopy()
    decoder = IndicationDecoder(book, max_payload=max_payload,
                                recheck_interval_s=recheck_interval_s)
    results.send(_READY)
    while True:
        try:
            frame = jobs.recv(max(max_payload + _JOB_HEAD.size + _MAX_MEID + 1,
                                  MAX_BOOK_BYTES))
        except (EOFError, OSError):
            return
        kind, body = frame[:1], frame[1:]
        if kind == _BOOK:
            book.load(json.loads(body))
            continue
        if kind != _JOB:
            continue
        meid_len, size = _JOB_HEAD.unpack_from(body)
        start = _JOB_HEAD.size
        meid = body[start:start + meid_len].decode("utf-8", "replace") or None
        out = decoder.decode(body[start + meid_len:], meid, size=size)
        try:
            answer = encode_decoded(out)
        except ValueError as exc:  # a value JSON cannot carry: a bug, reported as such
            answer = encode_decoded(Decoded("internal_errors", f"answer not encodable: {exc}",
                                            meid=meid))
        if len(answer) + 1 > MAX_RESULT_BYTES:
            answer = encode_decoded(Decoded(
                "internal_errors", f"answer of {len(answer)} bytes, more than "
                f"{MAX_RESULT_BYTES}", meid=meid))
        try:
            results.send(_RESULT + answer)
        except OSError:
            return  # the main process is gone


def main(argv: list[str] | None = None) -> None:
    """Entry point of the decoder process (``python -c``, see :class:`_Child`): the two pipe
    file descriptors, the largest payload, the dialect recheck interval."""
    args = sys.argv[1:] if argv is None else argv
    jobs_fd, results_fd, max_payload, recheck_s = int(args[0]), int(args[1]), int(args[2]), \
        float(args[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    serve(Frames(jobs_fd), Frames(results_fd), max_payload, recheck_s)


class _Child:
    """One decoder process and its pipes; replaced as a whole when it dies.

    A new interpreter (not ``multiprocessing``: forking a threaded process is unsafe, and its
    spawn re-runs the main script), importing the same ``xapp`` as this one (its ``sys.path``
    goes first in ``PYTHONPATH``)."""

    def __init__(self, max_payload: int, recheck_interval_s: float) -> None:
        jobs_r, jobs_w = os.pipe()
        results_r, results_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [p for p in sys.path if p] + [p for p in env.get("PYTHONPATH", "").split(
                os.pathsep) if p])
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from xapp.adapters.e2.decoder import main; main()",
                 str(jobs_r), str(results_w), str(max_payload), str(recheck_interval_s)],
                pass_fds=(jobs_r, results_w), stdin=subprocess.DEVNULL, env=env)
        finally:
            # Our copies of the child's ends closed: a dead child makes writes fail, reads EOF.
            os.close(jobs_r)
            os.close(results_w)
        self.jobs, self.results = Frames(jobs_w), Frames(results_r)
        self.pid = self.process.pid
        self.started_at = time.monotonic()
        self.ready = False
        #: When the process last showed progress (ready, an answer, or work after none).
        self.progress_at = self.started_at
        #: Indications written to the pipe, and answers read back (each by one thread).
        self.sent = 0
        self.answered = 0
        #: What was sent and not answered yet, oldest first (the process answers in order).
        self.unanswered: collections.deque[tuple[bytes, str | None]] = collections.deque()
        self.book_version = -1
        self.closed = False
        #: Counted as lost and retired (:meth:`DecoderProcess._lost`).
        self.lost = False
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()

    def alive(self) -> bool:
        return not self.closed and self.process.poll() is None

    def in_flight(self) -> int:
        return 0 if self.closed else max(0, self.sent - self.answered)

    def send(self, frame: bytes) -> None:
        with self.send_lock:  # the job pipe is closed under this lock, never under a write
            if self.closed:
                raise OSError("decoder process retired")
            self.jobs.send(frame)

    def retire(self, timeout_s: float) -> None:
        """Close the job pipe (the process ends when it reads EOF), wait, then kill.  The
        result pipe is the reading thread's to close (:meth:`DecoderProcess._read_step`)."""
        self.closed = True
        if self.process.poll() is not None or timeout_s <= 0:
            self.process.kill()  # a write blocked on a full pipe then fails at once
        with self.send_lock:
            self.jobs.close()
        try:
            self.process.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5.0)


class DecoderProcess(Worker):
    """Decodes RIC indications in a child process for ``ingest`` (:class:`KpmIngest`); the
    answers are applied on this worker's thread (``mcw-e2-decoder``), the indications written
    to the process by its feeder (``mcw-e2-decoder-feed``).

    Hand it to :class:`~xapp.adapters.rmr.RmrGlue` as ``indications``; supervise
    :meth:`workers` (both threads).  :meth:`offer` is for RMR's thread, never blocks; the
    rest for the supervisor's.

    Parameters
    ----------
    ingest : KpmIngest
        Its book (the copy sent to the process), its limits, and :meth:`KpmIngest.apply`.
    maxsize : int, default=QUEUE
        Indications waiting to be sent to the process; one more is dropped and counted.
    decode_deadline_s : float, default=10.0
        How long the process may hold indications without answering one before it counts
        as stuck and is killed (a 64 KiB indication takes about 0.3 s).
    start_timeout_s : float, default=60.0
        How long a new process may take to load its codecs before it counts as stuck.
    """

    def __init__(self, ingest: Any, *, maxsize: int = QUEUE, decode_deadline_s: float = 10.0,
                 start_timeout_s: float = 60.0, name: str = "mcw-e2-decoder") -> None:
        if maxsize < 1:
            raise ValueError(f"the decoder's queue needs room for at least one item, "
                             f"got {maxsize}")
        self.ingest = ingest
        self.maxsize = maxsize
        self.decode_deadline_s = decode_deadline_s
        self.start_timeout_s = start_timeout_s
        self._items: queue.Queue[tuple[bytes, str | None]] = queue.Queue(maxsize)
        #: Sent to a process that died unanswered: sent again first (at most MAX_IN_FLIGHT).
        self._resend: collections.deque[tuple[bytes, str | None]] = collections.deque()
        #: Set while the current process is ready: the feeder waits on it, not on a timer.
        self._ready = threading.Event()
        #: Set at each answer: the feeder waits on it while MAX_IN_FLIGHT are out.
        self._answered = threading.Event()
        #: Why the supervisor gave up on the process (its restart budget), or None.
        self.degraded: str | None = None
        self._child: _Child | None = None
        self._child_lock = threading.RLock()
        #: Children replaced or killed whose result pipe the reading thread still closes.
        self._retired: list[_Child] = []
        #: Indications handed over, and dropped per reason (:data:`DROP_REASONS`).
        self.accepted = 0
        self.drops: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        #: Decoder processes started, and killed because they were stuck.
        self.processes_started = 0
        self.processes_killed = 0
        super().__init__(name, self._read_step, 0.0, deadline_s=30.0)
        self.feeder = Worker(f"{name}-feed", self._feed_step, 0.0, deadline_s=30.0)

    # --- what RMR's thread calls ----------------------------------------------------------

    def offer(self, item: tuple[bytes, str | None]) -> bool:
        """Queue one (payload, meid) for the process; False (and counted) when full, or
        when E2 is degraded (no process will come before the restart budget has room)."""
        if self.degraded is not None:
            self.drops["decoder_down"] += 1
            return False
        try:
            self._items.put_nowait(item)
        except queue.Full:
            self.drops["queue_full"] += 1
            return False
        self.accepted += 1
        return True

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())

    def pending(self) -> int:
        """Indications waiting to be sent, or sent and not yet answered."""
        child = self._child
        return (self._items.qsize() + len(self._resend)
                + (0 if child is None else child.in_flight()))

    def degrade(self, reason: str | None) -> None:
        """The supervisor's verdict (:meth:`Worker.degrade`): with ``reason``, what waits is
        dropped as ``decoder_down`` and so is what arrives; None: a process may come again."""
        self.degraded = reason

    # --- lifecycle ------------------------------------------------------------------------

    def workers(self) -> list[Worker]:
        return [self, self.feeder]

    def start(self) -> DecoderProcess:
        """Start the process (a new one if the last died or was killed) and both threads."""
        with self._child_lock:
            child = self._child
            if child is None or not child.alive():
                if child is not None:
                    self._lost(child)
                self._ready.clear()
                self._child = _Child(self.ingest.max_payload, self.ingest.recheck_interval_s)
                self.processes_started += 1
                log.info("E2 decoder process started (pid %d)", self._child.pid)
        super().start()
        self.feeder.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop both threads and the process; True if all ended within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        stopped = self.feeder.stop(timeout_s=min(1.0, timeout_s))
        stopped &= super().stop(timeout_s=max(0.0, min(1.0, deadline - time.monotonic())))
        with self._child_lock:
            child, self._child = self._child, None
            retired, self._retired = self._retired + ([child] if child else []), []
        for old in retired:
            old.retire(max(0.0, deadline - time.monotonic()))
            if stopped:  # no thread reads any more
                old.results.close()
        self._items = queue.Queue(self.maxsize)  # what was never sent is not decoded
        self._resend.clear()
        self._ready.clear()
        return stopped

    def healthy(self) -> bool:
        """Readiness: a process runs, has loaded its codecs and is not stuck."""
        child = self._child
        return (child is not None and child.alive() and child.ready
                and self._stuck(child, time.monotonic()) is None)

    def status(self) -> WorkerStatus:
        st = super().status()
        state = st.state
        child = self._child
        error = st.last_error
        if state is WorkerState.OK:
            if child is None or not child.alive():
                state = WorkerState.DEAD
                error = "decoder process not running"
            elif (why := self._stuck(child, time.monotonic())) is not None:
                state, error = WorkerState.STUCK, why
        return WorkerStatus(st.name, state, st.restarts, st.failures, st.idle_s, error,
                            queued=self.pending(), dropped=self.dropped)

    def _stuck(self, child: _Child, now: float) -> str | None:
        if not child.ready:
            if now - child.started_at > self.start_timeout_s:
                return f"decoder process not ready after {now - child.started_at:.0f} s"
        elif child.in_flight() and now - child.progress_at > self.decode_deadline_s:
            return (f"decoder process holds {child.in_flight()} indications and answered "
                    f"none for {now - child.progress_at:.1f} s")
        return None

    def _lost(self, child: _Child) -> None:
        """Retire ``child`` (once): the indication it was decoding is lost and counted, the
        ones it was sent after that are sent again to the next process."""
        with child.lock:
            if child.lost:
                return
            child.lost = True
            unanswered = list(child.unanswered)
            child.unanswered.clear()
            child.answered = child.sent
            child.closed = True
        lost = min(1, len(unanswered))
        with self._child_lock:
            self._retired.append(child)
            if child is self._child:
                self._ready.clear()
            # Older than anything queued: they go first, in the order they were sent.
            self._resend.extendleft(reversed(unanswered[1:]))
        if lost:
            self.drops["decoder_lost"] += lost
        child.retire(0.0)
        log.error("E2 decoder process (pid %d) ended (exit code %s); %d indication lost, %d "
                  "sent again to the next process", child.pid, child.process.returncode, lost,
                  len(unanswered) - lost)

    def _drop_waiting(self) -> None:
        """Degraded: what waits will not be decoded; counted, not kept."""
        with self._child_lock:
            n = len(self._resend)
            self._resend.clear()
        while True:
            try:
                self._items.get_nowait()
            except queue.Empty:
                break
            n += 1
        if n:
            self.drops["decoder_down"] += n

    # --- the threads ----------------------------------------------------------------------

    def _feed_step(self) -> None:
        if self.degraded is not None:
            self._drop_waiting()
            self._ready.wait(0.5)  # set again only by a process started after the budget
            return
        # Indications wait in the queue while no process is ready (one dies, the supervisor
        # starts the next within its interval), instead of being dropped meanwhile.
        if not self._ready.wait(0.5):
            return
        child = self._child
        if child is None or child.closed or not child.ready:
            return
        self._answered.clear()
        if child.in_flight() >= MAX_IN_FLIGHT:
            self._answered.wait(0.5)
            return
        with self._child_lock:
            item = self._resend.popleft() if self._resend else None
        if item is None:
            try:
                item = self._items.get(timeout=0.5)
            except queue.Empty:
                return
        payload, meid = item
        book = self.ingest.book
        raw_meid = (meid or "").encode("utf-8", "replace")[:_MAX_MEID]
        # Past the limit only the first bytes go: the process refuses it by its size.
        body = payload[: self.ingest.max_payload + 1]
        try:
            if child.book_version != book.version:
                view = book.decode_view()
                child.send(_BOOK + json.dumps(view, separators=(",", ":")).encode())
                child.book_version = view["version"]
            if not child.in_flight():
                child.progress_at = time.monotonic()  # the deadline runs from now
            child.send(b"".join((_JOB, _JOB_HEAD.pack(len(raw_meid), len(payload)), raw_meid,
                                 body)))
        except OSError:  # the process died (EPIPE) or was retired meanwhile: for the next
            with self._child_lock:
                self._resend.appendleft(item)
            return
        with child.lock:
            if not child.closed:
                child.sent += 1
                child.unanswered.append(item)
                return
        # Retired while this was written: it went after what the process held (resent first).
        with self._child_lock:
            self._resend.append(item)

    def _read_step(self) -> None:
        with self._child_lock:
            retired = [c for c in self._retired if c is not self._child]
            self._retired = [c for c in self._retired if c not in retired]
        for old in retired:  # only this thread reads result pipes: it closes them
            old.results.close()
        child = self._child
        if child is None or child.closed:
            self._stop.wait(0.5)
            return
        if (why := self._stuck(child, time.monotonic())) is not None:
            self.processes_killed += 1
            log.error("E2 decoder process (pid %d) killed: %s", child.pid, why)
            child.process.kill()
            self._lost(child)
            return
        try:
            if not child.results.poll(0.5):
                if child.process.poll() is not None:
                    self._lost(child)
                return
            frame = child.results.recv(MAX_RESULT_BYTES)
        except (EOFError, OSError):
            child.process.kill()  # EOF: it ended; OSError: an oversized frame, out of step
            self._lost(child)
            return
        child.progress_at = time.monotonic()
        kind = frame[:1]
        if kind == _READY:
            child.ready = True
            with self._child_lock:
                if child is self._child and not child.closed:
                    self._ready.set()
            return
        if kind != _RESULT:
            return
        with child.lock:
            child.answered += 1
            if child.unanswered:
                child.unanswered.popleft()
        self._answered.set()
        try:
            decoded = decode_decoded(frame[1:])
        except WireError as exc:
            decoded = Decoded("internal_errors", f"decoder process answer refused: {exc}")
        self.ingest.apply(decoded)
