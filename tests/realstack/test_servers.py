"""The servers the bench's runs share start every run empty (issue 32): no run's xApp reads
the history or SDL state the run before left."""

from __future__ import annotations

from pathlib import Path

import redis as redis_py

from tests.integration.stack import influx_write
from tests.realstack import history
from tests.realstack.harness import CPE_ID, Servers
from tests.support.influxd import InfluxServer
from tests.support.mosquitto import MosquittoBroker, Pki
from tests.support.redis_server import RedisServer


def test_reset_leaves_nothing_of_the_run_before(tmp_path: Path, pki: Pki, broker: MosquittoBroker,
                                                influx: InfluxServer, redis: RedisServer) -> None:
    servers = Servers(tmp_path, pki, broker, influx, redis)
    # What a run leaves: a KPI point in InfluxDB and an SDL key in Redis.
    assert influx_write(influx, [f"{history.KINDS['kpi']},cpe={CPE_ID},wat=nr sinr_db=20 1"])
    client = redis_py.Redis(host=redis.host, port=redis.port)
    client.set("{mcw-it},cpe/" + CPE_ID, b"{}")
    assert len(history.points(influx, history.KINDS["kpi"])) == 1
    assert client.dbsize() == 1

    servers.reset()

    assert history.points(influx, history.KINDS["kpi"]) == []
    assert client.dbsize() == 0
    # The next run writes to the same database.
    assert influx_write(influx, [f"{history.KINDS['kpi']},cpe={CPE_ID},wat=nr sinr_db=20 2"])
    assert len(history.points(influx, history.KINDS["kpi"])) == 1
