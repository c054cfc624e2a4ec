"""Artifacts: hash-verified skops loading, refusal of damaged ones, hot reload, bad KPIs."""

from __future__ import annotations

import fractions
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import skops.io as sio

from xapp.core.forecast import CapacityEstimator, KpiFrame
from xapp.model import ArtifactError, ModelEstimator, ModelHolder, load, load_estimator
from xapp.model.artifact import LATEST, card_path, resolve


def _copy(model_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "models"
    shutil.copytree(model_dir, dst)
    return dst


def test_load_verifies_hash_and_families(model_dir: Path) -> None:
    loaded = load(model_dir)
    assert set(loaded.models) == {"cellular", "wifi", "lifi"}
    assert loaded.card["sha256"] and loaded.card["libraries"]["scikit-learn"]


def test_damaged_artifact_is_refused(model_dir: Path, tmp_path: Path) -> None:
    d = _copy(model_dir, tmp_path)
    path = resolve(d)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="SHA-256"):
        load(d)


def test_untrusted_type_is_refused_even_with_matching_hash(model_dir: Path,
                                                           tmp_path: Path) -> None:
    d = _copy(model_dir, tmp_path)
    path = resolve(d)
    evil = sio.dumps({"format": 1, "families": {"wifi": fractions.Fraction(1, 3)}})
    path.write_bytes(evil)
    card = json.loads(card_path(path).read_text())
    import hashlib

    card["sha256"] = hashlib.sha256(evil).hexdigest()
    card_path(path).write_text(json.dumps(card))
    with pytest.raises(ArtifactError, match="untrusted"):
        load(d)


def _frame(t: float, values: dict[str, np.ndarray], wats: list[str]) -> KpiFrame:
    n = len(wats)
    return KpiFrame(time_s=t, cpe=np.array([f"c{i}" for i in range(n)]), wat=np.array(wats),
                    values=values)


def test_estimator_handles_bad_kpis_and_counts(model_dir: Path) -> None:
    est = load_estimator(model_dir)
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


def test_hot_reload_swaps_good_and_refuses_damaged(model_dir: Path, tmp_path: Path) -> None:
    d = _copy(model_dir, tmp_path)
    holder = ModelHolder(d)
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

    artifact.save(dict(holder.current.models), d, {"training": {"note": "second"}})
    assert holder.poll()
    assert holder.current.version != first and holder.reloads == 1
