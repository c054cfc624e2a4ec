"""What the loader refuses after the signature: sizes above the caps, arrays whose headers
declare more than the archive holds, payloads without the families the xApp needs, malformed
feature names and unsound trees.  Each artifact here is crafted and signed with the test key,
so it reaches the checks a hostile key holder or a broken trainer would reach."""

from __future__ import annotations

import copy
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.xapp.model import crafted
from tests.xapp.model.conftest import KeyPair, write_signed
from xapp.model import ArtifactError, Limits, load, save
from xapp.model.artifact import resolve
from xapp.model.estimator import CapacityRegressor
from xapp.model.payload import ARTIFACT_FORMAT

_MiB = 1 << 20


def _base(model_dir: Path) -> bytes:
    return resolve(model_dir).read_bytes()


def _load_signed(tmp_path: Path, data: bytes, key: KeyPair, limits: Limits | None = None
                 ) -> None:
    write_signed(tmp_path, data, key.private)
    if limits is None:
        load(tmp_path, public_key=key.public)
    else:
        load(tmp_path, public_key=key.public, limits=limits)


def test_npy_header_declaring_4_gib_is_refused_before_allocating(
        model_dir: Path, tmp_path: Path, signing_key: KeyPair) -> None:
    """Regression: a small signed artifact whose array header declares (2**29,) float64 made
    np.load allocate 4 GiB before finding the data missing."""
    base = _base(model_dir)
    bomb = crafted.with_array(base, crafted.array_names(base)[0],
                              crafted.npy_header((2**29,)) + bytes(64))
    assert len(bomb) < 2 * _MiB
    tracemalloc.start()
    try:
        with pytest.raises(ArtifactError, match="declares 4294967296 bytes"):
            _load_signed(tmp_path, bomb, signing_key)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * _MiB


@pytest.mark.parametrize(("header", "reason"), [
    (crafted.npy_header((2**40, 2**40)), "declares"),
    (crafted.npy_header((3,), "|O"), "Python objects"),
    (crafted.npy_header((2**62,), [("a", "V0")]), "zero-size"),
    (b"\x93NUMPY\x03\x00" + bytes(8), "version"),
    (b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 20, "malformed archive"),
    (b"not an npy file", "malformed archive"),
])
def test_bogus_npy_headers_are_refused(model_dir: Path, tmp_path: Path, signing_key: KeyPair,
                                       header: bytes, reason: str) -> None:
    base = _base(model_dir)
    data = crafted.with_array(base, crafted.array_names(base)[0], header + bytes(16))
    with pytest.raises(ArtifactError, match=reason):
        _load_signed(tmp_path, data, signing_key)


def test_member_declaring_a_huge_uncompressed_size_is_refused(
        model_dir: Path, tmp_path: Path, signing_key: KeyPair) -> None:
    base = _base(model_dir)
    data = crafted.declare_size(base, crafted.array_names(base)[0], 0xFFFF_0000)
    with pytest.raises(ArtifactError, match="uncompressed bytes, above the cap"):
        _load_signed(tmp_path, data, signing_key)


@pytest.mark.parametrize(("limits", "reason"), [
    (Limits(max_file_bytes=1000), "above the 1000-byte cap"),
    (Limits(max_members=3), "archive members, above the cap of 3"),
    (Limits(max_schema_bytes=1000), "schema.json declares"),
    (Limits(max_uncompressed_bytes=1000), "uncompressed bytes"),
    (Limits(max_card_bytes=10), "card"),
])
def test_caps_are_checked_before_parsing(model_dir: Path, tmp_path: Path,
                                         signing_key: KeyPair, limits: Limits,
                                         reason: str) -> None:
    with pytest.raises(ArtifactError, match=reason):
        _load_signed(tmp_path, _base(model_dir), signing_key, limits)


def _nest(schema: Any, depth: int = 200) -> Any:
    for _ in range(depth):
        schema = {"__class__": "list", "content": [schema]}
    return schema


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda parts: {**parts, "evil.pkl": b"\x80\x04."}, "unexpected archive member"),
    (lambda parts: {k: v for k, v in parts.items() if k != "schema.json"}, "no schema.json"),
    (lambda parts: {**parts, "schema.json": b"[" * 100_000}, "schema.json: nested deeper"),
    (lambda parts: {**parts, "schema.json": b"\xff\xfe"}, "schema.json: not UTF-8"),
])
def test_unexpected_archive_contents_are_refused(
        model_dir: Path, tmp_path: Path, signing_key: KeyPair,
        edit: Callable[[dict[str, bytes]], dict[str, bytes]], reason: str) -> None:
    data = crafted.rezip(edit(crafted.members(_base(model_dir))))
    with pytest.raises(ArtifactError, match=reason):
        _load_signed(tmp_path, data, signing_key)


def test_deep_schema_is_refused(model_dir: Path, tmp_path: Path, signing_key: KeyPair) -> None:
    data = crafted.with_schema(_base(model_dir), _nest)
    with pytest.raises(ArtifactError, match="nested deeper than 64"):
        _load_signed(tmp_path, data, signing_key)


def test_artifact_without_families_is_refused(tmp_path: Path, signing_key: KeyPair) -> None:
    """Regression: an artifact with no families loaded, and every forecast became NaN."""
    with pytest.raises(ArtifactError, match="no model for families cellular, wifi, lifi"):
        _load_signed(tmp_path, crafted.payload({}), signing_key)


def test_artifact_missing_a_family_is_refused(
        tmp_path: Path, signing_key: KeyPair,
        trained_models: dict[str, CapacityRegressor]) -> None:
    data = crafted.payload({"wifi": trained_models["wifi"]})
    with pytest.raises(ArtifactError, match="no model for families cellular, lifi"):
        _load_signed(tmp_path, data, signing_key)


def test_unexpected_family_is_an_artifact_error(
        tmp_path: Path, signing_key: KeyPair,
        trained_models: dict[str, CapacityRegressor]) -> None:
    """Regression: an unknown family raised KeyError out of the loader."""
    models = {**trained_models, "carrier-pigeon": trained_models["wifi"]}
    names = {fam: ["lag0"] for fam in models}
    with pytest.raises(ArtifactError, match="unknown families 'carrier-pigeon'"):
        _load_signed(tmp_path, crafted.payload(models, names), signing_key)


@pytest.mark.parametrize("names", [
    {"cellular": 5, "wifi": None, "lifi": {"a": 1}},
    {"cellular": [1, 2, 3], "wifi": "lag0", "lifi": []},
    {"cellular": [["lag0"]], "wifi": [None], "lifi": [3.5]},
    [],
    "feature names",
])
def test_malformed_feature_names_are_an_artifact_error(
        tmp_path: Path, signing_key: KeyPair, trained_models: dict[str, CapacityRegressor],
        names: Any) -> None:
    """Regression: feature names of the wrong type raised TypeError out of the loader."""
    with pytest.raises(ArtifactError, match=r"features|feature names"):
        _load_signed(tmp_path, crafted.payload(trained_models, names), signing_key)


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("left", 60_000, "split points outside"),
    ("right", 0, "split points outside"),
    ("feature_idx", 10_000, "split points outside"),
    ("feature_idx", -1, "split points outside"),
    ("is_categorical", 1, "categorical split"),
])
def test_unsound_trees_are_refused_before_predicting(
        tmp_path: Path, signing_key: KeyPair, trained_models: dict[str, CapacityRegressor],
        field: str, value: int, reason: str) -> None:
    bad = copy.deepcopy(trained_models["wifi"])
    nodes = bad.model_._predictors[0][0].nodes
    nodes[field][0] = value  # the root is a split in every tree of the test model
    data = crafted.payload({**trained_models, "wifi": bad})
    with pytest.raises(ArtifactError, match=reason):
        _load_signed(tmp_path, data, signing_key)


@pytest.mark.parametrize(("attribute", "value"), [
    ("quantile_q_", np.array([np.nan] * 9)),
    ("quantile_q_", np.array([1.0, 0.5])),
    ("quantile_levels_", np.array([0.5, 0.1] + [0.2] * 7)),
    ("quantile_levels_", None),
])
def test_bad_quantile_multiples_are_refused(
        tmp_path: Path, signing_key: KeyPair, trained_models: dict[str, CapacityRegressor],
        attribute: str, value: object) -> None:
    """The planning level is read from these arrays on every tick: a NaN or a shape that does
    not match would turn every forecast of the family into NaN or an exception."""
    bad = copy.deepcopy(trained_models["wifi"])
    setattr(bad, attribute, value)
    with pytest.raises(ArtifactError, match="quantile levels and multiples"):
        _load_signed(tmp_path, crafted.payload({**trained_models, "wifi": bad}), signing_key)


def test_wrong_format_and_payload_type_are_refused(tmp_path: Path, signing_key: KeyPair,
                                                   trained_models: dict[str, CapacityRegressor]
                                                   ) -> None:
    with pytest.raises(ArtifactError, match=f"format 2 is not {ARTIFACT_FORMAT}: .*retrain"):
        _load_signed(tmp_path, crafted.payload(trained_models, fmt=2), signing_key)
    import skops.io as sio

    with pytest.raises(ArtifactError, match="format None"):
        _load_signed(tmp_path, sio.dumps([1, 2, 3]), signing_key)


def test_save_refuses_what_load_would_refuse(tmp_path: Path, signing_key: KeyPair,
                                             trained_models: dict[str, CapacityRegressor]
                                             ) -> None:
    with pytest.raises(ArtifactError, match="no model for families cellular, lifi"):
        save({"wifi": trained_models["wifi"]}, tmp_path / "m", {},
             signing_key=signing_key.private)
    with pytest.raises(ArtifactError, match="cap"):
        save(trained_models, tmp_path / "m", {}, signing_key=signing_key.private,
             limits=Limits(max_uncompressed_bytes=1000))
    assert not (tmp_path / "m").exists()
