"""Both directions in the twin: uplink traces, per-direction runs and the shipped loop steering
each direction with its own weights."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import cast

import numpy as np
import pytest

from twin.fluid import IntArray, Observation, SimResult, simulate_duplex
from twin.link_models import NR_DL_SYMBOLS, NR_UL_PEAK_MBPS, NR_UL_SYMBOLS
from twin.loop_driver import LoopDriver
from twin.policies import TwinOptions, loop_policy, run_policy, run_with_oracle
from twin.policies import summary as summarise
from twin.scenarios import DIRECTIONS, SCENARIOS, Scenario, ScenarioError, build
from xapp.cli import main
from xapp.core.ewma import EwmaEstimator
from xapp.core.forecast import CapacityForecast, KpiFrame

#: ``mcw twin --scenario S --policy P --json`` (seed 0) of the one-direction twin (commit
#: 7508bbb, before directions existed): aggregate, oracle and lagged-oracle Mbps.  The downlink
#: must reproduce them: its traces are drawn from the same random stream, and the loop keeps
#: each direction's history and decisions apart.
ONE_DIRECTION_FIGURES = {
    ("paper-static", "fixed:30,100,1"): (1415.879, 1539.365, 1465.554),
    ("paper-static", "probe"): (740.885, 1539.365, 1465.554),
    ("wifi-walk", "fixed:30,100,1"): (763.707, 951.363, 892.421),
    ("wifi-walk", "probe"): (368.871, 951.363, 892.421),
    ("lockin", "equal"): (44.38, 1177.494, 1107.753),
    ("paper-static", "xapp"): (1378.007, 1539.365, 1465.554),
    ("wifi-walk", "xapp"): (850.11, 951.363, 892.421),
    ("lockin", "xapp"): (1035.378, 1177.494, 1107.753),
}


@pytest.mark.parametrize(("name", "policy"), sorted(ONE_DIRECTION_FIGURES))
def test_downlink_reproduces_the_one_direction_twin(name: str, policy: str) -> None:
    doc = summarise(run_with_oracle(build(name), policy))
    assert doc["direction"] == "dl"
    got = (doc["aggregate_mbps"], doc["oracle_mbps"], doc["lagged_oracle_mbps"])
    # Rounded to the JSON's 3 decimals; the sums run in the same order, so equal.
    assert got == ONE_DIRECTION_FIGURES[(name, policy)]


def test_uplink_of_the_paper_scenario() -> None:
    s = build("paper-static")
    dl, ul = s.capacity("dl")[:, 0, :].mean(axis=0), s.capacity("ul")[:, 0, :].mean(axis=0)
    # 5G: the TDD pattern's uplink symbols (32 of 136) against the downlink's (104)
    assert abs(NR_UL_PEAK_MBPS - 342.0 * 32 / 104) < 1e-9
    assert ul[0] / dl[0] == pytest.approx(NR_UL_SYMBOLS / NR_DL_SYMBOLS, rel=0.01)
    assert 0.25 <= ul[0] / dl[0] <= 1 / 3
    # Wi-Fi at 1 m: MCS 11 both ways, the same airtime: close, not equal
    assert ul[1] == pytest.approx(dl[1], rel=0.02)
    assert not np.allclose(s.capacity("ul")[:, 0, 1], s.capacity("dl")[:, 0, 1])
    # LiFi: the infrared uplink is the weaker direction
    assert 0.6 * dl[2] < ul[2] < 0.9 * dl[2]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_directions_share_the_geometry(name: str) -> None:
    s = build(name, n_cpes=3, seed=1, duration_s=60.0)
    dl, ul = s.capacity("dl"), s.capacity("ul")
    assert dl.shape == ul.shape and (ul >= 0).all() and np.isfinite(ul).all()
    assert np.array_equal(np.isfinite(s.rtt("ul")), ul > 0)
    blocked = s.context["lifi_blocked"] > 0
    assert (ul[..., 2][blocked] == 0).all() and (dl[..., 2][blocked] == 0).all()
    assert (ul[..., 0] < dl[..., 0]).all()  # 5G: fewer uplink symbols, at every step
    again = build(name, n_cpes=3, seed=1, duration_s=60.0, direction="ul")
    assert again.direction == "ul" and np.array_equal(again.capacity_mbps, ul)
    assert np.array_equal(again.toward("dl").capacity_mbps, dl)


def test_walk_ranks_the_wats_differently_per_direction() -> None:
    s = build("wifi-walk")
    dl, ul = s.capacity("dl")[:, 0, :], s.capacity("ul")[:, 0, :]
    nr_first_dl = (dl[:, 0] > dl[:, 1]).mean()
    nr_first_ul = (ul[:, 0] > ul[:, 1]).mean()
    assert nr_first_dl > 0.3 and nr_first_ul < 0.15


def test_bad_direction() -> None:
    with pytest.raises(ScenarioError, match="direction"):
        build("paper-static", direction="sideways")
    s = build("paper-static", duration_s=1.0)
    with pytest.raises(ScenarioError, match="direction"):
        s.toward("both")
    single = Scenario(name="x", dt_s=0.1, wats=s.wats, capacity_mbps=s.capacity_mbps,
                      rtt_ms=s.rtt_ms, context={})
    assert single.directions == ("dl",)
    with pytest.raises(ScenarioError, match="no ul"):
        single.toward("ul")


def _crossed(steps: int = 400) -> Scenario:
    """5G best downward, Wi-Fi best upward (a small cell with a crowded downlink AP, say)."""
    rng = np.random.default_rng(0)
    dl = np.array([300.0, 60.0, 10.0]) * (1 + 0.02 * rng.standard_normal((steps, 1, 3)))
    ul = np.array([40.0, 300.0, 10.0]) * (1 + 0.02 * rng.standard_normal((steps, 1, 3)))
    rtt = np.full((steps, 1, 3), 20.0)
    return Scenario(name="crossed", dt_s=0.1, wats=("nr", "wifi", "lifi"), capacity_mbps=dl,
                    rtt_ms=rtt, context={}, reverse=(ul, rtt.copy()))


def test_the_loop_steers_each_direction_with_its_own_weights() -> None:
    s = _crossed()
    res = run_policy(s, "xapp", estimator=EwmaEstimator())
    both = cast(dict[str, SimResult], res.extra["directions"])
    assert set(both) == set(DIRECTIONS) and both["dl"] is res
    end = slice(-100, None)  # the last 10 s
    dl_weights, ul_weights = both["dl"].weights, both["ul"].weights
    assert dl_weights is not None and ul_weights is not None
    w_dl = dl_weights[end, 0, :].mean(axis=0)
    w_ul = ul_weights[end, 0, :].mean(axis=0)
    assert int(np.argmax(w_dl)) == 0 and int(np.argmax(w_ul)) == 1  # nr down, wifi up
    for d in DIRECTIONS:
        oracle = run_policy(s.toward(d), "oracle")
        assert both[d].direction == d
        assert both[d].aggregate_mbps[end].mean() > 0.85 * oracle.aggregate_mbps[end].mean(), d
    # One message per CPE and tick carried both sets (mcw.weights.v2)
    driver = cast(LoopDriver, res.extra["driver"])
    assert driver.publisher.published == sum(len(r.published) for r in driver.reports) > 0


def test_agents_report_each_direction_as_its_sender_sees_it() -> None:
    s = _crossed(steps=50)
    frames: list[KpiFrame] = []

    class Spy:
        inner = EwmaEstimator()

        def step(self, frame: KpiFrame) -> CapacityForecast:
            frames.append(frame)
            return self.inner.step(frame)

    driver = LoopDriver(Spy(), loop_policy(TwinOptions()), period_steps=10, radio_kpis=False)
    observed: list[dict[str, Observation]] = []

    class Recording:
        period_steps = driver.period_steps

        def start(self, scenario: Scenario) -> Mapping[str, IntArray]:
            return driver.start(scenario)

        def update(self, obs: Mapping[str, Observation]) -> Mapping[str, IntArray]:
            observed.append(dict(obs))
            return driver.update(obs)

    simulate_duplex(s, Recording(), "xapp")
    assert len(frames) == len(observed) == 5
    for frame, obs in zip(frames, observed, strict=True):
        assert frame.direction is not None
        for d in DIRECTIONS:
            rows = (frame.direction == d) & (frame.cpe == "cpe0")
            assert frame.wat[rows].tolist() == list(s.wats)
            want = obs[d].delivered_mbps.mean(axis=0)[0]
            assert frame.column("delivered_mbps")[rows] == pytest.approx(want)
            sat = obs[d].saturated.mean(axis=0)[0]
            assert frame.column("saturated")[rows] == pytest.approx(sat)
    # the directions' capacities differ, so what each sender reports differs
    last = frames[-1]
    assert not np.allclose(last.column("delivered_mbps")[last.direction == "dl"],
                           last.column("delivered_mbps")[last.direction == "ul"])


def test_open_loop_policies_run_on_the_chosen_direction() -> None:
    s = build("paper-static", duration_s=30.0)
    dl = summarise(run_with_oracle(s, "oracle"))
    ul = summarise(run_with_oracle(s.toward("ul"), "oracle"))
    assert dl["direction"] == "dl" and ul["direction"] == "ul"
    # the uplink's 5G and LiFi are smaller; its Wi-Fi about the same
    assert ul["oracle_mbps"] < dl["oracle_mbps"]
    assert ul["per_wat_mbps"]["nr"] < 0.4 * dl["per_wat_mbps"]["nr"]


def test_cli_direction(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["twin", "--help"])
    assert "--direction" in capsys.readouterr().out
    docs = {}
    for d in DIRECTIONS:
        assert main(["twin", "--scenario", "wifi-walk", "--policy", "xapp", "--duration", "60",
                     "--direction", d, "--json"]) == 0
        docs[d] = json.loads(capsys.readouterr().out)
    assert docs["dl"]["direction"] == "dl" and docs["ul"]["direction"] == "ul"
    for doc in docs.values():
        assert 0.5 < doc["ratio_to_oracle"] <= 1.0
        assert 0.0 < doc["lagged_oracle_ratio"] <= 1.0
    assert docs["ul"]["oracle_mbps"] != docs["dl"]["oracle_mbps"]
    assert main(["twin", "--scenario", "paper-static", "--policy", "equal", "--duration", "5",
                 "--direction", "ul"]) == 0
    assert "direction ul" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["twin", "--direction", "both"])
    assert exc.value.code == 2


def test_closed_loop_telemetry_of_the_uplink() -> None:
    from twin.closed_loop_data import closed_loop_telemetry

    df = closed_loop_telemetry(["paper-static"], n_cpes=1, seeds=(3,), directions=("dl", "ul"))
    ul = df[df["cpe"].str.contains("-ul-")]
    dl = df[~df["cpe"].str.contains("-ul-")]
    assert len(ul) == len(dl) == 120 * 3
    nr = ul[ul["wat"] == "nr"]["capacity_mbps"].mean()
    assert nr == pytest.approx(NR_UL_PEAK_MBPS, rel=0.02)  # the uplink's truth, for labels
    assert (ul["delivered_mbps"] <= ul["capacity_mbps"] * (1 + 1e-5) + 1e-6).all()
