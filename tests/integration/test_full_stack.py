"""End to end: ``mcw run`` against real InfluxDB, Mosquitto (mutual TLS, shipped ACL) and Redis.

One stack per module (starting it takes seconds); the tests run in file order and build on each
other's state: KPIs in, weights out to CPE clients and the Go agent, write-back, agent state and
telemetry back in, A1, then faults (broker, InfluxDB, Redis, xApp restart).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.integration.stack import (
    AGENT_BINARY,
    BASE_KPIS,
    POOR_WIFI,
    REPO,
    KpiFeeder,
    Stack,
    XappRun,
    free_port,
    influx_rows,
    metric,
    operator_env,
    wait_until,
    write_config,
)
from tests.support.influxd import influxd_binary, start_influxd
from tests.support.mosquitto import (
    MosquittoBroker,
    TestClient,
    connect_client,
    make_pki,
    mosquitto_binary,
)
from tests.support.redis_server import RedisServer, redis_binary
from xapp.adapters.mqtt import shard_topic

pytestmark = pytest.mark.slow

CPES = ["cpe-0001", "cpe-0002", "cpe-0003"]
#: The CPE whose agent is the real Go binary (its KPIs also get the agent's telemetry).
AGENT_CPE = "cpe-0003"


def _missing() -> str | None:
    if influxd_binary() is None:
        return "influxd not found (make deps-tools)"
    if mosquitto_binary() is None:
        return "mosquitto is not installed"
    if redis_binary() is None:
        return "redis-server is not installed"
    if not AGENT_BINARY.exists():
        return f"{AGENT_BINARY} missing (make agent)"
    return None


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    why = _missing()
    if why is not None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("stack")
    pki = make_pki(root / "pki", n_cpes=len(CPES))
    broker = MosquittoBroker(pki, root / "broker").start()
    influx = start_influxd(root)
    redis = RedisServer(root / "redis").start()
    config = root / "config-file.json"
    write_config(config)
    env = {**operator_env(root, pki, broker, influx, redis), "CONFIG_FILE": str(config)}
    feeder = KpiFeeder(influx, CPES).start()
    port = free_port()
    s = Stack(root=root, pki=pki, broker=broker, influx=influx, redis=redis,
              config_path=config, env=env,
              xapp=XappRun([], env, port, root / "xapp.log"), feeder=feeder)
    s.xapp.cmd = s.xapp_cmd(port)
    s.xapp.start()
    try:
        yield s
    finally:
        s.stop()


class Cpe:
    """A CPE's MQTT client with its own certificate, subscribed to its weights topic."""

    def __init__(self, stack: Stack, cpe_id: str) -> None:
        self.cpe_id = cpe_id
        self.topic = f"mcw/v1/cpe/{cpe_id}/weights"
        self.client: TestClient = connect_client(stack.broker, cpe_id, client_id=f"it-{cpe_id}")
        assert self.client.subscribe(self.topic) == [1]

    def docs(self) -> list[dict[str, Any]]:
        return [json.loads(m.payload) for m in self.client.on(self.topic)]

    def latest(self) -> dict[str, Any] | None:
        docs = self.docs()
        return docs[-1] if docs else None

    def wait(self, pred: Any, timeout_s: float = 60.0) -> dict[str, Any]:
        ok = wait_until(lambda: any(pred(d) for d in self.docs()), timeout_s)
        assert ok, f"{self.cpe_id}: no weights matching; got {self.docs()[-3:]}"
        return [d for d in self.docs() if pred(d)][-1]

    def close(self) -> None:
        self.client.close()


def wifi_share(doc: dict[str, Any], direction: str = "ul") -> float:
    w: dict[str, int] = doc[direction]["weights"]
    return float(w.get("wifi", 0)) / max(1, sum(w.values()))


def check_versions_grow(docs: list[dict[str, Any]]) -> None:
    versions = [d["version"] for d in docs]
    assert versions == sorted(versions) and len(set(versions)) == len(versions), versions


def test_weights_follow_kpis_and_validate(stack: Stack) -> None:
    """KPIs in InfluxDB become schema-valid retained weights that follow Wi-Fi's capacity."""
    assert wait_until(lambda: stack.xapp.ready()[0], 40), (stack.xapp.ready(),
                                                          stack.xapp.log_path.read_text()[-3000:])
    # Every thread of the running xApp is supervised and running.
    alive = stack.xapp.json("/ric/v1/health/alive")
    assert alive["alive"] is True, alive
    assert {"mcw-loop", "mcw-sdl", "mcw-config", "influx-flush", "influx-intake",
            "mcw-check-influxdb", "mcw-telemetry-batch", "mcw-model-reload", "mqtt-publisher",
            "mqtt-subscriber"} <= set(alive["workers"]), alive
    cpe = Cpe(stack, "cpe-0001")
    try:
        first = cpe.wait(lambda d: True)
        validator = Draft202012Validator(
            json.loads((REPO / "schemas" / "mqtt-weights.schema.json").read_text()))
        assert cpe.client.on(cpe.topic)[0].retain or len(cpe.docs()) > 0
        for doc in cpe.docs():
            validator.validate(doc)
        assert first["cpe_id"] == "cpe-0001"
        # KPIs without a direction (the radio feed) apply to both: the same sets.
        assert set(first["ul"]["weights"]) >= {"nr", "wifi"}
        assert first["dl"]["weights"] == first["ul"]["weights"]
        good = wifi_share(first)
        # The paper's testbed: Wi-Fi carries the largest share.
        assert good > 0.5, first
        stack.feeder.set_wat("cpe-0001", "wifi", POOR_WIFI)
        poor = cpe.wait(lambda d: wifi_share(d) < good * 0.5, timeout_s=30)
        assert poor["ul"]["weights"]["nr"] > 0 and wifi_share(poor, "dl") < good * 0.5
        for doc in cpe.docs():
            validator.validate(doc)
        check_versions_grow(cpe.docs())
        assert poor["version"] > first["version"]
    finally:
        cpe.close()


def test_forecasts_and_weights_written_back(stack: Stack) -> None:
    """Every CPE's forecasts (once per forecast_history_s) and each published decision land in
    InfluxDB."""
    def rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        pred = influx_rows(stack.influx, "SELECT last(median_mbps), last(lower_mbps) FROM "
                                         "mcw.autogen.wat_prediction GROUP BY cpe, wat")
        weight = influx_rows(stack.influx, "SELECT last(weight), last(version) FROM "
                                           "mcw.autogen.wat_weight GROUP BY cpe, wat")
        return pred, weight

    assert wait_until(lambda: len(rows()[0]) >= 9 and len(rows()[1]) >= 6, 15), rows()
    pred, weight = rows()
    assert {(r["cpe"], r["wat"]) for r in pred} >= {(c, w) for c in CPES
                                                    for w in ("nr", "wifi", "lifi")}
    for r in pred:
        assert 0 <= r["last_1"] <= r["last"], r  # lower <= median
    # The Wi-Fi forecast of the degraded CPE falls well below the healthy ones'.

    def wifi() -> dict[str, float]:
        return {r["cpe"]: r["last"] for r in rows()[0] if r["wat"] == "wifi"}

    assert wait_until(lambda: wifi()["cpe-0001"] < 0.7 * wifi()["cpe-0002"], 15), wifi()
    # The stored weights are the published ones (same version as the xApp's view).
    view = stack.xapp.json("/ric/v1/cpes")["cpes"]
    for r in weight:
        assert r["last_1"] <= view[r["cpe"]]["published"]["version"]
    assert wait_until(lambda: any(
        r["cpe"] == "cpe-0002" and r["last_1"] == stack.xapp.json("/ric/v1/cpes")["cpes"][
            "cpe-0002"]["published"]["version"] for r in rows()[1]), 10)


def test_agent_applies_weights_and_reports_back(stack: Stack) -> None:
    """The Go agent applies the retained weights; its state and telemetry reach the xApp."""
    started_ns = time.time_ns()
    agent = stack.start_agent(AGENT_CPE)

    def agent_view() -> dict[str, Any] | None:
        entry = stack.xapp.json("/ric/v1/cpes")["cpes"].get(AGENT_CPE)
        return None if entry is None else entry.get("agent")

    def applied_latest() -> bool:
        entry = stack.xapp.json("/ric/v1/cpes")["cpes"].get(AGENT_CPE) or {}
        a, p = entry.get("agent"), entry.get("published")
        if not (a and p and a["online"] and a["applied_version"] == p["version"]):
            return False
        # The agent applies the weights of the WATs it has (here a subset).
        return bool(a["applied_weights"]) and all(
            p["ul"]["weights"].get(w) == v for w, v in a["applied_weights"].items())

    assert wait_until(applied_latest, 20), (agent_view(), agent.poll(),
                                            stack.agent_log(AGENT_CPE)[-3000:])
    view = agent_view()
    assert view is not None and view["backend"] == "dry-run" and view["last_error"] == ""
    samples = stack.xapp.metrics()
    assert metric(samples, "mcw_agents_online") >= 1
    assert metric(samples, "mcw_agents_known") >= 1

    # Telemetry: the agent's per-WAT reports are written to wat_kpi by the xApp's subscriber.
    def telemetry_points() -> int:
        rows = influx_rows(stack.influx, "SELECT * FROM mcw.autogen.wat_kpi WHERE "
                                         f"cpe='{AGENT_CPE}' AND time > {started_ns}")
        # Points from the feeder carry a cell tag; the agent's telemetry does not.
        return sum(1 for r in rows if not r.get("cell"))

    assert wait_until(lambda: telemetry_points() >= 3, 20), stack.agent_log(AGENT_CPE)[-2000:]
    # The logs of mcw run are JSON (mdclogpy) and tell about the agent.
    logs = stack.xapp.log_lines()
    assert logs and not [d for d in logs if d.get("not_json")], logs[:3]
    assert any(f"agent of CPE {AGENT_CPE} is online (dry-run backend" in str(d.get("msg"))
               for d in logs), [d.get("msg") for d in logs][-10:]


def test_invalid_agent_payload_counted(stack: Stack) -> None:
    """A CPE publishing garbage on its own state topic is dropped and counted on /metrics."""
    client = connect_client(stack.broker, "cpe-0002", client_id="it-bad-cpe-0002")
    try:
        before = metric(stack.xapp.metrics(), "mcw_mqtt_subscriber_dropped_payloads_total",
                        kind="state", reason="schema")
        topic = shard_topic("cpe-0002", "state")
        assert client.publish(topic, b'{"cpe_id": "cpe-0002"}') == 0
        assert wait_until(lambda: metric(
            stack.xapp.metrics(), "mcw_mqtt_subscriber_dropped_payloads_total", kind="state",
            reason="schema") == before + 1, 10)
        # Clear the retained garbage again.
        client.publish(topic, b"", retain=True)
    finally:
        client.close()
    samples = stack.xapp.metrics()
    assert metric(samples, "mcw_mqtt_publisher_events_total", event="acked") > 0
    if stack.xapp.model_loaded():  # the EWMA fallback has no counters to export
        assert metric(samples, "mcw_estimator_events_total", event="rows") > 0
    assert metric(samples, "mcw_influx_events_total", event="written_points") > 0
    assert ("mcw_influx_buffered_points", ()) in samples


def published_versions(stack: Stack) -> dict[str, int]:
    cpes = stack.xapp.json("/ric/v1/cpes")["cpes"]
    return {c: e["published"]["version"] for c, e in cpes.items() if e.get("published")}


def test_broker_crash_latest_weights_arrive(stack: Stack) -> None:
    """Kill -9 the broker, change KPIs meanwhile, restart it: each CPE gets its latest weights."""
    before = published_versions(stack)
    stack.broker.kill()
    assert wait_until(lambda: not stack.xapp.ready()[1].get("broker", True), 10)
    stack.feeder.set_wat("cpe-0002", "wifi", POOR_WIFI)  # new weights while the broker is down

    def poor_wifi_published() -> bool:
        # The decision on the new KPIs, not just any newer version: a lease refresh of the old
        # weights can be published before the intake has the poor Wi-Fi (seen under CI's load).
        entry = stack.xapp.json("/ric/v1/cpes")["cpes"]["cpe-0002"]["published"]
        return wifi_share(entry) < 0.5 and entry["version"] > before["cpe-0002"]

    assert wait_until(poor_wifi_published, 20)
    stack.broker.start()
    assert wait_until(lambda: stack.xapp.ready()[0], 20), stack.xapp.ready()
    clients = {c: Cpe(stack, c) for c in ("cpe-0001", "cpe-0002")}
    try:
        # A fresh subscriber gets the retained message: it must be the xApp's latest version.
        def latest_everywhere() -> bool:
            now = published_versions(stack)
            return all((d := cl.latest()) is not None and d["version"] == now[c]
                       for c, cl in clients.items())

        assert wait_until(latest_everywhere, 20), (
            published_versions(stack), {c: cl.latest() for c, cl in clients.items()})
        assert wifi_share(clients["cpe-0002"].latest() or {}) < 0.5
        after = published_versions(stack)
        assert all(after[c] > before[c] for c in clients), (before, after)
    finally:
        for cl in clients.values():
            cl.close()


def test_influxdb_outage_buffers_and_recovers(stack: Stack) -> None:
    """InfluxDB down: the loop runs on, /ready says no, writes are buffered, then delivered."""
    ticks = metric(stack.xapp.metrics(), "mcw_ticks_total")
    stopped_ns = time.time_ns()
    stack.influx.stop()
    try:
        assert wait_until(lambda: stack.xapp.ready()[1].get("influxdb") is False, 10)
        code, _ = stack.xapp.get("/ric/v1/health/ready")
        assert code == 503
        # The agent's telemetry keeps coming and is buffered.
        assert wait_until(lambda: metric(stack.xapp.metrics(), "mcw_influx_buffered_points")
                          > 0, 10)
        assert wait_until(lambda: metric(stack.xapp.metrics(), "mcw_ticks_total") > ticks + 3,
                          15)
        assert stack.xapp.get("/ric/v1/health/alive")[0] == 200
    finally:
        stack.influx.start()
    assert wait_until(lambda: stack.xapp.ready()[0], 20), stack.xapp.ready()
    assert wait_until(lambda: metric(stack.xapp.metrics(), "mcw_influx_buffered_points") == 0,
                      30)
    restarted_ns = time.time_ns()
    rows = influx_rows(stack.influx, "SELECT * FROM mcw.autogen.wat_kpi WHERE "
                                     f"cpe='{AGENT_CPE}' AND time > {stopped_ns} AND "
                                     f"time < {restarted_ns}")
    # Telemetry the agent sent during the outage (no cell tag: not the feeder's) arrived late.
    assert sum(1 for r in rows if not r.get("cell")) >= 2, rows[-5:]


def test_redis_outage_ready_and_catch_up(stack: Stack) -> None:
    """Redis down: /ready says no, the loop runs on; Redis back empty: state is rewritten."""
    assert any("cpe/cpe-0001" in k for k in stack.redis_keys())
    stack.redis.stop()
    try:
        assert wait_until(lambda: stack.xapp.ready()[1].get("sdl") is False, 10)
        ticks = metric(stack.xapp.metrics(), "mcw_ticks_total")
        stack.feeder.set_wat("cpe-0001", "wifi", BASE_KPIS["wifi"])  # recovers meanwhile
        assert wait_until(lambda: metric(stack.xapp.metrics(), "mcw_ticks_total") > ticks + 3,
                          10)
    finally:
        stack.redis.start()
    assert wait_until(lambda: stack.xapp.ready()[0], 20), stack.xapp.ready()

    def caught_up() -> bool:
        keys = stack.redis_keys()
        view = published_versions(stack)
        records = {k.rsplit("cpe/", 1)[1]: json.loads(v) for k, v in keys.items()
                   if "cpe/" in k and v.startswith("{")}
        return all(c in records and records[c].get("version") == view[c] for c in CPES)

    assert wait_until(caught_up, 20), (stack.redis_keys(), published_versions(stack))


def test_restart_a1_in_process_and_versions_never_reused(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop ``mcw run`` (SIGTERM), run the same app in-process and steer it through the A1
    handler (the path RMR feeds; librmr is not needed), stop it, start ``mcw run`` again: the
    policy survives in SDL and every CPE's versions keep growing across the three runs."""
    import argparse

    from xapp.app.config import load_config
    from xapp.app.process import XappProcess
    from xapp.app.run_cli import configure
    from xapp.app.run_options import RunOptions

    clients = {c: Cpe(stack, c) for c in CPES}
    try:
        for cl in clients.values():
            cl.wait(lambda d: True)
        assert stack.xapp.stop(timeout_s=20) == 0  # SIGTERM: clean exit within the grace

        for key, value in stack.env.items():
            if key.startswith(("MCW_", "DBAAS_")):
                monkeypatch.setenv(key, value)
        parser = argparse.ArgumentParser()
        configure(parser)
        args = parser.parse_args(stack.xapp_cmd(free_port())[4:])
        process = XappProcess(RunOptions.from_args(args), load_config(stack.config_path))
        process.start()
        try:
            high = {c: cl.docs()[-1]["version"] for c, cl in clients.items()}
            # Mediator encoding of the Go A1 mediator: type id as string, payload as JSON text.
            resp = process.a1.handle({
                "operation": "CREATE", "policy_type_id": "20100",
                "policy_instance_id": "it-no-wifi",
                "payload": json.dumps({"scope": {"cpes": ["cpe-0001"]},
                                       "excluded_wats": ["wifi"],
                                       "directions": {"dl": {"excluded_wats": []}}})})
            assert resp.status == "OK" and resp.policy_type_id == 20100
            # No Wi-Fi in the uplink; the downlink's override keeps it.
            steered = clients["cpe-0001"].wait(
                lambda d: d["ul"]["weights"].get("wifi", 0) == 0
                and d["version"] > high["cpe-0001"])
            assert steered["ul"]["weights"]["nr"] > 0 and steered["dl"]["weights"]["wifi"] > 0
            # An invalid policy is refused and the previous one stays in force.
            bad = process.a1.handle({"operation": "UPDATE", "policy_type_id": 20100,
                                     "policy_instance_id": "it-no-wifi",
                                     "payload": {"max_weight": 0}})
            assert bad.status == "ERROR"
            assert process.book.get("it-no-wifi") is not None
            # Other CPEs are outside the scope and keep Wi-Fi.
            assert clients["cpe-0003"].wait(
                lambda d: d["version"] > high["cpe-0003"])["ul"]["weights"].get("wifi", 0) > 0
            assert wait_until(lambda: any("policy/it-no-wifi" in k
                                          for k in stack.redis_keys()), 10)
        finally:
            process.stop(grace_s=10)

        mid = {c: cl.docs()[-1]["version"] for c, cl in clients.items()}
        stack.xapp.start()
        for c, cl in clients.items():
            cl.wait(lambda d, c=c: d["version"] > mid[c], timeout_s=30)
        # The A1 instance came back from SDL: cpe-0001 still has no Wi-Fi.
        latest = clients["cpe-0001"].latest()
        assert latest is not None and latest["ul"]["weights"].get("wifi", 0) == 0
        for cl in clients.values():
            check_versions_grow(cl.docs())
    finally:
        for cl in clients.values():
            cl.close()
