"""Which capacity estimator ``--estimator`` gives: the EWMA baseline when asked or when the
model does not load in ``auto``; ``model`` refuses to run without its model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from xapp.app.config import parse_controls
from xapp.app.wiring.estimator import build_estimator
from xapp.core.ewma import EwmaEstimator
from xapp.core.workers import Worker


def nowhere(tmp_path: Path) -> dict[str, object]:
    return {"model": {"path": str(tmp_path / "no-model")}}


def test_ewma_is_the_baseline_without_a_model_s_counters() -> None:
    stoppers: list[Callable[[], object]] = []
    workers: list[Worker] = []
    parts = build_estimator("ewma", parse_controls({}), stoppers, workers)
    assert isinstance(parts.estimator, EwmaEstimator) and parts.version() == "ewma-baseline"
    assert parts.counters is None and parts.calibration is None
    assert stoppers == [] and workers == []


def test_auto_falls_back_to_the_baseline_and_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="xapp.app.wiring.estimator"):
        parts = build_estimator("auto", parse_controls(nowhere(tmp_path)), [], [])
    assert isinstance(parts.estimator, EwmaEstimator)
    assert any("capacity model not loadable" in r.getMessage() for r in caplog.records)


def test_model_refuses_to_start_without_it(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="capacity model not loadable"):
        build_estimator("model", parse_controls(nowhere(tmp_path)), [], [])
