"""An operator's A1 policy file applied by the xApp's own A1 handler (twin.a1_file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twin.a1_file import MAX_BYTES, PolicyFileError, load, policy_book, without_rules

DEFAULT = {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 1.0,
           "update_period_s": 1.0}
POLICY = {"mode": "load_balancing", "hysteresis_pct": 2,
          "rules": [{"name": "control", "match": {"destination_ports": [5302]},
                     "mode": "smallest_delay", "rtt_max_ms": 40, "urgent": True}]}


def test_the_policy_is_in_force_for_every_cpe_over_the_defaults() -> None:
    policy, source = policy_book(DEFAULT, POLICY).resolver().for_cpe("cpe0")
    assert source == "twin"
    assert [r.name for r in policy.classes_for("ul")] == ["control"]
    assert policy.hysteresis_pct == 2 and policy.max_weight == 100
    alone, _ = policy_book(DEFAULT, without_rules(POLICY)).resolver().for_cpe("cpe0")
    assert alone.classes_for("ul") == () and alone.hysteresis_pct == 2
    assert policy_book(DEFAULT, None).resolver().for_cpe("cpe0")[1] == "default"


@pytest.mark.parametrize(("payload", "reason"), [
    # The schema of type 20101 ...
    ({"mode": "redundant_please"}, "does not match policy type"),
    # ... and what only the xApp checks.
    ({"rules": [{"name": "a", "match": {"dscp": [1]}}, {"name": "a", "match": {"dscp": [2]}}]},
     "used twice"),
    ({"mode": "redundant"}, "redundant"),
])
def test_a_policy_the_xapp_refuses_is_refused_with_its_reason(payload: dict[str, object],
                                                              reason: str) -> None:
    with pytest.raises(PolicyFileError, match=f"A1 ERROR.*{reason}"):
        policy_book(DEFAULT, payload)


def test_load(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(POLICY))
    assert load(f) == POLICY
    for text, reason in (("[1]", "JSON object"), ("{", "not JSON"),
                         (" " * (MAX_BYTES + 1), "larger than")):
        f.write_text(text)
        with pytest.raises(PolicyFileError, match=reason):
            load(f)
    with pytest.raises(PolicyFileError, match="No such file"):
        load(tmp_path / "missing.json")


def test_the_documented_example_is_a_policy_the_xapp_takes() -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "control-urgent.json"
    policy, _ = policy_book(DEFAULT, load(example)).resolver().for_cpe("cpe0")
    (control,) = policy.classes_for("dl")
    assert control.urgent and control.policy.mode.value == "smallest_delay"
