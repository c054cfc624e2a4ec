"""A finished run's weights and caps read back from its files, and the bench's report of saved
runs with this twin's column (`--replay`), without the real stack."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from tests.realstack.publishing import plan
from tests.realstack.replay import from_logs, load_applied, save_applied, trace_start
from twin.path_traces import build, predict
from twin.transport import Stack

REPO = Path(__file__).resolve().parents[2]
T0 = 1796632882.0  # the trace's start, epoch s


def _stamp(t: float) -> str:
    whole = math.floor(t)
    head = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{head}.{round((t - whole) * 1e9):09d}Z"


def _log(path: Path, rows: list[tuple[float, dict[str, object]]]) -> None:
    lines = ["not json: a stray line"]
    lines += [json.dumps({"time": _stamp(t), "level": "INFO", **r}) for t, r in rows]
    path.write_text("\n".join(lines) + "\n")


def _weights(t: float, text: str) -> tuple[float, dict[str, object]]:
    return t, {"msg": "weights applied", "weights": text, "mode": "fixed_split"}


def _link(t: float, usable: bool) -> tuple[float, dict[str, object]]:
    return t, {"msg": "link change", "wat": "lifi", "interface": "lifi0", "usable": usable}


def test_the_trace_start_weights_and_caps_come_back_from_the_logs(tmp_path: Path) -> None:
    tr = build("lifi-blockage", 20, 0)
    o = tr.outages[0]  # LiFi's carrier lost at 4.911 s for 1.174 s
    cut, back = T0 + o.start_s + 0.004, T0 + o.start_s + o.duration_s + 0.004
    _log(tmp_path / "agent-cpe.log", [
        _weights(T0 - 3.0, "nr=48 wifi=32 lifi=96"), _link(cut, False), _link(back, True),
        _weights(T0 + 10.2, "nr=60 wifi=40")])
    _log(tmp_path / "agent-proxy.log", [_weights(T0 + 2.7, "nr=1 wifi=2 lifi=3")])
    # The log lags the cut by its 4 ms: the start read back is that late too.
    begin = trace_start(tmp_path, tr)
    assert begin == pytest.approx(T0 + 0.004, abs=1e-6)
    w, c = from_logs(tmp_path, tr, "oracle", begin)
    assert w["ul"][0].tolist() == [48, 32, 96]
    # LiFi at 0 in both directions while its link is down (period 5's middle, 5.5 s), as the
    # agents report it; a WAT the log leaves out is at 0 too.
    assert w["ul"][5].tolist() == [48, 32, 0] and w["dl"][5].tolist() == [1, 2, 0]
    assert w["ul"][6].tolist() == [48, 32, 96]
    assert w["ul"][10].tolist() == [60, 40, 0]
    # No proxy weights before 2.7 s: the default scheduler's.
    assert w["dl"][1].tolist() == [1, 1, 1] and w["dl"][3].tolist() == [1, 2, 3]
    # The oracle's caps: the harness's for the period's true capacities.
    want = plan(tr.capacity("ul")[0])[1]
    np.testing.assert_allclose(c["ul"][0], np.where(np.isfinite(want), want, np.inf))
    assert np.isinf(c["dl"][1]).all()


def test_without_agents_the_run_is_the_default_schedulers(tmp_path: Path) -> None:
    tr = build("lifi-blockage", 20, 0)
    assert trace_start(tmp_path, tr) is None
    w, c = from_logs(tmp_path, tr, "default", None)
    assert (w["dl"] == 1).all() and np.isinf(c["ul"]).all()


def test_a_saved_run_is_read_back_as_saved_and_an_unplaceable_one_not_at_all(
        tmp_path: Path) -> None:
    tr = build("wifi-walk", 4, 0)  # no down outage: its logs cannot place the trace
    _log(tmp_path / "agent-cpe.log", [_weights(T0, "nr=1 wifi=1 lifi=1")])
    assert load_applied(tmp_path, tr, "ewma") is None
    w = {"dl": np.array([[1, 2, 0]] * 4), "ul": np.array([[3, 0, 1]] * 4)}
    c = {d: np.array([[5.0, np.inf, np.inf]] * 4) for d in ("dl", "ul")}
    save_applied(tmp_path, T0, w, c)
    got = load_applied(tmp_path, tr, "ewma")
    assert got is not None
    np.testing.assert_array_equal(got[0]["ul"], w["ul"])
    np.testing.assert_array_equal(got[1]["dl"], c["dl"])


def test_the_bench_recomputes_a_saved_reports_twin_column(tmp_path: Path) -> None:
    tr = build("lifi-blockage", 20, 0)
    run = tmp_path / "lifi-blockage" / "run1"
    (run / "default").mkdir(parents=True)
    (run / "oracle").mkdir()
    w = {d: np.tile(np.array([3, 2, 6]), (tr.periods, 1)) for d in ("dl", "ul")}
    c = {d: np.full((tr.periods, 3), np.inf) for d in ("dl", "ul")}
    save_applied(run / "oracle", T0, w, c)
    pols = ("default", "oracle")
    both = {"dl": dict.fromkeys(pols, 0.7), "ul": dict.fromkeys(pols, 0.7)}
    saved = {"scenarios": {"lifi-blockage": {
        **both, "spread": {d: {p: [0.7, 0.7] for p in pols} for d in both},
        "twin": {d: dict.fromkeys(pols, 0.94) for d in both},  # an older twin's
        "rtt_ms": {p: [40.0, 60.0] for p in pols}, "vs_default": {}, "vs_oracle": {}}},
        "runs": 1, "duration_s": 20, "seed": 0}
    (tmp_path / "realstack.json").write_text(json.dumps(saved))
    res = subprocess.run([sys.executable, str(REPO / "bench" / "bench_realstack.py"),
                          "--replay", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    twin = json.loads(res.stdout)["scenarios"]["lifi-blockage"]["twin"]
    # The bench's connection: no delay on the wire, and agents for every policy but default.
    assert twin["dl"]["default"] == round(predict(tr, "dl", stack=Stack(plays_delay=False)), 4)
    agents = Stack(plays_delay=False, carrier_reaction=True)
    assert twin["ul"]["oracle"] == round(predict(tr, "ul", w["ul"], c["ul"], agents, w["dl"]), 4)
