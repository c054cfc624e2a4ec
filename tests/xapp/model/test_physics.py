"""The physics check before a model goes live (issue 22): a signed model whose trees predict
1.5e301 Mbps passed hot reload, and made the weights nearly equal whatever the capacities.
Now forecasts on a reference input set must be finite and within each WAT's plausible range,
or the artifact is refused at start and at hot reload, and the model in force stays."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import REPO
from tests.xapp.model.conftest import KeyPair
from xapp.app.config import ConfigError, parse_controls
from xapp.model import ArtifactError, save
from xapp.model.artifact import release_public_key_path
from xapp.model.estimator import CapacityRegressor
from xapp.model.online import ModelEstimator, ModelHolder
from xapp.model.physics import PEAK_MBPS, reference_frames


def with_leaves(models: dict[str, CapacityRegressor], family: str, value: float, *,
                add: bool = False) -> dict[str, CapacityRegressor]:
    """The models with every leaf of ``family``'s first tree set to (or raised by) ``value``:
    what a broken trainer or a hostile key holder could sign."""
    out = dict(models)
    model = copy.deepcopy(models[family])
    nodes = model.model_._predictors[0][0].nodes
    leaves = nodes["is_leaf"] == 1
    nodes["value"][leaves] = nodes["value"][leaves] + value if add else value
    out[family] = model
    return out


def signed(models: dict[str, CapacityRegressor], directory: Path, key: KeyPair) -> Path:
    return save(models, directory, {"training": {"note": "physics test"}},
                signing_key=key.private)


def test_the_bundled_model_passes(tmp_path: Path) -> None:
    holder = ModelHolder(REPO / "models" / "default", release_public_key_path())
    assert holder.current.version


def test_reference_inputs_reach_half_of_each_peak() -> None:
    frames = reference_frames(PEAK_MBPS)
    delivered = frames[0].column("delivered_mbps")
    for wat, peak in PEAK_MBPS.items():
        rows = frames[0].wat == wat
        assert delivered[rows].min() == 0.0 and delivered[rows].max() == pytest.approx(peak / 2)


@pytest.mark.parametrize("family", ["cellular", "wifi", "lifi"])
def test_a_model_predicting_1e301_is_refused_at_start(
        trained_models: dict[str, CapacityRegressor], signing_key: KeyPair, tmp_path: Path,
        family: str) -> None:
    signed(with_leaves(trained_models, family, 1.5e301), tmp_path, signing_key)
    with pytest.raises(ArtifactError, match=r"fails the physics check: .* outside"):
        ModelHolder(tmp_path, signing_key.public)


def test_a_model_predicting_1e301_is_refused_at_hot_reload_and_the_old_one_stays(
        trained_models: dict[str, CapacityRegressor], signing_key: KeyPair,
        tmp_path: Path) -> None:
    signed(trained_models, tmp_path, signing_key)
    holder = ModelHolder(tmp_path, signing_key.public)
    good = holder.current.version
    estimator = ModelEstimator(holder)
    signed(with_leaves(trained_models, "wifi", 1.5e301), tmp_path, signing_key)
    assert holder.poll() is False
    assert holder.current.version == good
    assert holder.reload_failures == 1 and "physics check" in holder.last_error
    forecast = estimator.step(reference_frames(PEAK_MBPS)[0])
    assert np.nanmax(forecast.median_mbps) < 1e6
    # A sound artifact after it goes live as usual.  Not the first one again: a version is the
    # second it was signed and its hash, so the same models within a second are the same one.
    signed(with_leaves(trained_models, "wifi", 1.0, add=True), tmp_path, signing_key)
    assert holder.poll() is True and holder.current.version != good


def test_the_plausible_range_is_configurable(
        trained_models: dict[str, CapacityRegressor], signing_key: KeyPair,
        tmp_path: Path) -> None:
    """20 Gbit/s more on every Wi-Fi forecast: finite, and above 802.11ax's 9,608 Mbit/s peak;
    an operator who knows better raises the range."""
    signed(with_leaves(trained_models, "wifi", 20_000.0, add=True), tmp_path, signing_key)
    with pytest.raises(ArtifactError, match=r"for wifi .* outside \[-1, 9608\]"):
        ModelHolder(tmp_path, signing_key.public)
    holder = ModelHolder(tmp_path, signing_key.public, plausible_mbps={"wifi": 100_000.0})
    assert holder.plausible_mbps["wifi"] == 100_000.0 and holder.plausible_mbps["nr"] == 20_000


def test_controls_carry_the_plausible_range() -> None:
    controls = parse_controls({"model": {"plausible_mbps": {"wifi": 2400}}})
    assert controls.model.plausible_mbps == {"wifi": 2400}
    for bad in ({"wimax": 10}, {"wifi": 0}, {"wifi": "fast"}):
        with pytest.raises(ConfigError):
            parse_controls({"model": {"plausible_mbps": bad}})
    with pytest.raises(ValueError, match="unknown WATs"):
        ModelHolder(REPO / "models" / "default", release_public_key_path(),
                    plausible_mbps={"wimax": 10.0})
