"""Configuration: controls typing, MCW_* overrides, refusal of bad files, hot reload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from xapp.app.config import (
    ConfigError,
    ConfigWatcher,
    apply_env_overrides,
    load_config,
    parse_controls,
)

CONTROLS: dict[str, Any] = {
    "log_level": "INFO", "sdl_namespace": "mcw",
    "loop": {"control_period_s": 1.0, "kpi_max_age_s": 5.0, "lease_s": 30},
    "influxdb": {"url": "http://influxdb:8086", "org": "mcw", "bucket": "mcw/autogen",
                 "token_file": "/opt/ric/secret/influxdb/token"},
    "mqtt": {"host": "mosquitto", "port": 8883, "client_id": "mcw-xapp",
             "ca_file": "/opt/ric/tls/ca.crt", "cert_file": "/opt/ric/tls/tls.crt",
             "key_file": "/opt/ric/tls/tls.key"},
    "model": {"path": "/opt/mcw/models/default", "reload_check_s": 10},
    "default_policy": {"mode": "load_balancing", "max_weight": 100, "hysteresis_pct": 2.0,
                       "capacity_floor_mbps": 1.0},
}


def write(path: Path, controls: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"name": "mcw-xapp", "version": "0.1.0", "controls": controls}))
    return path


def period(seconds: float) -> dict[str, Any]:
    """The controls with another control period."""
    return {**CONTROLS, "loop": {**CONTROLS["loop"], "control_period_s": seconds}}


def test_the_loops_settings_in_their_former_places_still_apply(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Files and overrides written before ``controls.loop`` held them keep working, each
    with a warning; in one file, ``loop``'s own value wins."""
    old = {k: v for k, v in CONTROLS.items() if k != "loop"}
    old["control_period_s"], old["kpi_max_age_s"] = 0.5, 7.0
    old["mqtt"] = {**CONTROLS["mqtt"], "lease_s": 12}
    c = load_config(write(tmp_path / "old.json", old), environ={}).controls
    assert (c.loop.control_period_s, c.loop.kpi_max_age_s, c.loop.lease_s) == (0.5, 7.0, 12)
    assert sum("deprecated" in r.getMessage() for r in caplog.records) == 3
    both = {**period(2.0), "control_period_s": 0.5}
    assert load_config(write(tmp_path / "both.json", both),
                       environ={}).controls.loop.control_period_s == 2.0
    env = load_config(write(tmp_path / "new.json", CONTROLS), environ={
        "MCW_CONTROL_PERIOD_S": "0.25", "MCW_MQTT_LEASE_S": "9"}).controls
    assert (env.loop.control_period_s, env.loop.lease_s) == (0.25, 9)
    assert any("MCW_MQTT_LEASE_S is deprecated" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match=r"mqtt\.lease_s"):
        load_config(write(tmp_path / "bad.json", {**old, "mqtt": {**old["mqtt"], "lease_s": 0}}),
                    environ={})


def test_controls_are_typed(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path / "c.json", CONTROLS), environ={})
    c = cfg.controls
    assert (c.loop.control_period_s, c.mqtt.host, c.mqtt.port, c.model.reload_check_s) == \
        (1.0, "mosquitto", 8883, 10.0)
    assert cfg.name == "mcw-xapp" and cfg.digest
    assert c.model.planning_level == "cost"
    fixed = load_config(write(tmp_path / "f.json", CONTROLS), environ={
        "MCW_MODEL_PLANNING_LEVEL": "0.1"}).controls
    assert fixed.model.planning_level == 0.1


def test_environment_overrides(tmp_path: Path) -> None:
    env = {"MCW_MQTT_HOST": "broker.example", "MCW_MQTT_PORT": "1883",
           "MCW_LOOP_CONTROL_PERIOD_S": "0.5", "MCW_LOG_LEVEL": "debug",
           "MCW_DEFAULT_POLICY_MAX_WEIGHT": "50", "MCW_INFLUXDB_URL": "http://i:8086",
           "MCW_SCHEMAS_DIR": "/x", "PATH": "/bin"}
    c = load_config(write(tmp_path / "c.json", CONTROLS), environ=env).controls
    assert c.mqtt.host == "broker.example" and c.mqtt.port == 1883
    assert c.loop.control_period_s == 0.5 and c.log_level == "DEBUG"
    assert c.default_policy["max_weight"] == 50 and c.influxdb.url == "http://i:8086"
    # The file's own values are untouched by the override copy.
    assert apply_env_overrides(CONTROLS, {})["mqtt"]["host"] == "mosquitto"


def test_kubernetes_service_links_are_not_overrides(caplog: pytest.LogCaptureFixture) -> None:
    """What Kubernetes injects for the chart's broker Service mcw-xapp-broker (seen in the pod
    make e2e-k8s installs), and for a Service named after a section: skipped, the real
    override beside them applied."""
    links = {"MCW_XAPP_BROKER_SERVICE_HOST": "10.96.0.95", "MCW_XAPP_BROKER_SERVICE_PORT": "8883",
             "MCW_XAPP_BROKER_SERVICE_PORT_MQTTS": "8883",
             "MCW_XAPP_BROKER_PORT": "tcp://10.96.0.95:8883",
             "MCW_XAPP_BROKER_PORT_8883_TCP": "tcp://10.96.0.95:8883",
             "MCW_XAPP_BROKER_PORT_8883_TCP_PROTO": "tcp",
             "MCW_XAPP_BROKER_PORT_8883_TCP_PORT": "8883",
             "MCW_XAPP_BROKER_PORT_8883_TCP_ADDR": "10.96.0.95",
             "MCW_MQTT_SERVICE_HOST": "10.96.0.7", "MCW_MQTT_PORT": "tcp://10.96.0.7:1883"}
    with caplog.at_level("WARNING"):
        out = apply_env_overrides(CONTROLS, {**links, "MCW_MQTT_HOST": "b"})
    assert out["mqtt"]["port"] == 8883 and out["mqtt"]["host"] == "b"
    warnings = [r.getMessage() for r in caplog.records]
    assert not [w for w in warnings if "matches no controls key" in w]
    assert [w for w in warnings if "MCW_MQTT_PORT" in w and "service link" in w]
    with caplog.at_level("WARNING"):
        apply_env_overrides(CONTROLS, {"MCW_MQTT_HOSTNAME": "x"})
    assert "MCW_MQTT_HOSTNAME matches no controls key" in caplog.text


def test_e2_controls(tmp_path: Path) -> None:
    off = load_config(write(tmp_path / "c.json", CONTROLS), environ={}).controls.e2
    assert not off.active and off.enabled and off.requestor_id == 123  # no submgr URL
    c = load_config(write(tmp_path / "e.json", {**CONTROLS, "e2": {
        "report_styles": [1], "nodes": [{"inventory_name": "gnb_1", "ran_function_id": 2,
                                         "kpm_version": 2, "report_styles": [1, 4],
                                         "cell": "00f110-00000000a", "prb_total": 106}]}}),
        environ={"MCW_E2_SUBMGR_URL": "http://submgr:8088",
                 "MCW_E2_MEASUREMENTS": '["DRB.UEThpDl"]'}).controls
    e2 = c.e2
    assert e2.active and e2.submgr_url == "http://submgr:8088"
    assert e2.measurements == ("DRB.UEThpDl",) and e2.report_styles == (1,)
    [node] = e2.nodes
    assert (node.inventory_name, node.ran_function_id, node.kpm_version, node.report_styles) \
        == ("gnb_1", 2, 2, (1, 4))
    assert (node.cell, node.prb_total) == ("00f110-00000000a", 106)
    assert c.to_dict()["e2"]["nodes"][0]["inventory_name"] == "gnb_1"


def test_e2_vendor_measurements(tmp_path: Path) -> None:
    # A vendor's name joins the built-in table; without one, the table is the built-in one.
    base = load_config(write(tmp_path / "c.json", CONTROLS), environ={}).controls.e2
    assert not base.measurement_map().known("VENDOR.UeThpDlKbps")
    assert set(base.measurements) == set(base.measurement_map().names())
    c = load_config(write(tmp_path / "v.json", {**CONTROLS, "e2": {"vendor_measurements": {
        "VENDOR.UeThpDlKbps": {"field": "delivered_mbps", "direction": "dl", "scale": 0.001},
    }}}), environ={}).controls.e2
    table = c.measurement_map()
    assert table.known("VENDOR.UeThpDlKbps")
    rule = table.rules["VENDOR.UeThpDlKbps"]
    assert (rule.field, rule.direction, rule.scale) == ("delivered_mbps", "dl", 0.001)
    # Checked by the table's own rules too, where the schema cannot say it (field names).
    with pytest.raises(ConfigError, match="vendor_measurements"):
        parse_controls({"e2": {"vendor_measurements": {"X.Y": {"field": "colour"}}}},
                       schemas=tmp_path)


def test_loop_controls(tmp_path: Path) -> None:
    # Absent: the rate-caps rule's own default (xapp.core.caps.DEFAULT_HEADROOM).
    assert load_config(write(tmp_path / "c.json", CONTROLS),
                       environ={}).controls.loop.caps_headroom == 1.15
    c = load_config(write(tmp_path / "l.json", {**CONTROLS, "loop": {"caps_headroom": 1}}),
                    environ={}).controls
    assert c.loop.caps_headroom == 1.0 and isinstance(c.loop.caps_headroom, float)
    assert c.to_dict()["loop"] == {"caps_headroom": 1.0, "control_period_s": 1.0,
                                   "forecast_history_s": 10.0, "kpi_max_age_s": 5.0,
                                   "lease_s": 30.0}
    env = load_config(write(tmp_path / "e.json", CONTROLS),
                      environ={"MCW_LOOP_CAPS_HEADROOM": "1.4"}).controls
    assert env.loop.caps_headroom == 1.4
    # Without the schema file the rule's bounds still refuse it.
    with pytest.raises(ConfigError, match="caps_headroom"):
        parse_controls({"loop": {"caps_headroom": 2.5}}, schemas=tmp_path)
    with pytest.raises(ConfigError, match="caps_headroom"):
        parse_controls({"loop": {"caps_headroom": True}}, schemas=tmp_path)


@pytest.mark.parametrize("change, word", [
    ({"loop": {"caps_headroom": 0.9}}, "caps_headroom"),
    ({"loop": {"caps_headroom": 2.01}}, "caps_headroom"),
    ({"loop": {"caps_headroom": "1.2"}}, "caps_headroom"),
    ({"loop": {"headroom": 1.2}}, "headroom"),
    ({"loop": 1.2}, "loop"),
    ({"control_period_s": 0}, "control_period_s"),
    ({"log_level": "LOUD"}, "log_level"),
    ({"mqtt": {**CONTROLS["mqtt"], "port": 70000}}, "port"),
    ({"mqtt": {**CONTROLS["mqtt"], "colour": "red"}}, "colour"),
    ({"default_policy": {"max_weight": 0}}, "max_weight"),
    ({"model": {"planning_level": 0.7}}, "planning_level"),
    ({"model": {"planning_level": "median"}}, "planning_level"),
    ({"e2": {"submgr_url": "submgr:8088"}}, "submgr_url"),
    ({"e2": {"poll_period_s": 0}}, "poll_period_s"),
    ({"e2": {"measurements": []}}, "measurements"),
    ({"e2": {"report_styles": [6]}}, "report_styles"),
    ({"e2": {"nodes": [{"inventory_name": "gnb_1"}]}}, "ran_function_id"),
    ({"e2": {"nodes": [{"inventory_name": "gnb_1", "ran_function_id": 5000}]}},
     "ran_function_id"),
    ({"e2": {"requestor": 1}}, "requestor"),
    ({"e2": {"vendor_measurements": {"X.Y": {"field": "colour"}}}}, "vendor_measurements"),
    ({"e2": {"vendor_measurements": {"X.Y": {"field": "cqi", "direction": "up"}}}},
     "direction"),
])
def test_bad_controls_are_refused(tmp_path: Path, change: dict[str, Any], word: str) -> None:
    with pytest.raises(ConfigError, match=word):
        load_config(write(tmp_path / "c.json", {**CONTROLS, **change}), environ={})


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.json")
    (tmp_path / "b.json").write_text("{nope")
    with pytest.raises(ConfigError, match="not JSON"):
        load_config(tmp_path / "b.json")
    assert load_config(None, environ={}).controls.sdl_namespace == "mcw"


def test_watcher_applies_changes_and_ignores_bad_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", CONTROLS)
    watcher = ConfigWatcher(load_config(path, environ={}))
    seen: list[float] = []
    watcher.subscribe(lambda old, new: seen.append(new.controls.loop.control_period_s))
    assert not watcher.check()
    write(path, period(0.25))
    assert watcher.check() and seen == [0.25]
    write(path, period(-1))
    assert not watcher.check()
    assert watcher.current.controls.loop.control_period_s == 0.25 and seen == [0.25]
    # A symlink swap (what a ConfigMap update does) is seen too.
    other = write(tmp_path / "other.json", period(2.0))
    first = write(tmp_path / "first.json", CONTROLS)
    link = tmp_path / "link.json"
    link.symlink_to(first)
    w2 = ConfigWatcher(load_config(link, environ={}))
    link.unlink()
    link.symlink_to(other)
    assert w2.check() and w2.current.controls.loop.control_period_s == 2.0


def test_each_replica_is_answered_at_its_own_pod_ip(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Sharded, submgr's ClientEndpoint.Host is the pod IP (the Service would reach a random
    pod); one replica, or no pod IP, keeps controls.e2.client_host.  MCW_POD_IP is no
    controls override."""
    env = {"MCW_POD_IP": "10.244.0.7", "MCW_E2_CLIENT_HOST": "svc.ricxapp"}
    with caplog.at_level("WARNING"):
        e2 = load_config(write(tmp_path / "c.json", CONTROLS), environ=env).controls.e2
    assert "MCW_POD_IP" not in caplog.text
    assert e2.client_host == "svc.ricxapp"
    assert e2.effective_client_host(True, env) == "10.244.0.7"
    assert e2.effective_client_host(False, env) == "svc.ricxapp"
    assert e2.effective_client_host(True, {"MCW_POD_IP": " "}) == "svc.ricxapp"
