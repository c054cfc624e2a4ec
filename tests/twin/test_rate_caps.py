"""The twin's rate-caps backend (twin.rate_caps), the loop driving it, and bench_shares's
comparison with a netns report."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from twin.loop_driver import LoopDriver
from twin.policies import TwinOptions, TwinPolicyError, run_policy
from twin.rate_caps import HTB_FLOOR_MBPS, agent_caps, deliver_caps, predict
from twin.scenarios import build

INF = math.inf
NAN = math.nan
LINKS = np.array([24.0, 16.0, 8.0])  # nr, wifi, lifi: the agent's TestCaps rates
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("weights", "caps", "want"), [
    # kernel-agent/backend/mptcpshares TestCaps, from the link rates:
    ([24, 16, 8], None, [INF, INF, INF]),
    ([1, 1, 1], None, [8, 8, INF]),
    ([70, 30, 0], None, [INF, 24 / 0.7 * 0.3, INF]),
    ([3, 0, 1], None, [INF, INF, INF]),
    ([254, 0, 1], None, [INF, INF, 24 * 255 / 254 / 255]),
    # TestCapsFromMessage: the message decides.
    ([70, 30, 0], [14, 6, NAN], [14, 6, INF]),
    ([1, 0, 0], [5, 3, NAN], [5, INF, INF]),
    ([1, 0, 1], [30, NAN, 4], [INF, INF, 4]),
    ([1, 1, 0], [NAN, 2, NAN], [INF, 2, INF]),
    ([1, 0, 0], [0.001, NAN, NAN], [HTB_FLOOR_MBPS, INF, INF]),
])
def test_agent_caps_mirror_the_go_backend(weights: list[int], caps: list[float] | None,
                                          want: list[float]) -> None:
    got = agent_caps(np.array(weights), None if caps is None else np.array(caps), LINKS)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_deliver_caps() -> None:
    cap = np.array([[20.0, 20.0, 0.0], [20.0, 20.0, 5.0], [0.0, 20.0, 5.0]])
    w = np.array([[70, 30, 0], [1, 0, 0], [1, 0, 0]])
    caps = np.array([[INF, 8.571, INF], [INF, INF, INF], [INF, INF, INF]])
    rate, total, sat = deliver_caps(cap, w, caps)
    # fixed_split 70/30: nr its link, wifi its cap (not path-limited).
    np.testing.assert_allclose(rate[0], [20.0, 8.571, 0.0])
    assert sat[0].tolist() == [True, False, False]
    # Weight 0 is backup: nothing while nr is up ...
    np.testing.assert_allclose(rate[1], [20.0, 0.0, 0.0])
    # ... everything the backups can carry when no weighted WAT is up.
    np.testing.assert_allclose(rate[2], [0.0, 20.0, 5.0])
    assert sat[2].tolist() == [False, True, True]
    np.testing.assert_allclose(total, rate.sum(axis=-1))
    # Efficiency scales every rate.
    np.testing.assert_allclose(deliver_caps(cap, w, caps, efficiency=0.5)[0], rate / 2)


def test_predict_the_netns_scenarios() -> None:
    links = {"nr": 24.0, "wifi": 16.0, "lifi": 8.0}
    lb = predict(links, {"nr": 24, "wifi": 16, "lifi": 8})
    assert lb.total == pytest.approx(48.0) and lb.caps_mbps == {"nr": None, "wifi": None,
                                                                "lifi": None}
    off = predict(links, {"nr": 24, "wifi": 0, "lifi": 8})
    assert off.mbps["wifi"] == 0.0 and off.total == pytest.approx(32.0)
    split = predict({"nr": 20.0, "wifi": 20.0}, {"nr": 70, "wifi": 30})
    assert split.share("nr") == pytest.approx(0.7)
    assert split.total == pytest.approx(20 / 0.7)
    sent = predict({"nr": 20.0, "wifi": 20.0}, {"nr": 70, "wifi": 30}, {"nr": 14, "wifi": 6})
    assert sent.mbps == {"nr": 14.0, "wifi": 6.0}
    with pytest.raises(ValueError, match="every weight"):
        predict(links, {"nr": 0})
    with pytest.raises(ValueError, match="without a path"):
        predict(links, {"lte": 1})
    with pytest.raises(ValueError, match="> 0"):
        predict({"nr": 0.0}, {"nr": 1})


def test_the_loop_steers_rate_caps_agents_with_caps() -> None:
    sc = build("paper-static", direction="ul", duration_s=20)
    res = run_policy(sc, "xapp", TwinOptions(backend="rate-caps"))
    driver = res.extra["driver"]
    assert isinstance(driver, LoopDriver)
    # Both appliers (the CPE's ul, the proxy's dl) got caps from the loop.
    assert np.isfinite(driver.caps["ul"]).any() and np.isfinite(driver.caps["dl"]).any()
    wrr = run_policy(sc, "xapp", TwinOptions(backend="wrr"))
    other = wrr.extra["driver"]
    assert isinstance(other, LoopDriver)
    assert not np.isfinite(other.caps["ul"]).any()
    # Rate caps decouple the WATs: no WAT holds the others back, so the uplink carries at
    # least what WRR does and never more than the capacities.
    assert res.aggregate_mbps.mean() >= wrr.aggregate_mbps.mean() * 0.99
    assert (res.aggregate_mbps <= res.capacity_sum_mbps + 1e-6).all()
    with pytest.raises(TwinPolicyError, match="xapp policy only"):
        run_policy(sc, "equal", TwinOptions(backend="rate-caps"))
    with pytest.raises(TwinPolicyError, match="unknown backend"):
        run_policy(sc, "xapp", TwinOptions(backend="bpf"))


def test_cli_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from xapp.cli import main

    assert main(["twin", "--scenario", "paper-static", "--direction", "ul", "--duration", "10",
                 "--backend", "rate-caps", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["backend"] == "rate-caps" and doc["direction"] == "ul"


# --- bench/bench_shares.py against a hand-written report ---------------------------------


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_shares",
                                                  ROOT / "bench" / "bench_shares.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_shares"] = mod
    spec.loader.exec_module(mod)
    return mod


REPORT = {
    "schema": "mcw.netns-shares-report.v1", "kernel": "6.18.0", "loadavg": [1.0, 0.8, 0.5],
    "window_s": 3,
    "topologies": [
        {"name": "three paths",
         "paths": [{"wat": "nr", "mbps": 24, "buffer_ms": 50},
                   {"wat": "wifi", "mbps": 16, "buffer_ms": 50},
                   {"wat": "lifi", "mbps": 8, "buffer_ms": 300}],
         "scenarios": [
             {"name": "baseline", "direction": "ul", "backend": "default",
              "applied_caps_mbps": {}, "path_mbps": {"nr": 20.1, "wifi": 10.2, "lifi": 5.0},
              "byte_shares": {"nr": 0.57, "wifi": 0.29, "lifi": 0.14}, "aggregate_mbps": 35.3,
              "settle_s": None},
             {"name": "load_balancing", "direction": "ul", "backend": "mptcp-shares",
              "mode": "load_balancing", "weights": {"nr": 24, "wifi": 16, "lifi": 8},
              "applied_caps_mbps": {}, "path_mbps": {"nr": 22.0, "wifi": 15.0, "lifi": 6.5},
              "byte_shares": {"nr": 0.506, "wifi": 0.345, "lifi": 0.149},
              "aggregate_mbps": 43.5, "settle_s": None},
             {"name": "wat_off", "direction": "ul", "backend": "mptcp-shares",
              "mode": "load_balancing", "weights": {"nr": 24, "wifi": 0, "lifi": 8},
              "applied_caps_mbps": {}, "path_mbps": {"nr": 23.0, "wifi": 0.0, "lifi": 7.0},
              "byte_shares": {"nr": 0.767, "wifi": 0.0, "lifi": 0.233},
              "aggregate_mbps": 30.0, "settle_s": 0.4, "settle_criterion": "wifi < 2%"}]},
        {"name": "two equal paths",
         "paths": [{"wat": "nr", "mbps": 20, "buffer_ms": 50},
                   {"wat": "wifi", "mbps": 20, "buffer_ms": 50}],
         "scenarios": [
             {"name": "fixed_split", "direction": "ul", "backend": "mptcp-shares",
              "mode": "fixed_split", "weights": {"nr": 70, "wifi": 30},
              "applied_caps_mbps": {"wifi": 8.571428},
              "path_mbps": {"nr": 19.0, "wifi": 8.4}, "byte_shares": {"nr": 0.693, "wifi": 0.307},
              "aggregate_mbps": 27.4, "settle_s": 0.2, "window_s": 3},
             {"name": "caps_from_message", "direction": "ul", "backend": "mptcp-shares",
              "mode": "fixed_split", "weights": {"nr": 70, "wifi": 30},
              "caps_mbps_sent": {"nr": 14, "wifi": 6}, "applied_caps_mbps": {"nr": 14, "wifi": 6},
              "path_mbps": {"nr": 13.0, "wifi": 5.9}, "byte_shares": {"nr": 0.688, "wifi": 0.312},
              "aggregate_mbps": 18.9, "settle_s": 0.3}]},
    ]}


def test_bench_compares_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    got = {c.scenario: c for c in bench.compare(REPORT)}
    assert got["baseline"].predicted_total == pytest.approx(48.0)
    assert got["load_balancing"].ratio == pytest.approx(43.5 / 48.0)
    assert got["load_balancing"].within_target
    assert got["baseline"].within_target is False  # 35.3 of 48: the default scheduler's loss
    assert got["wat_off"].predicted_mbps["wifi"] == 0.0
    assert got["wat_off"].path_ratio("wifi") is None
    split = got["fixed_split"]
    assert split.model_caps["wifi"] == pytest.approx(split.applied_caps["wifi"], rel=1e-5)
    assert split.predicted_shares["nr"] == pytest.approx(0.7) and split.window_s == 3.0
    assert got["caps_from_message"].predicted_total == pytest.approx(20.0)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(REPORT))
    assert bench.main(["--report", str(path), "--report", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["runs"]) == 2
    first = doc["runs"][0]["scenarios"][1]
    assert first["aggregate"]["ratio"] == pytest.approx(0.9062, abs=1e-4)
    assert first["aggregate"]["within_15pct"] is True
    assert bench.main(["--report", str(path)]) == 0
    text = capsys.readouterr().out
    assert "three paths / load_balancing" in text and "ratio over 2 runs" not in text
    assert bench.main(["--report", str(path), "--report", str(path)]) == 0
    assert "ratio over 2 runs: median 0.906" in capsys.readouterr().out


@pytest.mark.parametrize(("mutate", "match"), [
    (lambda r: r.update(schema="other"), "not a mcw.netns-shares-report.v1"),
    (lambda r: r.update(topologies=[]), "no topologies"),
    (lambda r: r["topologies"][0].update(paths=[]), "paths"),
    (lambda r: r["topologies"][0]["paths"][0].update(mbps=-1), "mbps"),
    (lambda r: r["topologies"][0]["scenarios"][1].update(weights={"lte": 1}), "weights"),
    (lambda r: r["topologies"][0]["scenarios"][1].update(weights={"nr": 0}), "every weight"),
    (lambda r: r["topologies"][0]["scenarios"][1].update(path_mbps={"nr": "x"}), "path_mbps"),
    (lambda r: r["topologies"][0]["scenarios"][1].update(aggregate_mbps=True), "aggregate"),
])
def test_bench_refuses_bad_reports(mutate, match: str) -> None:  # type: ignore[no-untyped-def]
    bench = _bench()
    report = json.loads(json.dumps(REPORT))
    mutate(report)
    with pytest.raises(bench.ReportError, match=match):
        bench.compare(bench.load_report(json.dumps(report).encode()))


def test_bench_load_report_bounds() -> None:
    bench = _bench()
    with pytest.raises(bench.ReportError, match="at most"):
        bench.load_report(b" " * (bench.MAX_BYTES + 1))
    with pytest.raises(bench.ReportError, match="not JSON"):
        bench.load_report(b"\xff")
    with pytest.raises(bench.ReportError, match="not JSON"):
        bench.load_report(b"[" * 100_000)


CONTROL_POLICY = {"mode": "load_balancing",
                  "rules": [{"name": "control", "match": {"destination_ports": [5302]},
                             "mode": "smallest_delay", "urgent": True}]}


def test_the_rate_caps_agents_take_classes_as_in_service() -> None:
    # The simulated mptcp-shares agents report capabilities.max_classes 8: the loop sends the
    # policy's rules as classes with both sets, and the agents hold them.
    sc = build("wifi-walk", duration_s=5)
    res = run_policy(sc, "xapp", TwinOptions(backend="rate-caps", a1_policy=CONTROL_POLICY))
    driver = res.extra["driver"]
    assert isinstance(driver, LoopDriver)
    assert sum(r.classes_withheld for r in driver.reports) == 0
    for d in ("dl", "ul"):
        (control,) = driver.classes[d][0]
        assert control.name == "control" and control.urgent and control.caps_mbps
        assert driver.applied[d].any
    # A WRR agent takes none: the loop withholds them, as from an agent before classes.
    wrr = run_policy(sc, "xapp", TwinOptions(backend="wrr", a1_policy=CONTROL_POLICY))
    other = wrr.extra["driver"]
    assert isinstance(other, LoopDriver)
    assert sum(r.classes_withheld for r in other.reports) > 0
    assert other.classes["ul"][0] == ()


def test_classes_lapse_with_the_lease() -> None:
    from xapp.core.ewma import EwmaEstimator
    from xapp.core.traffic import ClassSet, TrafficMatch

    driver = LoopDriver(EwmaEstimator(), {}, 10, backend="rate-caps")
    driver.start(build("wifi-walk", duration_s=2))
    held = ClassSet("control", TrafficMatch(ports=((5302, 5302),)), "smallest_delay",
                    {"nr": 1, "wifi": 0, "lifi": 0})
    driver._apply([{"cpe_id": "cpe0", "lease_s": 1.0,
                    "dl": {"weights": {"nr": 1, "wifi": 1, "lifi": 1}},
                    "ul": {"weights": {"nr": 1, "wifi": 1, "lifi": 1},
                           "classes": [held.to_dict()]}}])
    assert driver.classes["ul"][0] == (held,) and driver.applied["ul"].any
    driver._now = 1.0  # the lease runs out without a refresh: safe weights, no classes
    driver._apply([])
    assert not driver.classes["ul"][0] and not driver.applied["ul"].any
