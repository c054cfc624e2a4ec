"""What the InfluxDB tests share: a frame of points, a store on a test server, another writer's
raw write, and hypothesis settings for examples that share one server."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings

from tests.support.influxd import InfluxServer
from xapp.adapters.influx.store import InfluxConfig, InfluxStore
from xapp.core.forecast import KpiFrame

# One example per database or time window of the shared server: the fixture's database is
# shared by the examples of one test on purpose.
SHARED_SERVER = settings(deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def kpi_frame(t: float, n: int = 3) -> KpiFrame:
    return KpiFrame(time_s=t, cpe=np.array([f"cpe{i}" for i in range(n)]),
                    wat=np.array(["nr", "wifi", "lifi"][:n]),
                    values={"delivered_mbps": np.arange(1.0, n + 1) * 10,
                            "sinr_db": np.array([20.0, np.nan, 99.0][:n]),
                            "rtt_ms": np.full(n, 5.0)})


def open_store(server: InfluxServer, **kw: Any) -> InfluxStore:
    return InfluxStore(InfluxConfig(url=server.url, bucket=server.bucket, **kw))


def raw_write(server: InfluxServer, body: bytes) -> int:
    """POST line protocol as another writer would (v1 /write); the HTTP status."""
    req = urllib.request.Request(f"{server.url}/write?db={server.database}&precision=ns",
                                 data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10.0) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
