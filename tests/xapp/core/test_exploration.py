"""The exploration guard: a forecaster that learnt "this WAT is slow" cannot keep it locked out."""

from __future__ import annotations

import itertools

import numpy as np

from twin.policies import make_estimator, run_policy
from twin.scenarios import build
from xapp.core.exploration import ExploringEstimator
from xapp.core.forecast import CapacityForecast, KpiFrame


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
