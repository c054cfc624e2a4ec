"""The E2 decoder process (issue 21): E2AP + KPM decoded in a child process, the answers
applied in this one; the queue in front of it bounded, its drops counted by reason, the
process supervised (a killed or hung one is seen, counted and replaced).

Every test starts real decoder processes (``python -c ... main()``, about 0.3 s each).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.polling import wait_until
from tests.xapp.adapters.e2.decoder_inputs import (
    FUNCTION,
    NODE,
    REQUEST,
    indication,
    make_ingest,
)
from xapp.adapters.a1 import A1Handler
from xapp.adapters.a1_types import load_policy_types
from xapp.adapters.e2 import e2ap
from xapp.adapters.e2.decoder_process import DecoderProcess
from xapp.adapters.e2.ingest import KpmIngest
from xapp.adapters.e2.records import ActiveSubscription, RicIndication, RicRequestId
from xapp.adapters.lab import LoopbackGlue
from xapp.app.collector import ComponentCollector, E2Counters
from xapp.app.endpoints import READY_PATH, Health, HttpServer
from xapp.app.metrics import Metrics
from xapp.core.forecast import KpiFrame
from xapp.core.policy_book import PolicyBook
from xapp.core.workers import Supervisor, WorkerState

A1_POLICY_REQ, RIC_INDICATION = 20010, 12050


@pytest.fixture
def started() -> Iterator[list[DecoderProcess]]:
    made: list[DecoderProcess] = []
    yield made
    for d in made:
        d.stop(timeout_s=5)


def start(made: list[DecoderProcess], ingest: KpmIngest, **kwargs: Any) -> DecoderProcess:
    d = DecoderProcess(ingest, **kwargs)
    made.append(d)
    d.start()
    assert wait_until(d.healthy, timeout_s=30), d.status()
    return d


def rows(frames: list[KpiFrame]) -> list[tuple[str, str, dict[str, float]]]:
    out = []
    for f in frames:
        assert f.direction is not None
        for i in range(len(f)):
            out.append((str(f.cpe[i]), str(f.direction[i]),
                        {k: float(v[i]) for k, v in sorted(f.values.items())
                         if not math.isnan(v[i])}))
    return out


def test_the_process_gives_what_decoding_here_gives(started: list[DecoderProcess]) -> None:
    """Same rows, counters and dialect bookkeeping as ``KpmIngest.handle`` in this thread,
    for a FlexRIC node first taken for a standard v3 one (detected in the process, remembered
    in the main process's book), and for every kind of refusal."""
    payloads = [(indication(3, dialect="flexric-v3"), NODE)] * 3 + [
        (b"", NODE), (b"\x00garbage", NODE),
        (indication(1, request=RicRequestId(123, 99)), NODE),  # no such subscription
        (indication(1), "gnb-other"),  # another node's meid
        (e2ap.encode_ric_indication(RicIndication(REQUEST, FUNCTION, 1, 1, "report",
                                                   b"\x01\x02", b"\x03")), NODE),
    ]
    here, here_sink = make_ingest()
    for payload, meid in payloads:
        here.handle(payload, meid)
    there, there_sink = make_ingest()
    d = start(started, there)
    for item in payloads:
        assert d.offer(item)
    assert wait_until(lambda: there.counters["received"] == len(payloads), timeout_s=30), \
        there.counters
    assert there.counters == here.counters
    assert there.counters["decoded_flexric-v3"] == 3 and there.counters["dialect_checks"] == 2
    assert there.counters["accepted"] == 3 and there.counters["refused_kpm"] == 1
    assert rows(there_sink.frames) == rows(here_sink.frames)
    assert there.book.dialect(NODE, FUNCTION) == "flexric-v3"
    assert there.book.indications(REQUEST.instance, FUNCTION) == \
        here.book.indications(REQUEST.instance, FUNCTION) == 5
    assert there.book.misses == here.book.misses == 1
    assert (d.accepted, d.dropped, d.pending()) == (len(payloads), 0, 0)


def test_the_book_copy_follows_the_book(started: list[DecoderProcess]) -> None:
    ingest, _ = make_ingest()
    d = start(started, ingest)
    d.offer((indication(), NODE))
    assert wait_until(lambda: ingest.counters["accepted"] == 1, timeout_s=30)
    ingest.book.remove_subscription("sub-1")
    d.offer((indication(), NODE))
    assert wait_until(lambda: ingest.counters["refused_unknown_subscription"] == 1,
                      timeout_s=30)
    ingest.book.add(ActiveSubscription("sub-2", NODE, RicRequestId(123, 8), FUNCTION, 3, 4))
    d.offer((indication(request=RicRequestId(123, 8)), NODE))
    assert wait_until(lambda: ingest.counters["accepted"] == 2, timeout_s=30)


def test_an_oversized_payload_is_refused_by_its_size_not_shipped_whole(
        started: list[DecoderProcess]) -> None:
    ingest, _ = make_ingest()
    ingest.max_payload = 4096
    d = start(started, ingest)
    d.offer((b"\x00" * 100_000, NODE))
    d.offer((indication(), NODE))
    assert wait_until(lambda: ingest.counters["received"] == 2, timeout_s=30)
    assert ingest.counters["refused_too_large"] == 1 and ingest.counters["accepted"] == 1


def test_a_full_queue_drops_and_counts_with_its_reason() -> None:
    ingest, _ = make_ingest()
    d = DecoderProcess(ingest, maxsize=2)  # not started: nothing takes from the queue
    assert [d.offer((b"x", NODE)) for _ in range(5)] == [True, True, False, False, False]
    assert d.drops == {"queue_full": 3, "decoder_down": 0, "decoder_lost": 0}
    st = d.status()
    assert (st.state, st.queued, st.dropped) == (WorkerState.NOT_STARTED, 2, 3)
    collector = ComponentCollector(e2=E2Counters(
        states=dict, subscriber=dict, indications=dict, unmatched=lambda: 0,
        dropped=lambda: dict(d.drops)))
    metrics = {(s.name, s.labels.get("reason")): s.value for m in collector.collect()
               for s in m.samples}
    assert metrics[("mcw_e2_indications_dropped_total", "queue_full")] == 3
    with pytest.raises(ValueError):
        DecoderProcess(ingest, maxsize=0)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_killed_or_hung_process_is_replaced_on_the_supervisors_clock_and_loses_at_most_one(
        started: list[DecoderProcess], sig: signal.Signals) -> None:
    """Issue 33 item 3: nothing polls /alive or /metrics here; the supervisor's own thread
    replaces the process, and what arrived meanwhile waited in the queue for it."""
    ingest, _ = make_ingest(100)
    now = [0.0]
    # SIGSTOP hangs it as an endless decode would: stuck past the deadline, then killed.
    d = start(started, ingest, decode_deadline_s=10.0, clock=lambda: now[0])
    supervisor = Supervisor()
    for worker in d.workers():
        supervisor.add(worker, degrades="e2")
    child = d._child
    assert child is not None
    payload = indication(100)
    for _ in range(10):
        assert d.offer((payload, NODE))
    assert wait_until(lambda: child.sent >= 3, timeout_s=30)
    os.kill(child.pid, sig)
    try:
        for _ in range(10):  # while it is dead or hung: they wait, none is dropped
            assert d.offer((payload, NODE))
        # The hung one holds what it was sent; past the deadline it is stuck.
        assert wait_until(lambda: child.in_flight() > 0 or not child.alive(), timeout_s=30)
        now[0] += 10.5
        supervisor.start(interval_s=0.05)
        assert wait_until(lambda: d.processes_started == 2 and d.healthy(), timeout_s=30)
        # The ingest counts an indication "received" before it maps and hands it on, and
        # "accepted" after: wait for the outcome, not the arrival.
        assert wait_until(lambda: ingest.counters["accepted"] + d.drops["decoder_lost"] == 20,
                          timeout_s=60), (ingest.counters, d.drops, d.pending())
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed, and reaped
            os.kill(child.pid, signal.SIGCONT)
        supervisor.stop()
    assert d.drops["decoder_down"] == 0 and d.drops["queue_full"] == 0, d.drops
    assert d.drops["decoder_lost"] <= 1  # only the one it was decoding
    assert ingest.counters["accepted"] == 20 - d.drops["decoder_lost"], ingest.counters
    assert d._child is not None and d._child.pid != child.pid and d.pending() == 0
    [status] = [st for st in supervisor.check() if st.name == "mcw-e2-decoder"]
    assert status.restarts == 1 and status.state is WorkerState.OK


def test_a_spent_restart_budget_degrades_e2_only_and_says_so(
        started: list[DecoderProcess]) -> None:
    """Issue 33 item 3: past its budget the decoder is degraded (alive stays OK, ready says
    e2 degraded and a metric is set), and it is tried again when the window has room."""
    now = [1000.0]
    ingest, _ = make_ingest()
    d = start(started, ingest)
    supervisor = Supervisor(max_restarts=1, restart_window_s=300, clock=lambda: now[0])
    for worker in d.workers():
        supervisor.add(worker, degrades="e2")
    supervisor.watch("mcw-a1", lambda: True)
    supervisor.start(interval_s=0.05)
    metrics = Metrics()
    metrics.registry.register(ComponentCollector(workers=supervisor.check,
                                                 degraded=supervisor.degradable))
    http = HttpServer(Health({"e2-decoder": d.healthy, "rmr": lambda: True}, lambda: (
        supervisor.alive(), {}), supervisor.degraded, {"e2-decoder": "e2"}),
        dict, metrics, host="127.0.0.1", port=0)
    http.start()

    def get(path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http.port}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    try:
        assert json.loads(get(READY_PATH)[1])["ready"] is True
        for started_ in (2, 3):
            child = d._child
            assert child is not None
            os.kill(child.pid, signal.SIGKILL)
            if started_ == 2:
                assert wait_until(lambda: d.processes_started == 2 and d.healthy(),
                                  timeout_s=30)
        assert wait_until(lambda: "e2" in supervisor.degraded(), timeout_s=30)
        assert d.processes_started == 2 and supervisor.alive()
        statuses = {st.name: st.state for st in supervisor.check()}
        assert statuses["mcw-e2-decoder"] is WorkerState.DEGRADED
        code, body = get(READY_PATH)
        ready = json.loads(body)
        assert code == 200 and ready["ready"] is True and ready["checks"]["e2-decoder"] is False
        assert "mcw-e2-decoder died 2 times within 300 s" in ready["degraded"]["e2"]
        assert b'mcw_component_degraded{component="e2"} 1.0' in get("/metrics")[1]
        # What arrives is dropped and counted, not queued for a process that will not come.
        assert not d.offer((indication(), NODE)) and d.drops["decoder_down"] == 1
        now[0] += 301  # the window has room again: tried again
        assert wait_until(lambda: d.processes_started == 3 and d.healthy(), timeout_s=30)
        assert supervisor.degraded() == {}
        assert b'mcw_component_degraded{component="e2"} 0.0' in get("/metrics")[1]
        assert d.offer((indication(), NODE))
        assert wait_until(lambda: ingest.counters["accepted"] == 1, timeout_s=30)
    finally:
        supervisor.stop()
        http.stop()


def test_a_hung_process_is_stuck_then_killed_and_replaced(
        started: list[DecoderProcess]) -> None:
    ingest, _ = make_ingest()
    now = [0.0]
    d = start(started, ingest, decode_deadline_s=10.0, clock=lambda: now[0])
    supervisor = Supervisor()
    for worker in d.workers():
        supervisor.add(worker)
    child = d._child
    assert child is not None
    os.kill(child.pid, signal.SIGSTOP)  # hangs as an endless decode would
    try:
        d.offer((indication(), NODE))
        assert wait_until(lambda: child.in_flight() == 1, timeout_s=30)
        now[0] += 9.9  # within the deadline: holding work is not being stuck
        assert d.status().state is WorkerState.OK and d.healthy()
        assert d.processes_killed == 0
        now[0] += 0.2
        seen: list[WorkerState] = []

        def stuck_then_dead() -> bool:
            seen.append(d.status().state)
            return seen[-1] is WorkerState.DEAD

        assert wait_until(stuck_then_dead, timeout_s=10, step_s=0.02)
        # The reading thread kills it on its next round (at most its 0.5 s poll): the
        # status may or may not have been read in between.
        assert WorkerState.STUCK in seen or d.processes_killed == 1
        assert d.processes_killed == 1 and d.drops["decoder_lost"] == 1
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed, and reaped
            os.kill(child.pid, signal.SIGCONT)
    supervisor.check()
    assert wait_until(d.healthy, timeout_s=30)
    d.offer((indication(), NODE))
    assert wait_until(lambda: ingest.counters["accepted"] == 1, timeout_s=30)


def test_a_process_that_never_gets_ready_is_stuck_after_the_start_timeout(
        started: list[DecoderProcess]) -> None:
    ingest, _ = make_ingest()
    now = [0.0]
    # The jumps stay below the threads' own 30 s deadline, on the same clock: a step in
    # progress across a longer jump would count as stuck itself.
    d = DecoderProcess(ingest, start_timeout_s=5.0, clock=lambda: now[0])
    started.append(d)
    d.start()
    child = d._child
    assert child is not None
    os.kill(child.pid, signal.SIGSTOP)  # long before its codecs are loaded (about 0.3 s)
    try:
        now[0] += 4.9
        assert d.status().state is WorkerState.OK and not d.healthy()
        now[0] += 0.2
        assert wait_until(lambda: d.processes_killed == 1, timeout_s=10)
        assert d.status().state is WorkerState.DEAD
        assert d.drops["decoder_lost"] == 0  # it was sent nothing
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGCONT)


def test_stop_ends_the_process_and_both_threads(started: list[DecoderProcess]) -> None:
    ingest, _ = make_ingest()
    d = start(started, ingest)
    child = d._child
    assert child is not None
    assert d.stop(timeout_s=5)
    assert child.process.poll() is not None
    assert d.status().state is WorkerState.STOPPED and not d.healthy()
    assert not any(t.name.startswith("mcw-e2-decoder") for t in threading.enumerate())


def test_the_glue_hands_indications_to_the_process_and_answers_a1_meanwhile(
        started: list[DecoderProcess]) -> None:
    policy_types = load_policy_types()
    ingest, sink = make_ingest(100)
    d = DecoderProcess(ingest)
    started.append(d)
    glue = LoopbackGlue(A1Handler(PolicyBook(), policy_types, "t"), lambda: True,
                        indications=d)
    glue.start_handlers()
    try:
        assert glue.e2_worker is d
        assert {w.name for w in glue.workers()} >= {"mcw-a1", "mcw-e2-decoder",
                                                    "mcw-e2-decoder-feed"}
        assert wait_until(d.healthy, timeout_s=30)
        child = d._child
        assert child is not None
        # The process decodes nothing until SIGCONT: the A1 answer cannot wait for it.
        os.kill(child.pid, signal.SIGSTOP)
        try:
            payload = indication(100)
            for i in range(5):
                glue.send(RIC_INDICATION, payload, f"ind-{i}", meid=NODE.encode())
            req = json.dumps({"operation": "CREATE", "policy_type_id": 20100,
                              "policy_instance_id": "p1", "payload": {}}).encode()
            glue.send(A1_POLICY_REQ, req, "a1")
            _, _, body = glue.answer("a1")
            assert json.loads(body)["status"] == "OK"
            assert ingest.counters["accepted"] == 0
        finally:
            os.kill(child.pid, signal.SIGCONT)
        assert wait_until(lambda: ingest.counters["accepted"] == 5, timeout_s=30)
        assert len(rows(sink.frames)) == 5 * 100 * 2  # dl and ul rows of 100 CPEs
    finally:
        for worker in glue.workers():
            worker.stop(timeout_s=2)
    with pytest.raises(ValueError):
        LoopbackGlue(A1Handler(PolicyBook(), policy_types, "t"), lambda: True,
                     indications=d, on_indication=ingest.handle)


def test_a_book_larger_than_an_indication_reaches_the_process(
        started: list[DecoderProcess]) -> None:
    """The book's copy is the main process's data, not bounded by the indication limit."""
    ingest, _ = make_ingest()
    ingest.max_payload = 4096
    names = tuple(f"Vendor.Measurement{i:04d}" for i in range(300))
    for instance in range(100, 140):  # ~270 KB of view, 65 times the indication limit
        ingest.book.add(ActiveSubscription(f"sub-{instance}", NODE, RicRequestId(123, instance),
                                           FUNCTION, 3, 1, measurements=names))
    assert len(json.dumps(ingest.book.decode_view())) > 50 * ingest.max_payload
    d = start(started, ingest)
    d.offer((indication(), NODE))
    assert wait_until(lambda: ingest.counters["accepted"] == 1, timeout_s=30), ingest.counters
    assert d.processes_started == 1 and d.dropped == 0
