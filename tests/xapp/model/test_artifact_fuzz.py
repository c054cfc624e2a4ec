"""Fuzzing the artifact loader: whatever the bytes, only ArtifactError comes out, and loading
never allocates beyond a bound.

The seed is a real, small, signed artifact.  Each example mutates it (flipped bytes, truncation,
bogus .npy headers, huge declared shapes and member sizes, edited schema values and family or
feature names) and, mostly, re-signs the result with the test key, so the mutation reaches the
archive checks, skops and the payload checks rather than stopping at the signature.  The run
is derandomized and bounded (``FUZZ_EXAMPLES``, ``SIZE_FUZZ_EXAMPLES``) to take a few seconds
in CI.  The allocation bound is measured with tracemalloc (numpy reports its array buffers to
it) on the mutations that declare sizes, where a large allocation would come from; tracing
every allocation of every example would make the run six times slower.
"""

from __future__ import annotations

import json
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.xapp.model import crafted
from tests.xapp.model.conftest import KeyPair, synthetic_table, write_signed
from xapp.model import ArtifactError, load, save
from xapp.model.artifact import resolve

FUZZ_EXAMPLES = 150
SIZE_FUZZ_EXAMPLES = 75
#: What one load of the seed artifact (about 40 KiB, 60 KiB unpacked) may allocate at its peak,
#: whatever sizes the mutated file declares (up to 2**64 elements here).
PEAK_BOUND_BYTES = 32 << 20

Mutation = Callable[[bytes], bytes]


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory, signing_key: KeyPair) -> bytes:
    """A real artifact of every family, as small as training makes it."""
    from xapp.model import training

    ds = training.replay(synthetic_table(0, n_cpes=2, duration_s=90.0))
    models = training.fit_families(ds, None, {"max_iter": 2, "max_leaf_nodes": 3})
    directory = tmp_path_factory.mktemp("fuzz-seed")
    return save(models, directory, {}, signing_key=signing_key.private).read_bytes()


def _flip(edits: list[tuple[int, int]]) -> Mutation:
    def apply(data: bytes) -> bytes:
        out = bytearray(data)
        for pos, xor in edits:
            out[pos % len(out)] ^= xor
        return bytes(out)
    return apply


def _truncate(fraction: float) -> Mutation:
    return lambda data: data[:int(len(data) * fraction)]


def _array(index: int, header: bytes, tail: bytes) -> Mutation:
    def apply(data: bytes) -> bytes:
        names = crafted.array_names(data)
        return crafted.with_array(data, names[index % len(names)], header + tail)
    return apply


def _declared(index: int, size: int) -> Mutation:
    def apply(data: bytes) -> bytes:
        names = crafted.array_names(data)
        return crafted.declare_size(data, names[index % len(names)], size)
    return apply


def _nodes(doc: Any) -> list[Any]:
    """Every dict and list of a JSON document, in a fixed order."""
    out: list[Any] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict | list):
            out.append(node)
            stack.extend(node.values() if isinstance(node, dict) else node)
    return out


def _schema_value(index: int, value: Any) -> Mutation:
    """Replace one value somewhere in schema.json (a type name, a family's model, a feature
    name list, a reference to an array, ...) by ``value``."""
    def edit(schema: Any) -> Any:
        containers = _nodes(schema)
        node = containers[index % len(containers)]
        if isinstance(node, dict) and node:
            node[sorted(node)[index % len(node)]] = value
        elif isinstance(node, list) and node:
            node[index % len(node)] = value
        return schema
    return lambda data: crafted.with_schema(data, edit)


def _schema_key(index: int, name: str) -> Mutation:
    """Rename one key somewhere in schema.json (a family, a field, an attribute)."""
    def edit(schema: Any) -> Any:
        dicts = [n for n in _nodes(schema) if isinstance(n, dict) and n]
        node = dicts[index % len(dicts)]
        old = sorted(node)[index % len(node)]
        node[name] = node.pop(old)
        return schema
    return lambda data: crafted.with_schema(data, edit)


def _stored(data: bytes) -> bytes:
    """The same members uncompressed, so flipped bytes land in content, not in deflate."""
    return crafted.rezip(crafted.members(data), compression=zipfile.ZIP_STORED)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
    | st.text(max_size=12) | st.sampled_from(["cellular", "wifi", "lifi", "lag0", "numpy.ndarray"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=8)
shapes = st.lists(st.integers(0, 2**64), max_size=4).map(tuple)
descrs = st.sampled_from(["<f8", "<i8", "|u1", "|O", "<U10", "|V0", "<c16", "|b1"]) | st.text(
    max_size=8)
headers = st.one_of(
    st.builds(lambda s, d: crafted.npy_header(s, d) if isinstance(d, str) and d in (
        "<f8", "<i8", "|u1", "|O", "<U10", "|V0", "<c16", "|b1") else
        b"\x93NUMPY\x01\x00" + len(repr({"descr": d, "shape": s})).to_bytes(2, "little")
        + repr({"descr": d, "fortran_order": False, "shape": s}).encode(), shapes, descrs),
    st.binary(max_size=80),
    st.binary(max_size=40).map(lambda b: b"\x93NUMPY" + b),
)
mutations: st.SearchStrategy[Mutation] = st.one_of(
    st.builds(_flip, st.lists(st.tuples(st.integers(0, 2**31), st.integers(1, 255)),
                              min_size=1, max_size=8)),
    st.builds(_truncate, st.floats(0.0, 1.0)),
    st.builds(_array, st.integers(0, 10_000), headers, st.binary(max_size=64)),
    st.builds(_declared, st.integers(0, 10_000), st.integers(0, 2**32 - 1)),
    st.builds(_schema_value, st.integers(0, 10_000), json_values),
    st.builds(_schema_key, st.integers(0, 10_000),
              st.sampled_from(["carrier-pigeon", "", "__class__", "content", "0"])
              | st.text(max_size=10)),
)


_SETTINGS = {"deadline": None, "derandomize": True, "database": None,
             "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture]}
size_mutations: st.SearchStrategy[Mutation] = st.one_of(
    st.builds(_array, st.integers(0, 10_000), headers, st.binary(max_size=64)),
    st.builds(_declared, st.integers(0, 10_000), st.integers(0, 2**32 - 1)),
)


def _mutated(seed: bytes, mutate: Mutation, stored: bool) -> bytes:
    try:
        return mutate(_stored(seed) if stored else seed)
    except (zipfile.BadZipFile, ValueError, json.JSONDecodeError):
        return seed[: len(seed) // 3]  # the mutation itself needs a readable archive


def _load(directory: Path, data: bytes, key: KeyPair | None, trusted: KeyPair) -> bool:
    """Write ``data`` signed with ``key`` and load it; True when it loaded (it must then be
    a whole model), False on ArtifactError.  Anything else propagates and fails the test."""
    write_signed(directory, data, None if key is None else key.private)
    try:
        loaded = load(directory, public_key=trusted.public)
    except ArtifactError:
        return False
    assert set(loaded.models) == {"cellular", "wifi", "lifi"}
    return True


@settings(max_examples=FUZZ_EXAMPLES, **_SETTINGS)  # type: ignore[arg-type]
@given(mutate=mutations, stored=st.booleans(), sign_with=st.sampled_from(
    ["test", "test", "test", "test", "other", "none"]))
def test_any_mutation_gives_artifact_error(
        seed: bytes, tmp_path: Path, signing_key: KeyPair, other_key: KeyPair,
        mutate: Mutation, stored: bool, sign_with: str) -> None:
    key = {"test": signing_key, "other": other_key, "none": None}[sign_with]
    loaded = _load(tmp_path, _mutated(seed, mutate, stored), key, signing_key)
    assert not loaded or sign_with == "test"


@settings(max_examples=SIZE_FUZZ_EXAMPLES, **_SETTINGS)  # type: ignore[arg-type]
@given(mutate=size_mutations, stored=st.booleans())
def test_declared_sizes_never_allocate_beyond_the_bound(
        seed: bytes, tmp_path: Path, signing_key: KeyPair, mutate: Mutation,
        stored: bool) -> None:
    """Bogus array headers and member sizes (up to 2**64 elements declared), signed, so they
    reach the archive checks: the peak traced allocation of the whole load stays bounded."""
    data = _mutated(seed, mutate, stored)
    tracemalloc.start()
    try:
        _load(tmp_path, data, signing_key, signing_key)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BOUND_BYTES


def test_seed_loads(seed: bytes, tmp_path: Path, signing_key: KeyPair) -> None:
    """The fuzzing starts from an artifact that loads, so refusals are the mutations' doing."""
    write_signed(tmp_path, seed, signing_key.private)
    assert resolve(tmp_path).stat().st_size == len(seed) < 200_000
    assert set(load(tmp_path, public_key=signing_key.public).models) == {
        "cellular", "wifi", "lifi"}
    assert len(pd.Series(crafted.array_names(seed))) > 3
