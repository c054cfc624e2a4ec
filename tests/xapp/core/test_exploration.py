"""The exploration guard: a forecaster that learnt "this WAT is slow" cannot keep it locked out."""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np

from tests.xapp.core.test_loop import DEFAULTS, FakePublisher
from twin.policies import make_estimator, run_policy
from twin.scenarios import build
from xapp.adapters.sdl import SdlStateStore
from xapp.core.exploration import ExploringEstimator
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.loop import ControlLoop, LoopSettings
from xapp.core.policy_book import PolicyBook


class StuckForecaster:
    """Forecasts Wi-Fi at 75 Mbps forever (it only ever saw Wi-Fi under a small weight)."""

    version = "stuck-1"

    def step(self, frame: KpiFrame) -> CapacityForecast:
        median = np.where(frame.wat == "wifi", 75.0, 342.0)
        return CapacityForecast(median_mbps=median, lower_mbps=median * 0.9)


def _frame(delivered: list[float], saturated: list[float]) -> KpiFrame:
    return KpiFrame(time_s=0.0, cpe=np.array(["c", "c"]), wat=np.array(["nr", "wifi"]),
                    values={"delivered_mbps": np.array(delivered),
                            "saturated": np.array(saturated)})


def test_censored_rows_explore_upwards_and_measured_rows_keep_the_forecast() -> None:
    est = ExploringEstimator(StuckForecaster())
    wifi = []
    for _ in range(30):  # nr is the bottleneck, Wi-Fi delivers its small share, unsaturated
        wifi.append(est.step(_frame([342.0, 75.0], [1.0, 0.2])).median_mbps[1])
    # grows towards the EWMA's bound (4x what was delivered) until Wi-Fi becomes the bottleneck
    assert wifi[-1] >= 3 * 75.0
    assert all(b >= a for a, b in itertools.pairwise(wifi))
    measured = est.step(_frame([342.0, 75.0], [1.0, 1.0]))
    assert measured.median_mbps[1] == 75.0  # a saturated row is a measurement: no exploring
    assert (measured.lower_mbps <= measured.median_mbps).all()
    assert est.version == "stuck-1"


def test_the_model_as_the_xapp_runs_it_regains_wifi_on_lockin() -> None:
    s = build("lockin")
    oracle = run_policy(s, "oracle")
    guarded = run_policy(s, "xapp", estimator=make_estimator("model"))
    late = 1200  # a minute after the crowd left
    assert guarded.weights is not None
    w = guarded.weights[late:, 0, :].astype(float)
    assert (w[:, 1] / w.sum(axis=1)).mean() > 0.6  # Wi-Fi carries most again
    assert guarded.aggregate_mbps[late:].mean() > 0.8 * oracle.aggregate_mbps[late:].mean()


def test_a_model_far_from_what_saturated_subflows_deliver_gives_way_to_the_measurement() -> None:
    """make e2e's case: the radio says Gbps Wi-Fi, the backhaul delivers 8 Mbit/s, saturated.
    The stuck forecaster says 75 for Wi-Fi period after period; after a few measured periods
    the wrapper forecasts what Wi-Fi delivers, and nr (where the forecaster is right) keeps
    its forecast."""
    est = ExploringEstimator(StuckForecaster())
    out = [est.step(_frame([342.0, 8.0], [1.0, 1.0])) for _ in range(12)]
    assert out[0].median_mbps[1] == 75.0  # nothing graded yet
    assert out[-1].median_mbps[1] < 12.0 and out[-1].median_mbps[0] == 342.0
    assert est.out_of_domain() == 1
    # A row the forecaster cannot answer is the explorer's as before.
    assert np.isfinite(out[-1].lower_mbps).all()


def test_a_model_within_its_domain_is_never_set_aside() -> None:
    est = ExploringEstimator(StuckForecaster())
    for _ in range(50):  # measured within 10 % of the forecast, both WATs
        f = est.step(_frame([330.0, 70.0], [1.0, 1.0]))
    assert est.out_of_domain() == 0
    assert f.median_mbps.tolist() == [342.0, 75.0]


class PaperScale:
    """The shipped model on ``lifi-blockage``'s radio KPIs, which are at the source paper's scale:
    NR 300, Wi-Fi 860 and LiFi 2.8 Mbit/s for links of 12, 8 and 24 (issue 32's real-stack
    runs, the forecasts of the first period)."""

    version = "paper-1"
    MEDIAN: ClassVar[dict[str, float]] = {"nr": 302.0, "wifi": 864.0, "lifi": 2.8}
    LOWER: ClassVar[dict[str, float]] = {"nr": 260.0, "wifi": 848.0, "lifi": 1.1}

    def step(self, frame: KpiFrame) -> CapacityForecast:
        wat = frame.wat.tolist()
        return CapacityForecast(median_mbps=np.array([self.MEDIAN[w] for w in wat]),
                                lower_mbps=np.array([self.LOWER[w] for w in wat]))


class Links:
    """``lifi-blockage``'s three links behind the loop's weights, as the CPE agent reported them
    in issue 32's bad runs: a WAT at weight 0 is backup and carries nothing (delivered 0,
    saturated 0); a WAT with a weight carries its link's rate, saturated, except Wi-Fi, reported
    unsaturated (0 to 0.15) for the first dozen periods, so never graded.  Nothing flows before
    the first weights (the traffic starts after them)."""

    RATE: ClassVar[dict[str, float]] = {"nr": 12.0, "wifi": 8.0, "lifi": 24.0}
    WATS = ("nr", "wifi", "lifi")

    def __init__(self, pub: FakePublisher, rate: dict[str, float] | None = None) -> None:
        self.pub, self.rate = pub, rate or self.RATE

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        w = self.pub.last("cpe-1") if self.pub.sent else dict.fromkeys(self.WATS, 0)
        on = [w[x] > 0 for x in self.WATS]
        delivered = [self.rate[x] if o else 0.0 for x, o in zip(self.WATS, on, strict=True)]
        sat = [1.0 if o and x != "wifi" else 0.0 for x, o in zip(self.WATS, on, strict=True)]
        return KpiFrame(time_s=now_s, cpe=np.array(["cpe-1"] * 3), wat=np.array(self.WATS),
                        values={"delivered_mbps": np.array(delivered),
                                "saturated": np.array(sat), "up": np.ones(3)})


def _closed_loop(rate: dict[str, float] | None = None, ticks: int = 20
                 ) -> list[dict[str, int]]:
    pub = FakePublisher()
    loop = ControlLoop(Links(pub, rate), ExploringEstimator(PaperScale()), pub, None,
                       PolicyBook(DEFAULTS).resolver, SdlStateStore(),
                       settings=LoopSettings(control_period_s=1.0, lease_s=6.0))
    out = []
    for t in range(ticks):
        loop.tick(100.0 + t)
        out.append(pub.last("cpe-1"))
    return out


def test_a_wat_the_model_drops_unmeasured_is_tried_once_the_series_is_out_of_domain() -> None:
    """Issue 32's lifi-blockage start: the model's paper-scale forecasts give LiFi weight 0 (under
    1 % of the total), and a WAT at weight 0 is never measured.  Once NR's measurement shows the
    model off by 25x for this CPE, its ungraded forecasts (LiFi's, and Wi-Fi's, which carrying
    alone reported unsaturated) are set aside too: LiFi is tried, measured, and kept."""
    weights = _closed_loop()
    assert weights[0]["lifi"] == 0  # the model's first word: nothing measured yet
    first_on = next(i for i, w in enumerate(weights) if w["lifi"] > 0)
    assert first_on <= 3
    assert all(w["lifi"] > 0 and w["nr"] > 0 and w["wifi"] > 0 for w in weights[first_on:])


def test_a_wat_measured_too_slow_to_keep_pace_stays_off() -> None:
    """``paper-static``'s LiFi (0.6 Mbit/s beside 17 and 60): tried once, measured, switched off
    on its measurement, and the exploring estimate probes it again only now and then."""
    weights = _closed_loop({"nr": 17.0, "wifi": 60.0, "lifi": 0.6}, ticks=40)
    lifi_on = [w["lifi"] > 0 for w in weights]
    first_on = lifi_on.index(True)
    assert first_on <= 3 and not lifi_on[first_on + 1]
    assert sum(lifi_on) <= 0.25 * len(lifi_on)


def _blockage_frame(delivered: list[float], saturated: list[float],
                    up: tuple[float, ...] = (1.0, 1.0, 1.0)) -> KpiFrame:
    return KpiFrame(time_s=0.0, cpe=np.array(["c"] * 3), wat=np.array(["nr", "wifi", "lifi"]),
                    values={"delivered_mbps": np.array(delivered),
                            "saturated": np.array(saturated), "up": np.array(up)})


def test_ungraded_forecasts_of_a_series_out_of_domain_give_way_to_the_measurement() -> None:
    est = ExploringEstimator(PaperScale())
    frames = [_blockage_frame([8.0, 7.5, 0.0], [1.0, 0.0, 0.0]) for _ in range(4)]
    out = [est.step(f) for f in frames]
    assert out[0].median_mbps.tolist() == [302.0, 864.0, 2.8]  # nothing graded yet
    nr, wifi, lifi = out[-1].median_mbps
    assert nr < 12.0  # graded: out of domain, its measurement stands
    assert wifi <= 4 * 7.5  # ungraded: the explorer's bound, not the model's 864
    # Never delivered: no estimate, so it is tried (NaN); still carrying nothing the period
    # after while the CPE's other WATs carry, the trial failed, and it is off (0) for a while.
    first = next(i for i, f in enumerate(out) if np.isnan(f.median_mbps[2]))
    assert np.isnan(out[first].lower_mbps[2])
    assert [f.median_mbps[2] for f in out[first + 1:]] == [0.0] * (len(out) - first - 1)
    assert lifi == 0.0
    # Down is down, not unknown.
    down = _blockage_frame([8.0, 7.5, 0.0], [1.0, 0.0, 0.0], up=(1.0, 1.0, 0.0))
    assert est.step(down).median_mbps[2] == 0.0


def test_a_trickle_on_a_backup_subflow_is_no_measurement() -> None:
    """The real stack's bad start once more: LiFi's backup subflow carried 0.2 Mbit/s in the first
    period (unsaturated), then nothing.  That bounds the explorer's estimate at 4 x 0.2, under
    1 % of the others; the WAT was never measured, so it has no estimate and is tried."""
    est = ExploringEstimator(PaperScale())
    est.step(_blockage_frame([8.0, 7.5, 0.2], [1.0, 0.0, 0.0]))
    trickled = est.step(_blockage_frame([8.0, 7.5, 0.2], [1.0, 1.0, 0.0]))
    assert trickled.median_mbps[2] > 0  # carrying: the explorer's lower bound
    out = [est.step(_blockage_frame([8.0, 7.5, 0.0], [1.0, 1.0, 0.0])) for _ in range(3)]
    assert np.isnan(out[0].median_mbps[2])  # tried
    assert [f.median_mbps[2] for f in out[1:]] == [0.0, 0.0]  # the trial carried nothing
    # Once measured, what it carries is its capacity, also when it then carries nothing.
    est.step(_blockage_frame([8.0, 7.5, 0.5], [1.0, 1.0, 1.0]))
    after = est.step(_blockage_frame([8.0, 7.5, 0.0], [1.0, 1.0, 0.0]))
    assert 0.5 <= after.median_mbps[2] <= 4 * 0.5


def test_a_series_graded_within_the_domain_keeps_the_models_ungraded_forecasts() -> None:
    """Only a series with a WAT out of domain distrusts its ungraded WATs: where every graded
    WAT is within it, the model's forecast of an unmeasured one stands (LiFi stays at 2.8)."""
    est = ExploringEstimator(PaperScale())
    for _ in range(10):
        f = est.step(_blockage_frame([290.0, 850.0, 0.0], [1.0, 1.0, 0.0]))
    assert est.out_of_domain() == 0
    assert f.median_mbps.tolist() == [302.0, 864.0, 2.8]


class Following(PaperScale):
    """The model once NR's delivered rate is among its inputs: after a few periods its NR
    forecast follows the measurement (8.5), its Wi-Fi and LiFi forecasts stay at paper scale."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self, frame: KpiFrame) -> CapacityForecast:
        self.steps += 1
        f = super().step(frame)
        nr = (frame.wat == "nr") & (self.steps > 3)
        return CapacityForecast(median_mbps=np.where(nr, 8.5, f.median_mbps),
                                lower_mbps=np.where(nr, 8.0, f.lower_mbps))


def _both_directions(ul: list[float], ul_sat: list[float], dl: list[float],
                     dl_sat: list[float]) -> KpiFrame:
    wats = ["nr", "wifi", "lifi"]
    return KpiFrame(time_s=0.0, cpe=np.array(["c"] * 6), wat=np.array(wats * 2),
                    direction=np.array(["ul"] * 3 + ["dl"] * 3),
                    values={"delivered_mbps": np.array(ul + dl),
                            "saturated": np.array(ul_sat + dl_sat), "up": np.ones(6)})


def test_a_cpe_once_out_of_domain_distrusts_its_ungraded_forecasts_in_both_directions() -> None:
    """Issue 32's bench once more: the proxy reported every downlink period unsaturated (so no
    downlink grade), and the model's NR forecast came back to the measurement after a few
    periods.  The uplink's NR showed the model 25x off for this CPE: the downlink's ungraded
    forecasts are set aside too (LiFi, at weight 0 there, is tried: a WAT backup in one
    direction is backup in both), and Wi-Fi's stays set aside when NR's grade recovers."""
    est = ExploringEstimator(Following())
    frame = _both_directions([8.0, 7.5, 0.0], [1.0, 0.0, 0.0], [11.0, 7.4, 0.0], [0.0, 0.0, 0.0])
    out = [est.step(frame) for _ in range(14)]
    _, ul_wifi, ul_lifi, dl_nr, dl_wifi, dl_lifi = out[-1].median_mbps
    assert est.out_of_domain() == 0  # NR's forecast follows its measurement again
    assert ul_wifi <= 4 * 7.5 and dl_wifi <= 4 * 7.4 and dl_nr <= 4 * 11.0
    # LiFi, never measured, is tried in both directions (NaN), off between trials that carried
    # nothing (0); never the model's paper-scale 2.8.
    for col in (2, 5):
        lifi = [f.median_mbps[col] for f in out[1:]]
        assert any(np.isnan(v) for v in lifi) and all(np.isnan(v) or v == 0.0 for v in lifi)
    assert {ul_lifi, dl_lifi} <= {0.0} or (np.isnan(ul_lifi) and np.isnan(dl_lifi))


def test_a_trial_that_carried_nothing_waits_longer_each_time() -> None:
    """``paper-static`` on the real stack: LiFi's downlink in retransmission timeouts, never
    measured, was tried seven periods in a row carrying nothing.  Each trial that carries nothing
    while the CPE's other WATs do is followed by 4, 8, 16 ... periods off; carrying ends it, and
    a CPE with no traffic at all is not judged."""
    busy = _blockage_frame([8.0, 7.5, 0.0], [1.0, 1.0, 0.0])
    est = ExploringEstimator(PaperScale())
    lifi = [est.step(busy).median_mbps[2] for _ in range(20)]
    tried = [i for i, v in enumerate(lifi) if np.isnan(v)]
    first = tried[0]  # once NR's grade set the model aside for this CPE
    assert tried == [first, first + 5, first + 14]  # off 4, then 8 periods
    assert all(v == 0.0 for v in lifi[first:] if not np.isnan(v))
    carried = est.step(_blockage_frame([8.0, 7.5, 0.3], [1.0, 1.0, 0.0])).median_mbps[2]
    assert carried > 0  # it carried: the explorer's lower bound, and the waits are over
    assert np.isnan(est.step(busy).median_mbps[2])
    # A CPE that carried nothing at all had no traffic to offer: the trial is not judged.
    idle = _blockage_frame([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert all(np.isnan(est.step(idle).median_mbps[2]) for _ in range(3))
