"""MQTT's wiring without a broker: TLS material that is not there is named at start-up, and the
agents' states are logged when they change (a fleet's thousands of applies a second are not)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from xapp.adapters.mqtt import CpeState, MemoryVersionStore, ProxyState
from xapp.app.config import parse_controls
from xapp.app.wiring.mqtt import AgentStateLog, build_mqtt
from xapp.core.intake import LatestKpis

LOGGER = "xapp.app.wiring.mqtt"


def test_missing_tls_material_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "ca.crt"
    controls = parse_controls({"mqtt": {"ca_file": str(missing)}})
    stoppers: list[Callable[[], object]] = []
    with pytest.raises(RuntimeError, match="MQTT TLS material not usable") as raised:
        build_mqtt(controls, MemoryVersionStore(), LatestKpis(), None, {}, stoppers, [])
    assert str(missing) in str(raised.value) and "controls.mqtt" in str(raised.value)
    assert stoppers == []  # nothing started


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    out = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    caplog.clear()
    return out


def test_agent_states_are_logged_as_they_change(caplog: pytest.LogCaptureFixture) -> None:
    log = AgentStateLog()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    log(CpeState("cpe-1", online=True, applied_version=3, backend="mptcp"))
    assert messages(caplog) == [
        (logging.INFO, "agent of CPE cpe-1 is online (mptcp backend, applied version 3)")]
    log(CpeState("cpe-1", online=True, applied_version=4))
    assert messages(caplog) == [(logging.DEBUG, "agent of CPE cpe-1 applied version 4")]
    log(CpeState("cpe-1", online=True, applied_version=5, last_error="no such interface"))
    assert messages(caplog) == [
        (logging.WARNING, "agent of CPE cpe-1 applied version 5 with error: no such interface")]
    for _ in range(2):  # offline is said once
        log(CpeState("cpe-1", online=False))
    assert messages(caplog) == [(logging.WARNING, "agent of CPE cpe-1 is offline")]
    # A proxy serving the CPE's downlink is another applier of the same CPE.
    log(CpeState("cpe-1", online=True, role="proxy", proxy_id="px-1", direction="dl"))
    assert messages(caplog) == [
        (logging.INFO, "proxy px-1 for CPE cpe-1 (downlink) is online (unknown backend, "
                       "applied version 0)")]


def test_proxy_states_are_logged_as_they_change(caplog: pytest.LogCaptureFixture) -> None:
    log = AgentStateLog()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for _ in range(2):
        log.proxy(ProxyState("px-1", online=True, backend="tc", cpes=3, cpes_applied=2))
    assert messages(caplog) == [
        (logging.INFO, "proxy px-1 is online (tc backend, 3 CPEs, 2 applied)")]
    log.proxy(ProxyState("px-1", online=True, last_error="rule refused"))
    assert messages(caplog) == [(logging.WARNING, "proxy px-1 reports an error: rule refused")]
    log.proxy(ProxyState("px-1", online=False))
    log.proxy(ProxyState("px-1", online=False))
    assert messages(caplog) == [(logging.WARNING, "proxy px-1 is offline")]
