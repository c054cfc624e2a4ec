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
it answers each with one :class:`~xapp.adapters.e2.indication_decoder.Decoded` as JSON,
which the main process parses with ``json`` (no ``pickle`` of anything a node sent) and checks
field by field before building records.  Mapping to CPEs, counting and the intake stay in the
main process (the registry and the measurement tables live there); that costs ~1 ms of the
main interpreter per 100-UE indication.

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

The decoding half is :class:`~xapp.adapters.e2.indication_decoder.IndicationDecoder` (run in
the child against its :class:`~xapp.adapters.e2.indication_decoder.BookCopy`), the answer's
JSON :mod:`xapp.adapters.e2.decoded_wire`; this module is the process around them: its pipes,
its body (:func:`serve`) and its supervision in the main process.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from xapp.adapters.e2 import aper
from xapp.adapters.e2.decoded_wire import WireError, decode_decoded, encode_decoded
from xapp.adapters.e2.indication_decoder import BookCopy, Decoded, IndicationDecoder
from xapp.core.workers import Worker, WorkerState, WorkerStatus

log = logging.getLogger(__name__)

#: Indications waiting for the decoder process (one granularity period of a few hundred nodes).
QUEUE: Final = 1024
#: Largest answer read from the decoder process (a 64 KiB indication gives at most a few MiB
#: of JSON); a larger one is refused by the process itself, as ``internal_errors``.
MAX_RESULT_BYTES: Final = 16 << 20
#: Reasons an indication is dropped before it is decoded.
DROP_REASONS: Final = ("queue_full", "decoder_down", "decoder_lost")
#: Indications written to a process and not yet answered; the feeder waits beyond.  What a
#: process that dies holds is sent again to the next, so this bounds what is kept to resend.
MAX_IN_FLIGHT: Final = 32

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

    def __init__(self, max_payload: int, recheck_interval_s: float, started_at: float) -> None:
        jobs_r, jobs_w = os.pipe()
        results_r, results_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [p for p in sys.path if p] + [p for p in env.get("PYTHONPATH", "").split(
                os.pathsep) if p])
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c",
                 "from xapp.adapters.e2.decoder_process import main; main()",
                 str(jobs_r), str(results_w), str(max_payload), str(recheck_interval_s)],
                pass_fds=(jobs_r, results_w), stdin=subprocess.DEVNULL, env=env)
        finally:
            # Our copies of the child's ends closed: a dead child makes writes fail, reads EOF.
            os.close(jobs_r)
            os.close(results_w)
        self.jobs, self.results = Frames(jobs_w), Frames(results_r)
        self.pid = self.process.pid
        #: On the supervising :class:`DecoderProcess`'s clock.
        self.started_at = started_at
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
    clock : callable, default=time.monotonic
        Seconds on a monotonic clock: what the deadlines above, and both threads' own, are
        measured on (tests pass a fake one and move it).
    """

    def __init__(self, ingest: Any, *, maxsize: int = QUEUE, decode_deadline_s: float = 10.0,
                 start_timeout_s: float = 60.0, name: str = "mcw-e2-decoder",
                 clock: Callable[[], float] = time.monotonic) -> None:
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
        # Worker keeps the clock (self._clock): the process's deadlines are read on it too.
        super().__init__(name, self._read_step, 0.0, deadline_s=30.0, clock=clock)
        self.feeder = Worker(f"{name}-feed", self._feed_step, 0.0, deadline_s=30.0, clock=clock)

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
                self._child = _Child(self.ingest.max_payload, self.ingest.recheck_interval_s,
                                     self._clock())
                self.processes_started += 1
                log.info("E2 decoder process started (pid %d)", self._child.pid)
        super().start()
        self.feeder.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop both threads and the process; True if all ended within ``timeout_s``."""
        # Real time: it bounds waits for threads and a process, not a supervision deadline.
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
                and self._stuck(child, self._clock()) is None)

    def status(self) -> WorkerStatus:
        st = super().status()
        state = st.state
        child = self._child
        error = st.last_error
        if state is WorkerState.OK:
            if child is None or not child.alive():
                state = WorkerState.DEAD
                error = "decoder process not running"
            elif (why := self._stuck(child, self._clock())) is not None:
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
                child.progress_at = self._clock()  # the deadline runs from now
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
        if (why := self._stuck(child, self._clock())) is not None:
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
        child.progress_at = self._clock()
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
