"""``mcw weights`` end to end through the console entry point."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize("extra", [
    ["--capacity", "nr=abc"], ["--capacity", "wimax=3"], ["--mode", "fixed_split"],
    ["--lower", "lte=3"], ["--capacity", "nr=-4"], ["--policy", "/nonexistent.json"],
])
def test_bad_input_exits_2_with_a_message(extra: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PAPER_ARGS, *extra]) == 2
    assert "error" in capsys.readouterr().err
