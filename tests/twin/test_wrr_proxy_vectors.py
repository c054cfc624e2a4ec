"""The MPTCP proxy's WRR tuple list, checked against the steps shared with the Go agent.

The Go side (kernel-agent/backend/wrrsysctl) builds the list from the served CPEs and writes it;
here each step's rules are derived again from the step's CPEs and encoded with the twin's
encoder, so the two languages agree on both the list and its text.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from tests.support.paths import REPO
from twin.sysctl_backend import WrrTuple, format_weights

VECTORS = REPO / "schemas/testdata/wrr-proxy-vectors.json"


@cache
def vectors() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(VECTORS.read_text())
    return doc


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The steps are read when the tests are collected, not when the module is imported.
    if "step" in metafunc.fixturenames:
        metafunc.parametrize("step", vectors()["steps"], ids=lambda s: s["name"][:40])


def _rules(cpes: list[dict[str, Any]], max_tuples: int) -> tuple[list[WrrTuple], dict[str, str]]:
    """The list as the vectors' description states it (CPEs in id order, WATs in wat_order)."""
    order = vectors()["wat_order"]
    tuples: list[WrrTuple] = []
    left_out: dict[str, str] = {}
    owner: dict[str, str] = {}
    for cpe in sorted(cpes, key=lambda c: c["cpe_id"]):
        cid = cpe["cpe_id"]
        with_addr = (p for p in cpe["paths"] if "addr" in p)
        paths = sorted(with_addr, key=lambda p: order.index(p["wat"]))
        if any(owner.get(p["addr"], cid) != cid for p in paths):
            left_out[cid] = "address"
            continue
        mine = [
            WrrTuple(src_ip="0.0.0.0", dst_ip=p["addr"], weight=p["weight"])
            for p in paths
            if p["weight"] != 1
        ]
        if len(tuples) + len(mine) > max_tuples:
            left_out[cid] = "bound"
            continue
        owner.update((p["addr"], cid) for p in paths)
        tuples += mine
    return tuples, left_out


def test_proxy_step(step: dict[str, Any]) -> None:
    tuples, left_out = _rules(step["cpes"], vectors()["max_tuples"])
    assert tuples == [WrrTuple(**t) for t in step["tuples"]]
    assert left_out == step["not_applied"]
    assert (format_weights(tuples) if tuples else "") == step["text"]


def test_steps_cover_the_cases() -> None:
    doc = vectors()
    reasons = {r for s in doc["steps"] for r in s["not_applied"].values()}
    assert reasons == {"bound", "address"}
    assert doc["steps"][-1]["text"] == ""  # every CPE left: empty list
    assert all(len(s["tuples"]) <= doc["max_tuples"] for s in doc["steps"])
