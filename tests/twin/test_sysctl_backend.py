"""The 5G-CLARITY sysctl format, checked against the vectors shared with the Go agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO
from twin.sysctl_backend import (
    CWND_LIMITED_PATH,
    SCHEDULER_PATH,
    WEIGHTS_PATH,
    DryRunBackend,
    SysctlFormatError,
    WrrTuple,
    format_weights,
    ip_to_kernel,
    port_to_kernel,
)

VECTORS = REPO / "schemas/testdata/wrr-sysctl-vectors.json"


def _vectors() -> list[dict[str, Any]]:
    return list(json.loads(VECTORS.read_text())["vectors"])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The vectors are read when the tests are collected, not when the module is imported.
    if "vector" in metafunc.fixturenames:
        metafunc.parametrize("vector", _vectors(), ids=lambda v: v["text"][:24])


def test_shared_vectors(vector: dict[str, Any]) -> None:
    tuples = [WrrTuple(**t) for t in vector["tuples"]]
    assert format_weights(tuples) == vector["text"]


def test_known_values() -> None:
    assert ip_to_kernel("10.0.0.20") == 335544330  # the design brief's example
    assert port_to_kernel(5201) == 0x5114  # htons(0x1451) read on a little-endian host
    assert port_to_kernel(80) == 20480 and port_to_kernel(0) == 0


def test_backend_writes_and_reads_back(tmp_path: Path) -> None:
    backend = DryRunBackend(tmp_path)
    text = backend.apply({"nr": 30, "wifi": 100, "lifi": 1})
    assert text == _vectors()[0]["text"]
    assert (tmp_path / SCHEDULER_PATH).read_text() == "roundrobin\n"
    assert (tmp_path / CWND_LIMITED_PATH).read_text() == "N\n"
    assert (tmp_path / WEIGHTS_PATH).read_text() == text + "\n"
    assert backend.writes == 1


@pytest.mark.parametrize("weights", [{"nr": 256}, {"nr": -1}, {"lte": 3}])
def test_bad_weights_change_nothing(tmp_path: Path, weights: dict[str, int]) -> None:
    backend = DryRunBackend(tmp_path)
    backend.apply({"nr": 1, "wifi": 2, "lifi": 3})
    before = (tmp_path / WEIGHTS_PATH).read_text()
    with pytest.raises(SysctlFormatError):
        backend.apply(weights)
    assert (tmp_path / WEIGHTS_PATH).read_text() == before


@pytest.mark.parametrize("bad", ["10.0.0.256", "::1", "host"])
def test_bad_address(bad: str) -> None:
    with pytest.raises(SysctlFormatError):
        ip_to_kernel(bad)
