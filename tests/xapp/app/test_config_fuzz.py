"""The config file is outside input too: whatever it holds, loading it gives a configuration or
a ConfigError (the watcher keeps the running one), never another exception (issue 9)."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from tests.support.paths import REPO
from xapp.app.config import ConfigError, ConfigWatcher, load_config
from xapp.schemas import schemas_dir

REPO_CONFIG = REPO / "config-file.json"


def load_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config-file.json"
        path.write_bytes(data)
        with contextlib.suppress(ConfigError):
            load_config(path, environ={})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_any_bytes_load_or_raise_config_error(data: bytes) -> None:
    load_bytes(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_shipped_config_loads_or_raises_config_error(data: st.DataObject) -> None:
    doc: dict[str, Any] = json.loads(REPO_CONFIG.read_text())
    controls = doc.setdefault("controls", {})
    key = data.draw(st.sampled_from([*sorted(controls), "mqtt", "default_policy", "new"]))
    value = data.draw(st.none() | st.booleans() | st.integers() | st.floats()
                      | st.text(max_size=10) | st.lists(st.integers(), max_size=3)
                      | st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
    controls[key] = value
    load_bytes(json.dumps(doc).encode())


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
# deferred: the schema is read when the test runs, not when the module is imported.
@given(st.deferred(lambda: from_schema(json.loads(
    (schemas_dir(None) / "controls.schema.json").read_text()))))
def test_fuzz_schema_valid_controls_load_or_are_refused_with_a_reason(controls: Any) -> None:
    load_bytes(json.dumps({"name": "mcw-xapp", "version": "0.1.0",
                           "controls": controls}).encode())


@pytest.mark.parametrize("data", [
    b"[" * 100_000,
    b'{"controls": {"control_period_s": 1e999}}',
    b'{"controls": {"control_period_s": ' + b"9" * 5000 + b"}}",
    b'{"controls": {"log_level": "\xff"}}',
])
def test_hostile_config_is_refused_and_the_running_one_stays(tmp_path: Path,
                                                             data: bytes) -> None:
    path = tmp_path / "config-file.json"
    path.write_text(REPO_CONFIG.read_text())
    watcher = ConfigWatcher(load_config(path, environ={}))
    before = watcher.current
    path.write_bytes(data)
    assert watcher.check() is False
    assert watcher.current is before
