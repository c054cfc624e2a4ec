"""Telemetry documents to KPI rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.xapp.adapters.mqtt.test_payloads import PROXY_TELEMETRY, TELEMETRY, with_
from xapp.adapters.mqtt.telemetry import telemetry_frame


def test_telemetry_becomes_kpi_rows_per_direction() -> None:
    other = with_(TELEMETRY, cpe_id="cpe-0002", time_ms=1763800002000,
                  wats={"lifi": {"rtt_ms": 3.5, "ul": {"delivered_mbps": 12.0}}})
    frame = telemetry_frame([TELEMETRY, other, PROXY_TELEMETRY])
    assert list(frame.cpe) == ["cpe-0001"] * 3 + ["cpe-0002", "cpe-0001"]
    assert list(frame.wat) == ["nr", "nr", "wifi", "lifi", "nr"]
    # A WAT with direction objects gives one row each; one without gives a row for both.
    assert frame.direction is not None
    assert list(frame.direction) == ["dl", "ul", "", "ul", "dl"]
    assert frame.time_s == pytest.approx(1763800002.0)
    mbps = frame.column("delivered_mbps")
    assert mbps[0] == pytest.approx(300.1) and mbps[1] == pytest.approx(80.5)
    assert math.isnan(mbps[2]) and mbps[3] == 12.0 and mbps[4] == 301.0
    sat = frame.column("saturated")
    # The receiving end knows no saturation; the sender (CPE for ul, proxy for dl) does.
    assert math.isnan(sat[0]) and sat[1] == 0.9 and sat[4] == 1.0
    assert list(frame.column("rtt_ms")[:2]) == [20.1, 20.1]
    assert list(frame.column("up")[:3]) == [1.0, 1.0, 0.0] and math.isnan(frame.column("up")[3])
    assert frame.column("delivery_rate_mbps")[1] == 85.0
    # Retransmissions are the sender's: the CPE's ul, the proxy's dl; unknown elsewhere.
    retrans = frame.column("retrans_pct")
    assert retrans[1] == 1.5 and retrans[4] == 0.25
    assert np.isnan(retrans[[0, 2, 3]]).all()
    assert len(telemetry_frame([])) == 0
