"""RmrGlue's dispatch in-process (issue 22, issue 21 item 4): what RMR's one dispatch thread
does with each message, driven through :meth:`RmrGlue.dispatch` with the real A1 handler and
the real queue workers; only the transport (RMR's return-to-sender and free) is kept instead
of sent (:class:`xapp.adapters.lab.LoopbackGlue`), because ``librmr_si.so`` is not needed to
route.  The same path with real RMR is in ``test_rmr.py``, which skips without the library.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.polling import wait_until
from xapp.adapters.a1 import A1Handler
from xapp.adapters.a1_types import PolicyType
from xapp.adapters.lab import LoopbackGlue
from xapp.app.collector import ComponentCollector
from xapp.core.policy_book import PolicyBook, PolicyInstance
from xapp.core.workers import Supervisor, WorkerState

A1_POLICY_REQ, A1_POLICY_RESP, HEALTH_REQ, HEALTH_RESP, RIC_INDICATION = (
    20010, 20011, 100, 101, 12050)
DEFAULTS = {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
            "capacity_floor_mbps": 1.0}


class SlowStore:
    """An SDL that hangs on write until released: one A1 request that takes as long as a test
    wants, on the shipped handler's path."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def save_policy(self, instance: PolicyInstance) -> None:
        self.entered.set()
        self.release.wait(30)

    def delete_policy(self, instance_id: str) -> None:
        pass


def send(glue: LoopbackGlue, mtype: int, payload: bytes, token: str,
         meid: bytes = b"") -> None:
    glue.send(mtype, payload, token, meid)


def answered_at_once(glue: LoopbackGlue, token: str) -> tuple[int, bytes]:
    """The answer to ``token``, already queued when :func:`send` returned: given in the
    dispatch step itself, so nothing the workers do can delay it."""
    _, mtype, body = glue.answer(token, timeout_s=0)
    return mtype, body


def a1_request(iid: str, payload: dict[str, Any]) -> bytes:
    return json.dumps({"operation": "CREATE", "policy_type_id": 20100,
                       "policy_instance_id": iid, "payload": payload}).encode()


@pytest.fixture
def make_glue(policy_types: tuple[PolicyType, ...]) -> Iterator[Callable[..., LoopbackGlue]]:
    made: list[LoopbackGlue] = []

    def make(store: SlowStore | None = None, **kwargs: Any) -> LoopbackGlue:
        handler = A1Handler(PolicyBook(DEFAULTS), policy_types, "mcw-xapp-0", persistence=store)
        glue = LoopbackGlue(handler, lambda: True, **kwargs)
        glue.start_handlers()
        made.append(glue)
        return glue

    yield make
    for glue in made:
        for worker in glue.workers():
            worker.stop(timeout_s=2)


def test_the_issue_request_is_refused_and_a_health_check_after_it_answered_at_once(
        make_glue: Callable[..., LoopbackGlue]) -> None:
    """Issue 22: ``scope.cpes = [0, "c0", ..., "c29999"]`` (282 KiB) was answered after 50 s,
    with the health check unanswered all along.  How long its checks take is bounded in
    ``test_a1_robust.py`` (CPU time); here, that they hold up no health check."""
    glue = make_glue()
    raw = a1_request("p-big", {"scope": {"cpes": [0] + [f"c{i}" for i in range(30000)]}})
    assert len(raw) > 280 * 1024
    send(glue, A1_POLICY_REQ, raw, "a1")
    send(glue, HEALTH_REQ, b"ping", "hc")
    assert answered_at_once(glue, "hc") == (HEALTH_RESP, b"OK\n")
    _, mtype, body = glue.answer("a1")
    assert mtype == A1_POLICY_RESP
    assert json.loads(body) == {"policy_type_id": 20100, "policy_instance_id": "p-big",
                                "handler_id": "mcw-xapp-0", "status": "ERROR"}


def test_a_hung_a1_request_holds_up_neither_health_checks_nor_indications(
        make_glue: Callable[..., LoopbackGlue]) -> None:
    store = SlowStore()
    seen: list[tuple[bytes, str | None, str]] = []
    glue = make_glue(store, on_indication=lambda payload, meid: seen.append(
        (payload, meid, threading.current_thread().name)))
    try:
        send(glue, A1_POLICY_REQ, a1_request("p1", {}), "a1")
        assert store.entered.wait(5)
        send(glue, HEALTH_REQ, b"ping", "hc")
        assert answered_at_once(glue, "hc") == (HEALTH_RESP, b"OK\n")
        send(glue, RIC_INDICATION, b"\x00\x01", "ind", meid=b"gnb-1")
        assert wait_until(lambda: bool(seen), 5)  # decoded while the A1 request still hangs
        assert seen == [(b"\x00\x01", "gnb-1", "mcw-e2-indications")]
    finally:
        store.release.set()
    assert json.loads(glue.answer("a1")[2])["status"] == "OK"


def test_a1_requests_past_the_queue_are_refused_at_once_naming_the_instance(
        make_glue: Callable[..., LoopbackGlue]) -> None:
    store = SlowStore()
    glue = make_glue(store, a1_queue=1)
    try:
        send(glue, A1_POLICY_REQ, a1_request("p1", {}), "first")  # taken by the worker
        assert store.entered.wait(5)
        send(glue, A1_POLICY_REQ, a1_request("p2", {}), "queued")
        send(glue, A1_POLICY_REQ, a1_request("p3", {}), "dropped")
        mtype, body = answered_at_once(glue, "dropped")
        assert (mtype, json.loads(body)["policy_instance_id"], json.loads(body)["status"]) == (
            A1_POLICY_RESP, "p3", "ERROR")
        status = glue.a1_worker.status()
        assert (status.queued, status.dropped, status.healthy) == (1, 1, True)
    finally:
        store.release.set()
    assert json.loads(glue.answer("queued")[2])["status"] == "OK"


def test_indications_past_the_queue_are_dropped_and_counted_without_delaying_a1(
        make_glue: Callable[..., LoopbackGlue]) -> None:
    """Issue 21 item 4: decoding runs on its own worker; a full queue drops and counts."""
    release, entered = threading.Event(), threading.Event()
    decoded: list[bytes] = []

    def slow_decode(payload: bytes, meid: str | None) -> None:
        entered.set()
        release.wait(30)
        decoded.append(payload)

    glue = make_glue(on_indication=slow_decode, e2_queue=2)
    try:
        send(glue, RIC_INDICATION, b"\x00", "ind-0")
        assert entered.wait(5)
        for i in range(1, 10):
            send(glue, RIC_INDICATION, bytes([i]), f"ind-{i}")
        send(glue, A1_POLICY_REQ, a1_request("p1", {}), "a1")
        _, _, body = glue.answer("a1")  # while the indication worker is still held
        assert json.loads(body)["status"] == "OK"
        assert glue.e2_worker is not None
        status = glue.e2_worker.status()
        # One being decoded, two waiting, seven dropped: in /alive and in the metrics.
        assert (status.queued, status.dropped) == (2, 7)
        supervisor = Supervisor()
        for worker in glue.workers():
            supervisor.add(worker)
        alive = {st.name: st.describe() for st in supervisor.check()}
        assert alive["mcw-e2-indications"] == "ok; dropped 7"
        metrics = {(m.name, s.labels.get("worker")): s.value
                   for m in ComponentCollector(workers=supervisor.check).collect()
                   for s in m.samples}
        assert metrics[("mcw_worker_queue_dropped", "mcw-e2-indications")] == 7
        assert metrics[("mcw_worker_queue_depth", "mcw-e2-indications")] == 2
    finally:
        release.set()
    assert wait_until(lambda: len(decoded) == 3, 5)
    assert decoded == [b"\x00", b"\x01", b"\x02"]


def test_a_stuck_a1_worker_fails_the_health_check_without_waiting(
        make_glue: Callable[..., LoopbackGlue]) -> None:
    store = SlowStore()
    glue = make_glue(store)
    try:
        send(glue, A1_POLICY_REQ, a1_request("p1", {}), "a1")
        assert store.entered.wait(5)
        send(glue, HEALTH_REQ, b"ping", "hc")
        assert answered_at_once(glue, "hc") == (HEALTH_RESP, b"OK\n")
        # The worker's clock a minute on: the request is held past its 10 s deadline.
        later = time.monotonic() + 60
        glue.a1_worker._clock = lambda: later
        assert glue.a1_worker.status().state is WorkerState.STUCK
        send(glue, HEALTH_REQ, b"ping", "hc")
        mtype, body = answered_at_once(glue, "hc")
        assert mtype == HEALTH_RESP and body.startswith(b"ERROR")
    finally:
        store.release.set()


def test_stop_frees_the_buffers_of_requests_never_handled(
        make_glue: Callable[..., LoopbackGlue]) -> None:
    store = SlowStore()
    glue = make_glue(store)
    freed: list[Any] = []
    glue._free = freed.append  # type: ignore[method-assign,assignment]
    try:
        send(glue, A1_POLICY_REQ, a1_request("p1", {}), "handling")
        assert store.entered.wait(5)
        send(glue, A1_POLICY_REQ, a1_request("p2", {}), "waiting")
        glue.stop(timeout_s=1.0)  # the worker is still held by p1: p2 is never handled
    finally:
        store.release.set()
    assert freed == ["waiting"]
