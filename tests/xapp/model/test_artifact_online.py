"""Artifacts: signed skops loading, refusal of damaged ones, hot reload, bad KPIs."""

from __future__ import annotations

import fractions
import json
import shutil
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import skops.io as sio

from tests.support.polling import wait_until
from tests.xapp.model.conftest import KeyPair, write_signed
from xapp.core.forecast import CapacityEstimator, KpiFrame
from xapp.model import ArtifactError, ModelEstimator, ModelHolder, load, load_estimator
from xapp.model.artifact import LATEST, card_path, resolve
from xapp.model.estimator import CapacityRegressor


def _copy(model_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "models"
    shutil.copytree(model_dir, dst)
    return dst


def test_load_verifies_signature_and_families(model_dir: Path, signing_key: KeyPair) -> None:
    loaded = load(model_dir, public_key=signing_key.public_file)
    assert set(loaded.models) == {"cellular", "wifi", "lifi"}
    assert loaded.card["sha256"] and loaded.card["libraries"]["scikit-learn"]
    assert loaded.key_id == loaded.card["signing_key_id"]


def test_damaged_artifact_is_refused(model_dir: Path, tmp_path: Path,
                                     signing_key: KeyPair) -> None:
    d = _copy(model_dir, tmp_path)
    path = resolve(d)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="artifact changed after it was signed"):
        load(d, public_key=signing_key.public)


def test_untrusted_type_is_refused_even_when_signed(tmp_path: Path,
                                                    signing_key: KeyPair) -> None:
    evil = sio.dumps({"format": 1, "families": {"wifi": fractions.Fraction(1, 3)}})
    write_signed(tmp_path, evil, signing_key.private)
    with pytest.raises(ArtifactError, match="untrusted"):
        load(tmp_path, public_key=signing_key.public)


def _frame(t: float, values: dict[str, np.ndarray], wats: list[str]) -> KpiFrame:
    n = len(wats)
    return KpiFrame(time_s=t, cpe=np.array([f"c{i}" for i in range(n)]), wat=np.array(wats),
                    values=values)


def test_estimator_handles_bad_kpis_and_counts(model_dir: Path, signing_key: KeyPair) -> None:
    est = load_estimator(model_dir, public_key=signing_key.public_file)
    assert isinstance(est, CapacityEstimator)
    wats = ["nr", "wifi", "lifi", "wifi", "carrier-pigeon"]
    good = {"delivered_mbps": np.array([300.0, 800.0, 10.0, 500.0, 1.0]),
            "sinr_db": np.array([25.0, np.nan, np.nan, np.nan, np.nan]),
            "snr_db": np.array([np.nan, 35.0, 9.0, 30.0, np.nan])}
    for t in range(5):
        fc = est.step(_frame(float(t), good, wats))
    assert np.isfinite(fc.median_mbps[:4]).all() and np.isnan(fc.median_mbps[4])
    assert np.all(fc.lower_mbps[:4] <= fc.median_mbps[:4])
    bad = {"delivered_mbps": np.array([np.inf, -5.0, np.nan, np.nan, 1.0]),
           "sinr_db": np.array([500.0, np.nan, np.nan, np.nan, np.nan]),
           "snr_db": np.array([np.nan, np.nan, np.nan, np.nan, np.nan])}
    fc = est.step(_frame(5.0, bad, wats))
    c = est.counters
    assert c.values_non_finite == 1 and c.values_out_of_range == 2
    assert c.rows_unknown_wat == 6
    assert np.isfinite(fc.median_mbps[:3]).all()  # history still carries the WATs
    # A new CPE with nothing usable is unknown, not a crash.
    fc = est.step(_frame(6.0, {"delivered_mbps": np.array([np.nan])}, ["wifi"]))
    assert np.isnan(fc.median_mbps[0]) and c.rows_no_kpis >= 1


def test_hot_reload_swaps_good_and_refuses_damaged(model_dir: Path, tmp_path: Path,
                                                   signing_key: KeyPair) -> None:
    d = _copy(model_dir, tmp_path)
    holder = ModelHolder(d, signing_key.public_file)
    est = ModelEstimator(holder)
    first = holder.current.version
    assert not holder.poll()
    # A damaged new artifact named by LATEST: refused, the old model stays.
    bad = d / "capacity-broken.skops"
    bad.write_bytes(b"not a zip")
    card_path(bad).write_text(json.dumps({"sha256": "0" * 64}))
    (d / LATEST).write_text(bad.name + "\n")
    assert not holder.poll()
    assert holder.reload_failures == 1 and holder.current.version == first
    fc = est.step(_frame(0.0, {"delivered_mbps": np.array([100.0]),
                               "snr_db": np.array([30.0])}, ["wifi"]))
    assert np.isfinite(fc.median_mbps).all()
    # A good new artifact: swapped in.
    from xapp.model import artifact

    artifact.save(dict(holder.current.models), d, {"training": {"note": "second"}},
                  signing_key=signing_key.private)
    assert holder.poll()
    assert holder.current.version != first and holder.reloads == 1
    assert est.counters.as_dict()["model_reloads"] == 1
    assert est.counters.as_dict()["model_reload_failures"] == 1


def test_reload_thread_survives_bad_artifacts(model_dir: Path, tmp_path: Path,
                                              signing_key: KeyPair, other_key: KeyPair,
                                              trained_models: dict[str, CapacityRegressor]
                                              ) -> None:
    """Regression: an artifact with an unexpected family raised KeyError in the reload thread,
    which died, so later good artifacts were never loaded."""
    from tests.xapp.model import crafted
    from xapp.model import artifact

    d = _copy(model_dir, tmp_path)
    holder = ModelHolder(d, signing_key.public)
    est = ModelEstimator(holder)
    first = holder.current.version
    holder.start(interval_s=0.02)
    try:
        bad = [
            crafted.payload({**trained_models, "carrier-pigeon": trained_models["wifi"]},
                            {f: ["lag0"] for f in (*trained_models, "carrier-pigeon")}),
            crafted.payload(trained_models, {"cellular": 5, "wifi": None, "lifi": [1]}),
            crafted.payload({}),
        ]
        for i, data in enumerate(bad, start=1):
            write_signed(d, data, signing_key.private, name=f"capacity-bad{i}.skops")
            assert wait_until(partial(lambda n: holder.reload_failures >= n, i)), holder.last_error
            assert holder.alive and holder.current.version == first
        # Signed with another key: refused the same way.
        artifact.save(trained_models, d, {}, signing_key=other_key.private)
        # (A file written in steps may be polled, and refused, twice: wait for the reason.)
        assert wait_until(lambda: "signed by key" in holder.last_error), holder.last_error
        assert holder.current.version == first
        # A good one afterwards is loaded by the same thread.
        good = artifact.save(trained_models, d, {"training": {"note": "after"}},
                             signing_key=signing_key.private)
        assert wait_until(lambda: holder.current.path == good), holder.last_error
        assert holder.alive and holder.reloads == 1
        counts = est.counters.as_dict()
        assert counts["model_reload_failures"] >= 4 and counts["model_reloads"] == 1
    finally:
        holder.stop()
    assert not holder.alive


def test_poll_counts_unexpected_errors_and_keeps_the_model(
        model_dir: Path, tmp_path: Path, signing_key: KeyPair,
        monkeypatch: pytest.MonkeyPatch) -> None:
    d = _copy(model_dir, tmp_path)
    holder = ModelHolder(d, signing_key.public)
    first = holder.current

    def broken(*_args: object, **_kwargs: object) -> None:
        raise KeyError("a bug, not a bad file")

    monkeypatch.setattr("xapp.model.online.load", broken)
    (d / LATEST).write_text(resolve(d).name + "\n\n")
    assert not holder.poll()
    assert holder.reload_failures == 1 and holder.current is first
    assert "a bug" in holder.last_error


def test_unsigned_first_artifact_is_refused_at_start(model_dir: Path, tmp_path: Path,
                                                     signing_key: KeyPair) -> None:
    from xapp.model.signing import signature_path

    d = _copy(model_dir, tmp_path)
    signature_path(resolve(d)).unlink()
    with pytest.raises(ArtifactError, match="unsigned"):
        ModelHolder(d, signing_key.public_file)
