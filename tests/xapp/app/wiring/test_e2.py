"""The E2 path as ``mcw run`` builds it (not started, no submgr): where the nodes come from,
what the subscriber asks for and where submgr answers, one subscription key per replica, and
indications mapped into the intake and the sink."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from xapp.adapters.e2.nodes import RnibNodes
from xapp.adapters.e2.subscription_store import MemoryIdStore, SdlIdStore
from xapp.app.config import Controls, parse_controls
from xapp.app.run_options import RunOptions
from xapp.app.wiring.e2 import build_e2, node_source, subscribe_settings
from xapp.app.wiring.telemetry import AgentTelemetry
from xapp.core.intake import LatestKpis
from xapp.core.ownership import ShardFence

NODES = [{"inventory_name": "gnb-1", "ran_function_id": 2},
         {"inventory_name": "gnb-2", "ran_function_id": 2, "cell": "02f839-00000000a",
          "prb_total": 106}]


def controls(**e2: Any) -> Controls:
    return parse_controls({"e2": {"submgr_url": "http://127.0.0.1:1", "nodes": NODES, **e2}})


def test_in_memory_the_configured_nodes_a_memory_id_store_and_no_node_records(
        caplog: pytest.LogCaptureFixture) -> None:
    c = controls()
    intake = LatestKpis()
    with caplog.at_level(logging.WARNING, logger="xapp.app.wiring.e2"):
        parts = build_e2(RunOptions(sdl="memory"), c, intake, None)
    # The R-NIB needs SDL: the configured nodes alone, and the log says so.
    assert any("controls.e2.rnib needs SDL" in r.getMessage() for r in caplog.records)
    nodes = parts.subscriber._nodes.nodes()
    assert [(n.inventory_name, n.cell, n.prb_total) for n in nodes] == [
        ("gnb-1", None, None), ("gnb-2", "02f839-00000000a", 106)]
    assert isinstance(parts.subscriber._ids, MemoryIdStore)
    assert parts.subscriber._records is None
    assert parts.worker.name == "mcw-e2-subscriptions" and parts.worker.deadline_s == 60.0
    assert parts.stoppers == [parts.registry.stop]
    assert parts.decoder.ingest is parts.ingest
    sink = parts.ingest.sink
    assert isinstance(sink, AgentTelemetry) and sink.intake is intake and sink.sink is None


def test_on_sdl_each_replica_keeps_its_own_subscription_ids() -> None:
    fence = ShardFence(4)
    parts = build_e2(RunOptions(sdl="redis"), controls(rnib=False), LatestKpis(), None, fence,
                     "r1")
    ids = parts.subscriber._ids
    assert isinstance(ids, SdlIdStore) and ids.key == "e2/subscriptions/r1"
    assert parts.subscriber._records is not None and parts.subscriber.owner == "r1"
    one = build_e2(RunOptions(sdl="redis"), controls(rnib=False), LatestKpis(), None,
                   ShardFence(4, everything=True), "r1")
    assert isinstance(one.subscriber._ids, SdlIdStore)
    assert one.subscriber._ids.key == "e2/subscriptions"


def test_several_replicas_subscribe_the_nodes_of_the_shards_they_hold() -> None:
    e = controls(rnib=False).e2
    nodes = node_source(e, False, None, []).nodes()
    assert [n.inventory_name for n in nodes] == ["gnb-1", "gnb-2"]
    every = ShardFence(4, everything=True)
    assert len(node_source(e, False, every, []).nodes()) == 2
    assert node_source(e, False, ShardFence(4), []).nodes() == []  # nothing held yet


def test_on_sdl_the_r_nib_s_nodes_too_closed_at_stop() -> None:
    stoppers: list[Callable[[], object]] = []
    node_source(controls().e2, True, None, stoppers)
    [close] = stoppers
    assert isinstance(getattr(close, "__self__", None), RnibNodes)


def test_no_node_source_is_said(caplog: pytest.LogCaptureFixture) -> None:
    e = parse_controls({"e2": {"submgr_url": "http://127.0.0.1:1", "rnib": False}}).e2
    with caplog.at_level(logging.WARNING, logger="xapp.app.wiring.e2"):
        assert node_source(e, False, None, []).nodes() == []
    assert any("no node source" in r.getMessage() for r in caplog.records)


def test_submgr_answers_this_pod_when_replicas_share_the_fleet(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    e = controls().e2
    monkeypatch.setenv("MCW_POD_IP", "10.244.0.7")
    assert subscribe_settings(e, sharded=True).client_host == "10.244.0.7"
    assert subscribe_settings(e, sharded=False).client_host == e.client_host
    monkeypatch.delenv("MCW_POD_IP")
    with caplog.at_level(logging.WARNING, logger="xapp.app.wiring.e2"):
        settings = subscribe_settings(e, sharded=True)
    assert settings.client_host == e.client_host
    assert any("MCW_POD_IP is not set" in r.getMessage() for r in caplog.records)
    assert (settings.submgr_url, settings.requestor_id, settings.measurements) == (
        e.submgr_url, e.requestor_id, e.measurements)
