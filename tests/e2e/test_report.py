"""The e2e report's invariants catch what they are there to catch."""

from __future__ import annotations

from dataclasses import replace

from tests.e2e.observer import Applied
from tests.e2e.report import (
    Check,
    FaultResult,
    kpis_in_influx,
    lease_kept,
    to_json,
    to_text,
    versions_in_order,
    weights_in_influx,
)


def rec(t: float, cpe: str, version: int, nr: int = 1, online: bool = True) -> Applied:
    return Applied(t=t, cpe=cpe, online=online, version=version, weights={"nr": nr},
                   event="applied")


def test_versions_in_order() -> None:
    assert versions_in_order([rec(0, "a", 1), rec(1, "a", 2), rec(1, "b", 1)]).ok
    assert versions_in_order([rec(0, "a", 2), rec(1, "a", 2)]).ok  # a retained repeat
    back = versions_in_order([rec(0, "a", 3), rec(1, "a", 2)])
    assert not back.ok and "version 2 after 3" in back.detail
    reused = versions_in_order([rec(0, "a", 3, nr=1), rec(1, "a", 3, nr=2)])
    assert not reused.ok and "version 3 applied as" in reused.detail
    # Offline wills carry version 0 and never count as going back.
    assert versions_in_order([rec(0, "a", 3), rec(1, "a", 0, online=False)]).ok
    # The agent masks a WAT that went down under the same version, and unmasks it: the
    # agent's own events (hyphenated, as the agent sends them), not a reuse.
    masked = [rec(0, "a", 3, nr=5), replace(rec(1, "a", 3, nr=0), event="link-down"),
              replace(rec(2, "a", 3, nr=5), event="link-up")]
    assert versions_in_order(masked).ok
    assert not versions_in_order([*masked, rec(3, "a", 3, nr=0)]).ok


def test_weights_and_kpis_in_influx() -> None:
    records = [rec(0, "a", 1), rec(1, "a", 2)]
    assert weights_in_influx(records, {"a": {1, 2, 7}}).ok
    missing = weights_in_influx(records, {"a": {1}})
    assert not missing.ok and "a v2" in missing.detail
    # Applied a moment before mcw run was SIGKILLed: the unflushed batch, listed, not failed.
    crashed = weights_in_influx(records, {"a": {1}}, crashes=[3.0])
    assert crashed.ok and "a v2 at 1.0s" in crashed.detail
    assert not weights_in_influx(records, {"a": {1}}, crashes=[30.0]).ok
    # Published by the killed process, applied a moment after the kill (CI's run: 30 ms).
    assert weights_in_influx(records, {"a": {1}}, crashes=[0.97]).ok
    assert not weights_in_influx(records, {"a": {1}}, crashes=[-0.5]).ok
    assert kpis_in_influx(10, 10).ok and not kpis_in_influx(10, 9).ok


def test_lease_kept_outside_outages() -> None:
    records = [rec(0, "a", 1), rec(10, "a", 2), rec(11, "a", 3)]
    assert not lease_kept(records, 12, lease_s=6, outages=[]).ok
    assert lease_kept(records, 12, lease_s=6, outages=[(2, 5)]).ok
    assert lease_kept([rec(0, "a", 1), rec(5, "a", 2)], 6, lease_s=6, outages=[]).ok


def test_report_fails_on_a_failed_check_not_on_a_pending_one() -> None:
    pending = FaultResult("hang", 1, 2, checks=[Check("detected", False, "",
                                                      expected_pending=True)])
    failed = FaultResult("kill", 3, 4, checks=[Check("recovered", False, "")])
    assert to_json([pending], [], {})["ok"]
    doc = to_json([pending, failed], [], {})
    assert not doc["ok"]
    text = to_text(doc)
    assert "[PEND] detected" in text and "[FAIL] recovered" in text and "RESULT: FAIL" in text
