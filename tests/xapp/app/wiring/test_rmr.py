"""RMR's wiring without librmr: ``--rmr`` off, auto and on when the library is absent, the glue
built when it is there (with the pod's own appmgr identity among several replicas), and its
workers supervised with the A1 resync's."""

from __future__ import annotations

import re

import pytest

from tests.support.polling import wait_until
from xapp.adapters.a1 import A1Handler, A1Resync
from xapp.adapters.a1_types import load_policy_types
from xapp.adapters.rmr import RmrGlue
from xapp.app.config import parse_controls
from xapp.app.wiring import rmr as wiring
from xapp.core.policy_book import PolicyBook
from xapp.core.workers import Supervisor, WorkerState

MISSING = "librmr_si.so: cannot open shared object file"


def a1() -> tuple[A1Handler, A1Resync]:
    handler = A1Handler(PolicyBook(parse_controls({}).default_policy), load_policy_types(),
                        "mcw-xapp-0")
    return handler, A1Resync(handler)


def build(mode: str, sharded: bool = False) -> tuple[object, str]:
    handler, resync = a1()
    return wiring.build_rmr(mode, 4560, 8080, handler, resync, lambda: True, lambda: None,
                            None, "mcw-xapp-0", sharded)


@pytest.fixture
def without_librmr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wiring, "rmr_library_available", lambda: (False, MISSING))


@pytest.mark.usefixtures("without_librmr")
def test_without_the_library_off_is_quiet_auto_says_why_and_on_fails() -> None:
    assert build("off") == (None, "")
    glue, why = build("auto")
    assert glue is None and why.startswith(f"--rmr auto without the RMR library ({MISSING})")
    with pytest.raises(RuntimeError, match=re.escape(MISSING)):
        build("on")


def test_with_the_library_each_replica_registers_as_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wiring, "rmr_library_available", lambda: (True, ""))
    monkeypatch.setenv("MCW_POD_IP", "10.244.0.7")
    glue, why = build("on", sharded=True)
    assert isinstance(glue, RmrGlue) and why == ""
    assert (glue.replica_id, glue.http_endpoint) == ("mcw-xapp-0", "10.244.0.7:8080")
    glue, _ = build("auto", sharded=False)  # one replica: the frame's one shared entry
    assert isinstance(glue, RmrGlue)
    assert (glue.replica_id, glue.http_endpoint) == ("", "")


def test_the_glue_s_workers_are_supervised_and_the_resync_ends_by_itself() -> None:
    handler, resync = a1()
    glue = RmrGlue(handler, lambda: True)
    supervisor = Supervisor()
    resync.done.set()  # nothing to reconcile: the resync's first step ends its worker
    wiring.supervise_rmr(glue, supervisor, None, resync)
    assert {s.name for s in supervisor.check()} == {
        "mcw-a1-query", "mcw-a1", "rmr-receive", "mcw-a1-resync"}

    def resync_state() -> WorkerState:
        return next(s.state for s in supervisor.check() if s.name == "mcw-a1-resync")

    assert wait_until(lambda: resync_state() is WorkerState.STOPPED, timeout_s=5)
