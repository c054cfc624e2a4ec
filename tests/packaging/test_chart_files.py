"""The files the xApp reads, where it reads them: the descriptor with the controls' overrides,
the route table, the TLS and InfluxDB secrets, the model-signing key, and environment overrides
the runtime knows."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import posixpath
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.packaging import chart_render as cr
from tests.packaging.chart_variants import PEM, PUBLIC_KEY_PEM, appenv, xapp_container, xapp_pod
from tests.packaging.paths import (
    CONTROLS_SCHEMA,
    DESCRIPTOR,
    DESCRIPTOR_RULES,
    ROOT,
    XAPP_NAME,
    load_json,
)
from xapp.app import config

#: Where the xApp reads the model-signing public key unless controls.model says otherwise.
DEFAULT_MODEL_KEY_FILE = "/opt/mcw/keys/model-signing.pub"


def _mounted_files(r: cr.Rendered) -> dict[str, tuple[str, str, str]]:
    """Absolute path in the container -> (kind, source name, key) for ConfigMap/Secret items."""
    pod = xapp_pod(r)
    volumes = {v["name"]: v for v in pod["volumes"]}
    files: dict[str, tuple[str, str, str]] = {}
    for m in xapp_container(r)["volumeMounts"]:
        vol = volumes[m["name"]]
        sources = vol["projected"]["sources"] if "projected" in vol else [vol]
        for src in sources:
            if "configMap" in src:
                kind, name = "ConfigMap", src["configMap"]["name"]
                items = src["configMap"]["items"]
            elif "secret" in src:
                kind = "Secret"
                name = src["secret"].get("secretName") or src["secret"]["name"]
                items = src["secret"]["items"]
            else:
                continue
            for item in items:
                files[f"{m['mountPath']}/{item['path']}"] = (kind, name, item["key"])
    return files


def test_config_route_table_and_secrets_are_where_the_xapp_reads_them(
        rendered: dict[str, cr.Rendered]) -> None:
    r = rendered["default"]
    files = _mounted_files(r)
    env = appenv(r)
    assert files[env["CONFIG_FILE"]] == ("ConfigMap", "configmap-ricxapp-mcw-xapp-appconfig",
                                         "config-file.json")
    assert files[env["RMR_SEED_RT"]] == ("ConfigMap", "configmap-ricxapp-mcw-xapp-routes",
                                         "router.txt")
    controls = load_json(DESCRIPTOR)["controls"]
    assert files[controls["mqtt"]["ca_file"]] == ("Secret", "mcw-xapp-mqtt-tls", "ca.crt")
    assert files[controls["mqtt"]["cert_file"]] == ("Secret", "mcw-xapp-mqtt-tls", "tls.crt")
    assert files[controls["mqtt"]["key_file"]] == ("Secret", "mcw-xapp-mqtt-tls", "tls.key")
    assert files[controls["influxdb"]["token_file"]] == ("Secret", "mcw-xapp-influxdb", "token")
    secret_vols = [v for v in xapp_pod(r)["volumes"] if "secret" in v]
    assert secret_vols and all(v["secret"]["defaultMode"] == 0o440 for v in secret_vols)
    # Custom existing Secrets and keys.
    files = _mounted_files(rendered["existing-secrets"])
    assert files["/opt/ric/tls/tls.key"] == ("Secret", "fleet-mqtt-client", "tls.key")
    assert files["/opt/ric/secret/influxdb/token"] == ("Secret", "influx-ro", "api-token")
    assert rendered["existing-secrets"].of_kind("Secret") == []


def test_inline_secrets_are_created(rendered: dict[str, cr.Rendered]) -> None:
    r = rendered["inline-secrets"]
    files = _mounted_files(r)
    tls = r.get("Secret", files["/opt/ric/tls/ca.crt"][1])
    assert base64.b64decode(tls["data"]["ca.crt"]).decode() == PEM
    influx = r.get("Secret", files["/opt/ric/secret/influxdb/token"][1])
    assert base64.b64decode(influx["data"]["token"]).decode() == "s3cr3t"


def _model_key_file() -> str:
    """controls.model.public_key_file of the descriptor, or the xApp's default."""
    model = load_json(DESCRIPTOR)["controls"].get("model", {})
    path: str = model.get("public_key_file") or DEFAULT_MODEL_KEY_FILE
    return path


def test_model_signing_key_is_mounted_only_when_given(rendered: dict[str, cr.Rendered]) -> None:
    path = _model_key_file()
    key_dir = posixpath.dirname(path)
    # Unset: nothing mounted, the image's bundled key stays visible.
    for name in ("default", "broker-deploy", "minimal-other-namespace"):
        r = rendered[name]
        assert path not in _mounted_files(r), name
        assert all(m["mountPath"] != key_dir for m in xapp_container(r)["volumeMounts"]), name
        assert all("model" not in s["metadata"]["name"] for s in r.of_kind("Secret")), name
    # An existing Secret, under its own key, read-only at the path the xApp reads.
    r = rendered["existing-secrets"]
    assert _mounted_files(r)[path] == ("Secret", "mcw-release-key", "ed25519.pub")
    [mount] = [m for m in xapp_container(r)["volumeMounts"] if m["mountPath"] == key_dir]
    assert mount["readOnly"] is True and "subPath" not in mount
    volume = next(v for v in xapp_pod(r)["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["defaultMode"] == 0o440
    # Inline PEM: the chart's Secret holds exactly the key.
    r = rendered["inline-secrets"]
    kind, name, key = _mounted_files(r)[path]
    assert kind == "Secret"
    assert base64.b64decode(r.get("Secret", name)["data"][key]).decode() == PUBLIC_KEY_PEM
    # The xApp reads the key once at start: a new inline key rolls the pod.
    def annotations(r: cr.Rendered) -> dict[str, str]:
        meta: dict[str, Any] = r.get("Deployment", XAPP_NAME)["spec"]["template"]["metadata"]
        found: dict[str, str] = meta.get("annotations", {})
        return found
    assert annotations(r)["checksum/model-signing-key"] == hashlib.sha256(
        PUBLIC_KEY_PEM.encode()).hexdigest()
    assert "checksum/model-signing-key" not in annotations(rendered["default"])


def test_model_signing_key_follows_controls(helm: str, tmp_path: Path) -> None:
    model = load_json(CONTROLS_SCHEMA)["properties"]["model"]["properties"]
    if "public_key_file" not in model:
        pytest.skip("controls.model.public_key_file is not in schemas/controls.schema.json yet")
    key = {"signingPublicKey": {"pem": PUBLIC_KEY_PEM}}
    r = cr.template(helm, tmp_path, {"model": key, "controls": {"model": {
        "public_key_file": "/opt/mcw/trust/release.pub"}}}, namespace="ricxapp")
    assert _mounted_files(r)["/opt/mcw/trust/release.pub"][0] == "Secret"
    # A directory the image or another mount uses would be hidden by the key's mount.
    with pytest.raises(cr.HelmError, match="would be hidden"):
        cr.template(helm, tmp_path, {"model": key, "controls": {"model": {
            "public_key_file": "/opt/mcw/models/release.pub"}}}, namespace="ricxapp")


def test_config_file_is_the_descriptor_with_controls_overrides(
        rendered: dict[str, cr.Rendered]) -> None:
    descriptor = load_json(DESCRIPTOR)
    cm = rendered["default"].get("ConfigMap", "configmap-ricxapp-mcw-xapp-appconfig")
    assert json.loads(cm["data"]["config-file.json"]) == {**descriptor,
                                                          "APP_NAMESPACE": "ricxapp"}
    assert json.loads(cm["data"]["schema.json"]) == load_json(CONTROLS_SCHEMA)
    cm = rendered["minimal-other-namespace"].get("ConfigMap", "configmap-xapps-mcw-xapp-appconfig")
    doc = json.loads(cm["data"]["config-file.json"])
    # The frame's registration looks for SERVICE_XAPPS_MCW_XAPP_*_PORT in this namespace.
    assert doc["APP_NAMESPACE"] == "xapps"
    assert doc["controls"]["log_level"] == "DEBUG"
    # The merge is deep: the other default_policy keys stay.
    assert doc["controls"]["default_policy"] == {**descriptor["controls"]["default_policy"],
                                                 "max_weight": 30}
    rules = load_json(DESCRIPTOR_RULES)
    rules["properties"]["controls"] = load_json(CONTROLS_SCHEMA)
    jsonschema.validate(doc, rules)


def test_route_table(rendered: dict[str, cr.Rendered]) -> None:
    table = rendered["default"].get("ConfigMap", "configmap-ricxapp-mcw-xapp-routes")
    lines = table["data"]["router.txt"].strip().splitlines()
    assert lines[0] == "newrt|start" and lines[-1] == "newrt|end"
    routes = {int(line.split("|")[1]): line.split("|")[2] for line in lines[1:-1]}
    # A1_POLICY_QUERY must reach the A1 mediator; the responses go back by RTS.
    assert routes[20012].startswith("service-ricplt-a1mediator-rmr.ricplt:")


def test_environment_overrides_are_ones_the_runtime_knows(
        rendered: dict[str, cr.Rendered], caplog: pytest.LogCaptureFixture) -> None:
    env = appenv(rendered["existing-secrets"])
    mcw = {k: v for k, v in env.items() if k.startswith("MCW_")}
    assert {"MCW_INFLUXDB_URL", "MCW_MQTT_HOST", "MCW_MQTT_PORT"} <= set(mcw)
    with caplog.at_level(logging.WARNING):
        controls = config.apply_env_overrides(load_json(DESCRIPTOR)["controls"], mcw)
    assert not [r for r in caplog.records if "matches no controls key" in r.getMessage()]
    assert controls["mqtt"]["port"] == 8883
    assert controls["influxdb"]["url"] == "http://influxdb.tsdb:8086"
    config.parse_controls(controls, ROOT / "schemas")
    assert env["DBAAS_SERVICE_HOST"] == "redis.ricplt" and env["DBAAS_SERVICE_PORT"] == "6380"
    assert "dbaas-appconfig" not in json.dumps(xapp_container(rendered["existing-secrets"]))
