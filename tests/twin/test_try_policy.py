"""Trying a steering policy before applying it (twin.try_policy, mcw twin --a1-policy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twin.policies import TwinOptions, TwinPolicyError
from twin.scenarios import build
from twin.traffic import mix
from twin.try_policy import trial
from xapp.cli import main

POLICY = {"mode": "load_balancing",
          "rules": [{"name": "control", "match": {"protocols": ["tcp"],
                                                  "destination_ports": [5302]},
                     "mode": "smallest_delay", "rtt_max_ms": 40, "urgent": True}]}


def test_an_urgent_smallest_delay_class_shortens_the_control_loops_rtt() -> None:
    sc = build("wifi-walk", duration_s=30, traffic=mix("control-bulk"))
    doc = trial(sc, POLICY, TwinOptions(backend="rate-caps"))
    assert doc["rules"] == ["control"] and doc["buffer_ms"] == 50.0
    for d in ("dl", "ul"):
        rules, alone = (doc["directions"][d][r]["flows"] for r in ("rules", "no_rules"))
        assert rules["control"]["class"] == "control" and alone["control"]["class"] == "default"
        assert rules["control"]["mbps"] == pytest.approx(0.16, abs=1e-3)
        # Without rules the control loop shares every WAT's full buffer with the bulk; its
        # own class is on the WAT of the smallest RTT (Wi-Fi, near the access point), urgent
        # under the agent's cap.
        assert alone["control"]["rtt_ms"]["p50"] > 50.0
        assert rules["control"]["rtt_ms"]["p50"] < 5.0
        assert rules["control"]["wats"]["wifi"]["time_pct"] > 90.0
        assert rules["control"]["over_deadline_pct"] < alone["control"]["over_deadline_pct"]
        # The cap that keeps the queue at the agent costs the bulk some of Wi-Fi.
        assert 0.8 * alone["bulk"]["mbps"] < rules["bulk"]["mbps"] < alone["bulk"]["mbps"]
        assert "rtt_ms" not in rules["bulk"]


def test_a_trial_needs_a_mix_and_the_rate_caps_agents() -> None:
    with pytest.raises(TwinPolicyError, match="traffic mix"):
        trial(build("wifi-walk", duration_s=2), POLICY, TwinOptions(backend="rate-caps"))
    with pytest.raises(TwinPolicyError, match="rate-caps"):
        trial(build("wifi-walk", duration_s=2, traffic=mix("bulk")), POLICY, TwinOptions())


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "policy.json"
    f.write_text(json.dumps(POLICY))
    base = ["twin", "--scenario", "wifi-walk", "--duration", "10", "--a1-policy", str(f)]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "with rules" in out and "without rules" in out and "uplink" in out
    assert "RTT p50/p95/p99 ms" in out and "on wifi" in out
    assert main([*base, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["traffic"] == "control-bulk" and doc["backend"] == "rate-caps"
    assert set(doc["directions"]["dl"]) == {"rules", "no_rules"}
    assert doc["policy_file"] == str(f)


@pytest.mark.parametrize(("policy", "extra", "error"), [
    ({"mode": "redundant"}, [], "A1 ERROR"),
    (POLICY, ["--backend", "wrr"], "rate-caps"),
    (POLICY, ["--a1-policy", "/nonexistent/policy.json"], "No such file"),
])
def test_cli_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     policy: dict[str, object], extra: list[str], error: str) -> None:
    f = tmp_path / "policy.json"
    f.write_text(json.dumps(policy))
    assert main(["twin", "--duration", "2", "--a1-policy", str(f), *extra]) == 2
    assert error in capsys.readouterr().err


def test_cli_traffic_without_a_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["twin", "--scenario", "wifi-walk", "--duration", "5", "--traffic",
                 "control-bulk", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["backend"] == "rate-caps" and set(doc["flows"]) == {"control", "bulk"}
    assert main(["twin", "--duration", "2", "--traffic", "bulk", "--policy", "equal"]) == 2
    assert "rate-caps" in capsys.readouterr().err
