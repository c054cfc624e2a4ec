"""The e2e-k8s report: a run passes only when every step finished and every check held."""

from __future__ import annotations

import pytest

from tests.e2e.report import Check
from tests.k8s.report import Report, StepFailed


def test_all_steps_and_checks_ok() -> None:
    r = Report()
    with r.step("a") as st:
        st.checks.append(Check("held", True))
    assert r.ok and r.to_text().endswith("e2e-k8s: PASS")
    assert r.to_json()["steps"][0]["checks"] == [{"name": "held", "ok": True, "detail": ""}]


def test_a_failed_check_fails_the_run() -> None:
    r = Report()
    with r.step("a") as st:
        st.checks.append(Check("broken", False, "why"))
    assert not r.ok and "FAIL broken: why" in r.to_text()


def test_an_error_names_the_step() -> None:
    r = Report()
    with pytest.raises(StepFailed) as info, r.step("kubelet: node Ready"):
        raise RuntimeError("node mcw-node Ready not within 180 s")
    assert info.value.step == "kubelet: node Ready"
    assert not r.ok and r.steps[0].error == "RuntimeError: node mcw-node Ready not within 180 s"


def test_an_interrupted_step_fails_the_run() -> None:
    r = Report()
    with pytest.raises(KeyboardInterrupt), r.step("helm install"):
        raise KeyboardInterrupt
    assert not r.ok and r.steps[0].error == "interrupted"
    assert r.to_text().endswith("e2e-k8s: FAIL")
