"""``bench/soak.py``'s schedule and memory figures, on hand-made samples."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak", REPO / "bench" / "soak.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_schedule_is_seeded_and_leaves_the_warmup_and_the_tail_quiet(soak: ModuleType) -> None:
    keys = ["broker-restart", "redis-restart", "influx-away"]
    plan = soak.schedule(60, 72, keys, 33, 60.0)
    assert plan == soak.schedule(60, 72, keys, 33, 60.0)
    assert plan != soak.schedule(60, 72, keys, 34, 60.0)
    assert len(plan) == 72
    assert all(60.0 <= p.at_s <= 3600 - soak.QUIET_TAIL_S for p in plan)
    assert [p.at_s for p in plan] == sorted(p.at_s for p in plan)
    assert {p.key for p in plan} == set(keys)


def _samples(soak: ModuleType, rss: list[float], pid: int = 7, every_s: float = 60.0
             ) -> list[object]:
    return [soak.Sample(i * every_s, pid, v, 0.0, {}, 0.0) for i, v in enumerate(rss)]


def test_a_steady_climb_shows_in_the_last_half(soak: ModuleType) -> None:
    # 1 MiB/min from 200 MiB over 10 minutes: the last half (min 5..10) rises 5 of 205.
    fig = soak.memory_figures(_samples(soak, [200.0 + m for m in range(11)]))
    assert fig["last_half_slope_mib_per_min"] == pytest.approx(1.0)
    assert fig["last_half_growth_pct"] == pytest.approx(100 * 5 / 205, abs=0.01)
    assert (fig["start_mib"], fig["peak_mib"], fig["end_mib"]) == (200.0, 210.0, 210.0)


def test_a_flat_run_with_noise_has_no_slope(soak: ModuleType) -> None:
    fig = soak.memory_figures(_samples(soak, [220.0, 230.0, 231.0, 230.0, 231.0, 230.0, 231.0]))
    assert abs(fig["last_half_slope_mib_per_min"]) < 0.5
    assert fig["peak_mib"] == 231.0


def test_a_restart_keeps_the_longest_stretch(soak: ModuleType) -> None:
    first = _samples(soak, [250.0 + m for m in range(8)], pid=1)
    second = _samples(soak, [200.0, 200.0, 200.0], pid=2)
    fig = soak.memory_figures(first + second)
    assert fig["restarts"] == 1
    assert fig["samples"] == 8 and fig["start_mib"] == 250.0


def test_children_count_in_the_total(soak: ModuleType) -> None:
    samples = [soak.Sample(i * 10.0, 7, 100.0, 0.0, {"python3[8]": 20.0 + i}, 0.0)
               for i in range(6)]
    assert soak.memory_figures(samples, "total")["end_mib"] == 125.0
    assert soak.memory_figures(samples, "xapp")["end_mib"] == 100.0


def test_summary_prints_the_figures(soak: ModuleType) -> None:
    fig = soak.memory_figures(_samples(soak, [200.0 + m for m in range(11)]))
    doc = {"minutes": 10.0, "cpes": 200, "agents": 10, "seed": 33, "load1_mean": 1.5,
           "rss": {"xapp": fig, "total": fig}, "children": [], "csv": "a.csv", "png": "a.png",
           "faults": {"injected": 12, "recovered": 12, "all_checks_passed": 12,
                      "by_kind": {"broker-restart": 12}}}
    text = soak.summary(doc)
    assert "start 200.0 MiB, peak 210.0, end 210.0" in text
    assert "slope +1.000 MiB/min" in text and "12 recovered" in text
