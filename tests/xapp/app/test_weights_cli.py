"""``mcw weights`` end to end through the console entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xapp.cli import main

PAPER_ARGS = ["weights", "--capacity", "nr=342", "--capacity", "wifi=1190",
              "--capacity", "lifi=12"]


def test_json_output_has_the_promised_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PAPER_ARGS, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"weights", "shares", "aggregate_mbps"} <= set(out)
    assert out["aggregate_mbps"] >= 0.99 * 1544


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PAPER_ARGS, "--max-weight", "30"]) == 0
    out = capsys.readouterr().out
    assert "T(w) =" in out and "wifi" in out


def test_mode_and_limits_from_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PAPER_ARGS, "--mode", "active_standby", "--priority", "lifi,nr",
                 "--down", "lifi", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weights"] == {"nr": 100, "wifi": 0, "lifi": 0}


def test_smallest_delay_and_a_loss_threshold_from_flags(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 35: lifi has the smallest RTT but retransmits 4 % of its segments, over the 2 %.
    assert main([*PAPER_ARGS, "--mode", "smallest_delay", "--rtt", "nr=20", "--rtt", "wifi=3",
                 "--rtt", "lifi=2", "--loss", "lifi=4", "--loss-max", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weights"] == {"nr": 0, "wifi": 100, "lifi": 0}
    assert out["reason"] == "smallest_delay:wifi+over_threshold:lifi"


def test_direction_applies_the_policys_override(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"scope": {"cpes": ["cpe-1"]}, "excluded_wats": ["wifi"],
                                  "directions": {"dl": {"excluded_wats": ["lifi"]}}}))
    outs = {}
    for direction in ("dl", "ul", None):
        extra = [] if direction is None else ["--direction", direction]
        assert main([*PAPER_ARGS, "--policy", str(policy), "--json", *extra]) == 0
        outs[direction] = json.loads(capsys.readouterr().out)
    assert outs["dl"]["direction"] == "dl" and outs[None]["direction"] is None
    assert outs["dl"]["weights"]["lifi"] == 0 and outs["dl"]["weights"]["wifi"] > 0
    assert outs["ul"]["weights"]["wifi"] == 0 and outs["ul"]["weights"]["lifi"] > 0
    assert outs[None]["weights"] == outs["ul"]["weights"]
    # An override that makes no valid policy is refused like any bad policy.
    policy.write_text(json.dumps({"directions": {"dl": {"mode": "active_standby"}}}))
    assert main([*PAPER_ARGS, "--policy", str(policy), "--direction", "dl"]) == 2
    assert "directions.dl: active_standby needs a priority list" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [
    ["--capacity", "nr=abc"], ["--capacity", "wimax=3"], ["--mode", "fixed_split"],
    ["--lower", "lte=3"], ["--capacity", "nr=-4"], ["--policy", "/nonexistent.json"],
])
def test_bad_input_exits_2_with_a_message(extra: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PAPER_ARGS, *extra]) == 2
    assert "error" in capsys.readouterr().err
