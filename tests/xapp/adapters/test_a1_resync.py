"""After a restart the A1 instances in force are exactly the mediator's (issue 9).

The stand-in behaves like the O-RAN SC A1 mediator: on ``A1_POLICY_QUERY`` it resends every
instance it has as a CREATE (Go encoding), one message at a time and with no end marker, and it
serves its northbound list ``GET /A1-P/v2/policytypes/{id}/policies`` over HTTP on loopback.
The xApp's state lives in a real redis-server (SDL), as in production.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from xapp.adapters.a1 import A1Handler, A1Resync, Status, mediator_lister
from xapp.adapters.a1_types import load_policy_types
from xapp.adapters.sdl import Restored, SdlStateStore, ricsdl_backend
from xapp.core.policy_book import PolicyBook

NS = "mcw-resync-test"
DEFAULTS = {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
            "capacity_floor_mbps": 1.0}
#: The policy type of each instance: p3 has rules (issue 35), the others are of the first type.
TYPES = {"p1": 20100, "p2": 20100, "p3": 20101}


class MediatorStandIn:
    """Instances by id; resends them on query; lists them over HTTP."""

    def __init__(self, instances: dict[str, dict[str, Any]]) -> None:
        self.instances = dict(instances)
        self.down = False
        mediator = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                # One list per registered type; another type is not known here (404).
                wanted = {f"/A1-P/v2/policytypes/{t}/policies": t for t in (20100, 20101)}
                if mediator.down or self.path not in wanted:
                    self.send_response(503 if mediator.down else 404)
                    self.end_headers()
                    return
                body = json.dumps(sorted(i for i in mediator.instances
                                         if TYPES[i] == wanted[self.path])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    def answer_query(self, handler: A1Handler, gap_s: float = 0.05) -> threading.Thread:
        """Resend every instance as CREATE, spaced out, no end marker (as the mediator does)."""
        def resend() -> None:
            for iid, payload in sorted(self.instances.items()):
                time.sleep(gap_s)  # the gaps are the scenario: the quiet period outlasts them
                doc = {"operation": "CREATE", "policy_type_id": str(TYPES[iid]),
                       "policy_instance_id": iid, "payload": json.dumps(payload)}
                assert handler.handle(json.dumps(doc).encode()).status is Status.OK

        t = threading.Thread(target=resend, daemon=True)
        t.start()
        return t

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def before_restart(redis: RedisServer) -> dict[str, dict[str, Any]]:
    """The xApp ran with three instances, saved in SDL; then it stopped."""
    payloads: dict[str, dict[str, Any]] = {"p1": {"max_weight": 10}, "p2": {"max_weight": 20},
                "p3": {"max_weight": 30, "scope": {"cpes": ["cpe-3"]}, "rules": [
                    {"name": "voice", "match": {"dscp": [46]}, "mode": "smallest_delay"}]}}
    store = SdlStateStore(NS, ricsdl_backend)
    handler = A1Handler(PolicyBook(DEFAULTS), load_policy_types(), "x", persistence=store)
    for iid, payload in payloads.items():
        doc = {"operation": "CREATE", "policy_type_id": TYPES[iid], "policy_instance_id": iid,
               "payload": payload}
        assert handler.handle(json.dumps(doc).encode()).status is Status.OK
    assert store.sync()
    return payloads


@pytest.fixture
def mediator(before_restart: dict[str, dict[str, Any]]) -> Iterator[MediatorStandIn]:
    # While the xApp was down, the operator deleted p2 at the mediator.
    m = MediatorStandIn({k: v for k, v in before_restart.items() if k != "p2"})
    yield m
    m.close()


def restart(redis: RedisServer) -> tuple[A1Handler, SdlStateStore]:
    """A new xApp process: restore from SDL into a fresh book, as XappProcess does."""
    book = PolicyBook(DEFAULTS)
    restored: list[Restored] = []
    store = SdlStateStore(NS, ricsdl_backend, on_restore=restored.append)
    assert store.sync()
    for inst in restored[0].policies:
        book.put(inst)
    return A1Handler(book, load_policy_types(), "x", persistence=store), store


def in_force(handler: A1Handler) -> set[str]:
    return {i.instance_id for i in handler.book.instances()}


def run_resync(resync: A1Resync, timeout_s: float = 10.0) -> None:
    assert wait_until(resync.step, timeout_s), "resync did not finish"


def saved_policies(store: SdlStateStore) -> set[str]:
    restored: list[Restored] = []
    SdlStateStore(NS, ricsdl_backend, on_restore=restored.append).sync()
    return {p.instance_id for p in restored[0].policies}


def test_quiet_period_removes_an_instance_deleted_while_down(
        redis: RedisServer, mediator: MediatorStandIn) -> None:
    handler, store = restart(redis)
    assert in_force(handler) == {"p1", "p2", "p3"}  # restored, including the deleted p2
    resync = A1Resync(handler, quiet_s=0.5)
    resync.query_sent()
    resent = mediator.answer_query(handler)
    run_resync(resync)
    resent.join()
    assert resync.outcome == "quiet-period" and resync.removed == ["p2"]
    assert in_force(handler) == {"p1", "p3"}
    assert store.sync() and saved_policies(store) == {"p1", "p3"}
    # A late SDL restore (Redis came back after the resync) cannot bring p2 back.
    assert not resync.admits("p2") and resync.admits("p1")


def test_the_northbound_list_covers_every_policy_type(
        redis: RedisServer, mediator: MediatorStandIn) -> None:
    handler, _ = restart(redis)
    p3 = handler.book.get("p3")
    assert p3 is not None and p3.policy_type_id == 20101  # restored with its type
    resync = A1Resync(handler, mediator_lister(mediator.url), quiet_s=0.5)
    resync.query_sent()
    run_resync(resync)
    # p1 is listed under 20100, p3 under 20101; p2 under neither.
    assert resync.outcome == "list" and resync.removed == ["p2"]
    assert in_force(handler) == {"p1", "p3"}


def test_the_northbound_list_is_exact_even_when_the_mediator_has_nothing(
        redis: RedisServer, mediator: MediatorStandIn) -> None:
    mediator.instances.clear()  # every instance was deleted while the xApp was down
    handler, store = restart(redis)
    resync = A1Resync(handler, mediator_lister(mediator.url), quiet_s=0.5)
    resync.query_sent()
    run_resync(resync)
    assert resync.outcome == "list" and in_force(handler) == set()
    assert store.sync() and saved_policies(store) == set()


def test_list_unavailable_falls_back_to_the_quiet_period(
        redis: RedisServer, mediator: MediatorStandIn) -> None:
    mediator.down = True
    handler, _ = restart(redis)
    resync = A1Resync(handler, mediator_lister(mediator.url, timeout_s=1.0), quiet_s=0.5)
    resync.query_sent()
    mediator.answer_query(handler).join()
    run_resync(resync)
    assert resync.outcome == "quiet-period" and in_force(handler) == {"p1", "p3"}


def test_a_silent_mediator_removes_nothing(redis: RedisServer,
                                           mediator: MediatorStandIn) -> None:
    handler, _ = restart(redis)
    resync = A1Resync(handler, quiet_s=0.2, give_up_s=0.5)
    resync.query_sent()
    run_resync(resync)
    assert resync.outcome == "nothing-resent"
    assert in_force(handler) == {"p1", "p2", "p3"} and resync.admits("p2")


def test_nothing_happens_before_the_query_is_sent(redis: RedisServer,
                                                  mediator: MediatorStandIn) -> None:
    handler, _ = restart(redis)
    resync = A1Resync(handler, mediator_lister(mediator.url), quiet_s=0.0)
    assert not resync.step() and in_force(handler) == {"p1", "p2", "p3"}
