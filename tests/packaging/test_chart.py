"""The Helm chart lints, renders in every variant, validates against the Kubernetes API schemas
and follows the O-RAN SC conventions and the descriptor's contract."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import posixpath
import re
import subprocess
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.packaging import chart_render as cr
from tests.packaging.paths import (
    CHART,
    CONTROLS_SCHEMA,
    DESCRIPTOR,
    DESCRIPTOR_RULES,
    GID,
    PORTS,
    ROOT,
    UID,
    XAPP_NAME,
    load_json,
)
from xapp.app import config
from xapp.app.run_cli import configure
from xapp.core.shards import DEFAULT_SHARDS, MAX_SHARDS, shard_of

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
#: An Ed25519 public key (PEM), the form `mcw model keygen` writes.
PUBLIC_KEY_PEM = ("-----BEGIN PUBLIC KEY-----\n"
                  "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n"
                  "-----END PUBLIC KEY-----\n")
#: Where the xApp reads the model-signing public key unless controls.model says otherwise.
DEFAULT_MODEL_KEY_FILE = "/opt/mcw/keys/model-signing.pub"

#: MPTCP proxy agents of the deployed broker's ACL (broker.proxies): proxy id -> CPEs it serves.
PROXIES: dict[str, list[str]] = {"proxy-0002": ["cpe-0003"], "proxy-0001": ["cpe-0002", "cpe-0001"],
                                 "proxy-0003": []}
#: CPEs of the deployed broker's ACL besides the proxies' (broker.cpes).
CPES = ["cpe-0004", "cpe-0001"]

#: name -> (values, namespace passed to helm)
VARIANTS: dict[str, tuple[dict[str, Any], str | None]] = {
    "default": ({}, "ricxapp"),
    "service-monitor": ({"metrics": {"serviceMonitor": {
        "enabled": True, "namespace": "monitoring", "labels": {"release": "prometheus"}}}},
        "ricxapp"),
    "broker-deploy": ({"broker": {"deploy": True, "server": {
        "service": {"type": "LoadBalancer", "nodePort": 30883,
                    "loadBalancerSourceRanges": ["10.20.0.0/16"]},
        "allowFrom": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
        "persistence": {"existingClaim": "mosquitto-data"}}, "proxies": PROXIES,
        "cpes": CPES}}, "ricxapp"),
    "existing-secrets": ({
        "broker": {"clientTls": {"existingSecret": "fleet-mqtt-client"},
                   "host": "mqtt.example.net"},
        "influxdb": {"url": "http://influxdb.tsdb:8086",
                     "auth": {"existingSecret": "influx-ro", "existingSecretKey": "api-token"}},
        "dbaas": {"configMapName": "", "host": "redis.ricplt", "port": 6380},
        "model": {"signingPublicKey": {"existingSecret": "mcw-release-key",
                                       "existingSecretKey": "ed25519.pub"}},
        "networkPolicy": {"egress": {
            "influxdb": {"to": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "tsdb"}}}], "ports": [8086]},
            "sdl": {"to": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "ricplt"}},
                "podSelector": {"matchLabels": {"app": "redis"}}}], "ports": [6380, 26379]},
            "broker": {"to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}], "ports": [8884]}},
            "extraEgress": [{"to": [{"ipBlock": {"cidr": "198.51.100.0/24"}}],
                             "ports": [{"port": 443, "protocol": "TCP"}]}]}}, "ricxapp"),
    "inline-secrets": ({
        "broker": {"clientTls": {"existingSecret": "", "ca": PEM, "cert": PEM, "key": PEM}},
        "influxdb": {"auth": {"existingSecret": "", "token": "s3cr3t"}},
        "model": {"signingPublicKey": {"pem": PUBLIC_KEY_PEM}}}, "ricxapp"),
    "minimal-other-namespace": ({
        "namespace": "", "clusterDomain": "cluster.local",
        "networkPolicy": {"enabled": False}, "pdb": {"create": False},
        "serviceAccount": {"create": False},
        "startupProbe": {"enabled": False},
        "image": {"digest": "sha256:" + "ab" * 32},
        "controls": {"log_level": "DEBUG", "default_policy": {"max_weight": 30}}}, "xapps"),
    # Three replicas share the fleet (docs/replicas.md): sharding on by itself.
    "three-replicas": ({"replicaCount": 3}, "ricxapp"),
}


@pytest.fixture(scope="module")
def rendered(helm: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, cr.Rendered]:
    tmp = tmp_path_factory.mktemp("values")
    return {name: cr.template(helm, tmp, values, namespace=ns)
            for name, (values, ns) in VARIANTS.items()}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_lint(helm: str, tmp_path: Path, variant: str) -> None:
    out = cr.lint(helm, tmp_path, VARIANTS[variant][0])
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("kube_version", cr.KUBE_VERSIONS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_manifest_validates(rendered: dict[str, cr.Rendered], variant: str,
                                  kube_version: str) -> None:
    problems = {f"{d['kind']}/{d['metadata']['name']}": cr.validate(d, kube_version)
                for d in rendered[variant].docs}
    assert {k: v for k, v in problems.items() if v} == {}


def test_validation_catches_a_broken_manifest(rendered: dict[str, cr.Rendered]) -> None:
    deployment = json.loads(json.dumps(rendered["default"].one("Deployment")))
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    assert cr.validate(deployment, cr.KUBE_VERSIONS[0])
    sm = json.loads(json.dumps(rendered["service-monitor"].one("ServiceMonitor")))
    sm["spec"]["endpoints"][0]["scrapeInterval"] = "30s"  # not a ServiceMonitor field
    assert cr.validate(sm, cr.KUBE_VERSIONS[0])


@pytest.mark.parametrize("values,message", [
    ({"replicaCount": -1}, "replicaCount"),
    ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"unknownKey": 1}, "unknownKey"),
    ({"controls": {"log_level": "LOUD"}}, "log_level"),
    ({"controls": {"default_policy": {"mode": "fastest"}}}, "mode"),
    ({"controls": {"mqtt": {"hostname": "x"}}}, "hostname"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "runAsNonRoot"),
    ({"broker": {"clientTls": {"existingSecret": ""}}}, "broker.clientTls.ca is required"),
    ({"influxdb": {"auth": {"existingSecret": ""}}}, "influxdb.auth.token is required"),
    ({"pdb": {"minAvailable": 1}}, "either pdb.minAvailable or pdb.maxUnavailable"),
    ({"rmr": {"routeTable": "rte|1|x:1"}}, "routeTable"),
    # Two pods without leases would both publish every CPE.
    ({"replicaCount": 2, "sharding": {"enabled": False}}, "sharding.enabled"),
    ({"sharding": {"shards": 0}}, "sharding.shards"),
    ({"updateStrategy": {"type": "Sometimes"}}, "updateStrategy.type"),
    # Egress: no rule without destinations or ports, peers as Kubernetes defines them.
    ({"networkPolicy": {"egress": {"influxdb": {"to": []}}}},
     "networkPolicy.egress.influxdb.to"),
    ({"networkPolicy": {"egress": {"rmr": {"ports": []}}}}, "networkPolicy.egress.rmr.ports"),
    ({"networkPolicy": {"egress": {"broker": {"to": [{}]}}}}, "networkPolicy.egress.broker.to.0"),
    ({"networkPolicy": {"egress": {"broker": {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"},
                                                      "podSelector": {}}]}}}},
     "networkPolicy.egress.broker.to.0"),
    ({"networkPolicy": {"egress": {"dns": {"to": [{"podSelector": {"matchExpressions": [
        {"key": "k8s-app", "operator": "Is"}]}}]}}}}, "operator"),
    ({"networkPolicy": {"extraEgress": [{"ports": [{"port": 443}]}]}},
     "networkPolicy.extraEgress.0"),
    ({"networkPolicy": {"platformEgressPorts": [8080]}}, "platformEgressPorts"),
    ({"influxdb": {"networkPolicy": {"to": []}}}, "networkPolicy"),
    # The model-signing key: one source, and a PEM public key.
    ({"model": {"signingPublicKey": {"existingSecret": "k", "pem": PUBLIC_KEY_PEM}}},
     "set existingSecret or pem, not both"),
    ({"model": {"signingPublicKey": {"pem": PEM}}}, "model.signingPublicKey.pem"),
    # Proxy grants of the deployed broker's ACL: the ids make-acl.sh accepts, nothing else.
    ({"broker": {"deploy": True, "proxies": {"proxy/1": ["cpe-0001"]}}}, "broker.proxies"),
    ({"broker": {"deploy": True, "proxies": {"proxy-0001": ["cpe-+"]}}},
     "broker.proxies.proxy-0001.0"),
    ({"broker": {"deploy": True, "proxies": {"proxy-0001": ["cpe-0001\ntopic write #"]}}},
     "broker.proxies.proxy-0001.0"),
    ({"broker": {"deploy": True, "proxies": {"proxy-0001": ["cpe-0001", "cpe-0001"]}}},
     "broker.proxies.proxy-0001"),
    ({"broker": {"deploy": True, "proxies": {"proxy-0001": "cpe-0001"}}},
     "broker.proxies.proxy-0001"),
    ({"broker": {"deploy": True, "proxies": {"mcw-xapp": ["cpe-0001"]}}},
     "mcw-xapp is the xApp's identity"),
    ({"broker": {"deploy": True, "proxies": {"proxy-0001": ["mcw-xapp"]}}},
     "mcw-xapp is the xApp's identity"),
    ({"broker": {"deploy": True, "proxies": {"proxy-0001": ["cpe-0001"],
                                             "cpe-0001": ["cpe-0002"]}}},
     "'cpe-0001' is given both as a proxy and as a CPE id"),
    # CPE grants: the ids make-acl.sh --cpes accepts, each once.
    ({"broker": {"deploy": True, "cpes": ["cpe-0001/#"]}}, "broker.cpes.0"),
    ({"broker": {"deploy": True, "cpes": ["cpe-0001\nuser mcw-xapp"]}}, "broker.cpes.0"),
    ({"broker": {"deploy": True, "cpes": ["cpe-0001", "cpe-0001"]}}, "broker.cpes"),
    ({"broker": {"deploy": True, "cpes": ["mcw-xapp"]}}, "mcw-xapp is the xApp's identity"),
    ({"broker": {"deploy": True, "cpes": ["proxy-0001"], "proxies": {"proxy-0001": []}}},
     "'proxy-0001' is given both as a proxy and as a CPE id"),
])
def test_bad_values_are_refused(helm: str, tmp_path: Path, values: dict[str, Any],
                                message: str) -> None:
    with pytest.raises(cr.HelmError, match=re.escape(message)):
        cr.template(helm, tmp_path, values, namespace="ricxapp")


def test_every_object_is_in_the_xapp_namespace(rendered: dict[str, cr.Rendered]) -> None:
    for name, (_, ns) in VARIANTS.items():
        for doc in rendered[name].docs:
            if doc["kind"] == "ServiceMonitor":
                continue
            expected = "ricxapp" if name != "minimal-other-namespace" else ns
            assert doc["metadata"]["namespace"] == expected, (name, doc["kind"])


def test_names_and_labels_fit_kubernetes_limits(rendered: dict[str, cr.Rendered]) -> None:
    for r in rendered.values():
        for doc in r.docs:
            assert len(doc["metadata"]["name"]) <= 63
            for value in doc["metadata"].get("labels", {}).values():
                assert len(value) <= 63


def _container(r: cr.Rendered) -> dict[str, Any]:
    containers = [c for c in _pod(r)["containers"] if c["name"] == XAPP_NAME]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _pod(r: cr.Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = r.get("Deployment", XAPP_NAME)["spec"]["template"]["spec"]
    return spec


def _appenv(r: cr.Rendered, ns: str = "ricxapp") -> dict[str, str]:
    data: dict[str, str] = r.get("ConfigMap", f"configmap-{ns}-{XAPP_NAME}-appenv")["data"]
    return data


def test_oran_conventions(rendered: dict[str, cr.Rendered]) -> None:
    r = rendered["default"]
    pod = _pod(r)
    assert pod["hostname"] == XAPP_NAME
    assert pod["enableServiceLinks"] is True
    rmr = r.get("Service", "service-ricxapp-mcw-xapp-rmr")
    assert [(p["name"], p["port"]) for p in rmr["spec"]["ports"]] == [
        ("rmrdata", PORTS["rmrdata"]), ("rmrroute", PORTS["rmrroute"])]
    http = r.get("Service", "service-ricxapp-mcw-xapp-http")
    assert [(p["name"], p["port"]) for p in http["spec"]["ports"]] == [("http", PORTS["http"])]
    env = _appenv(r)
    assert env["CONFIG_FILE"] == "/opt/ric/config/config-file.json"
    assert env["RMR_SEED_RT"] == "/opt/ric/config/router.txt"
    assert env["RMR_SRC_ID"] == "service-ricxapp-mcw-xapp-rmr.ricxapp"
    assert env["RMR_RTG_SVC"] == str(PORTS["rmrroute"])
    assert env["PLT_NAMESPACE"] == "ricplt"
    container = _container(r)
    env_from = [e["configMapRef"]["name"] for e in container["envFrom"]]
    assert env_from == ["configmap-ricxapp-mcw-xapp-appenv", "dbaas-appconfig"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == PORTS
    assert container["command"] == ["mcw", "run"]
    assert container["args"][:2] == ["--rmr", "on"]
    # The frame finds its services through SERVICE_<NS>_<HOSTNAME>_{HTTP,RMR}_PORT.
    for svc in (rmr, http):
        link = svc["metadata"]["name"].upper().replace("-", "_") + "_PORT"
        assert link.startswith(f"SERVICE_RICXAPP_{XAPP_NAME.upper().replace('-', '_')}_")


def test_rmr_mode_reaches_the_command_line(helm: str, tmp_path: Path) -> None:
    """An image built without RMR (RMR_DEB_URL=none) runs with rmr.mode auto, as make e2e-k8s
    installs it; anything but on/auto/off is refused by the schema."""
    r = cr.template(helm, tmp_path, {"rmr": {"mode": "auto"}}, namespace="ricxapp")
    assert _container(r)["args"][:2] == ["--rmr", "auto"]
    with pytest.raises(cr.HelmError, match=re.escape("rmr.mode")):
        cr.template(helm, tmp_path, {"rmr": {"mode": "true"}}, namespace="ricxapp")


def test_selectors_match_the_pod(rendered: dict[str, cr.Rendered]) -> None:
    for r in rendered.values():
        labels = pod_labels(r.get("Deployment", XAPP_NAME))
        for svc in r.of_kind("Service"):
            if "broker" in svc["metadata"]["name"]:
                continue
            assert svc["spec"]["selector"].items() <= labels.items()
        for kind in ("PodDisruptionBudget", "NetworkPolicy"):
            for doc in r.of_kind(kind):
                if doc["metadata"]["name"] != XAPP_NAME:  # the broker's, the helm test's
                    continue
                sel = doc["spec"].get("selector", doc["spec"].get("podSelector"))
                assert sel["matchLabels"].items() <= labels.items()


def test_security_context(rendered: dict[str, cr.Rendered]) -> None:
    for r in rendered.values():
        pod = _pod(r)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == UID
        assert pod["securityContext"]["runAsGroup"] == GID
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        sc = _container(r)["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["runAsUser"] == UID
        # The only writable path is the /tmp emptyDir.
        mounts = {m["mountPath"]: m for m in _container(r)["volumeMounts"]}
        writable = {p for p, m in mounts.items() if not m.get("readOnly")}
        assert writable == {"/tmp"}
        tmp_vol = next(v for v in pod["volumes"] if v["name"] == mounts["/tmp"]["name"])
        assert "emptyDir" in tmp_vol
        for kind in ("Deployment",):
            for doc in r.of_kind(kind):
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    assert c["securityContext"]["readOnlyRootFilesystem"] is True
                    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
                    assert "resources" in c


def test_probes(rendered: dict[str, cr.Rendered]) -> None:
    c = _container(rendered["default"])
    assert c["livenessProbe"]["httpGet"] == {"path": "/ric/v1/health/alive", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ric/v1/health/ready", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/ric/v1/health/alive"
    descriptor = load_json(DESCRIPTOR)
    assert descriptor["livenessProbe"]["httpGet"]["path"] == c["livenessProbe"]["httpGet"]["path"]
    assert "startupProbe" not in _container(rendered["minimal-other-namespace"])


def _mounted_files(r: cr.Rendered) -> dict[str, tuple[str, str, str]]:
    """Absolute path in the container -> (kind, source name, key) for ConfigMap/Secret items."""
    pod = _pod(r)
    volumes = {v["name"]: v for v in pod["volumes"]}
    files: dict[str, tuple[str, str, str]] = {}
    for m in _container(r)["volumeMounts"]:
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
    env = _appenv(r)
    assert files[env["CONFIG_FILE"]] == ("ConfigMap", "configmap-ricxapp-mcw-xapp-appconfig",
                                         "config-file.json")
    assert files[env["RMR_SEED_RT"]] == ("ConfigMap", "configmap-ricxapp-mcw-xapp-routes",
                                         "router.txt")
    controls = load_json(DESCRIPTOR)["controls"]
    assert files[controls["mqtt"]["ca_file"]] == ("Secret", "mcw-xapp-mqtt-tls", "ca.crt")
    assert files[controls["mqtt"]["cert_file"]] == ("Secret", "mcw-xapp-mqtt-tls", "tls.crt")
    assert files[controls["mqtt"]["key_file"]] == ("Secret", "mcw-xapp-mqtt-tls", "tls.key")
    assert files[controls["influxdb"]["token_file"]] == ("Secret", "mcw-xapp-influxdb", "token")
    secret_vols = [v for v in _pod(r)["volumes"] if "secret" in v]
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
        assert all(m["mountPath"] != key_dir for m in _container(r)["volumeMounts"]), name
        assert all("model" not in s["metadata"]["name"] for s in r.of_kind("Secret")), name
    # An existing Secret, under its own key, read-only at the path the xApp reads.
    r = rendered["existing-secrets"]
    assert _mounted_files(r)[path] == ("Secret", "mcw-release-key", "ed25519.pub")
    [mount] = [m for m in _container(r)["volumeMounts"] if m["mountPath"] == key_dir]
    assert mount["readOnly"] is True and "subPath" not in mount
    volume = next(v for v in _pod(r)["volumes"] if v["name"] == mount["name"])
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
    env = _appenv(rendered["existing-secrets"])
    mcw = {k: v for k, v in env.items() if k.startswith("MCW_")}
    assert {"MCW_INFLUXDB_URL", "MCW_MQTT_HOST", "MCW_MQTT_PORT"} <= set(mcw)
    with caplog.at_level(logging.WARNING):
        controls = config.apply_env_overrides(load_json(DESCRIPTOR)["controls"], mcw)
    assert not [r for r in caplog.records if "matches no controls key" in r.getMessage()]
    assert controls["mqtt"]["port"] == 8883
    assert controls["influxdb"]["url"] == "http://influxdb.tsdb:8086"
    config.parse_controls(controls, ROOT / "schemas")
    assert env["DBAAS_SERVICE_HOST"] == "redis.ricplt" and env["DBAAS_SERVICE_PORT"] == "6380"
    assert "dbaas-appconfig" not in json.dumps(_container(rendered["existing-secrets"]))


def _egress_ports(policy: dict[str, Any]) -> set[int]:
    return {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])}


def _egress_rule(policy: dict[str, Any], port: int) -> dict[str, Any]:
    rules = [r for r in policy["spec"]["egress"] if port in {p["port"] for p in r["ports"]}]
    assert len(rules) == 1, (port, rules)
    rule: dict[str, Any] = rules[0]
    return rule


def _ns(peer: dict[str, Any]) -> str:
    name: str = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
    return name


def test_network_policy_ingress(rendered: dict[str, cr.Rendered]) -> None:
    policy = rendered["default"].get("NetworkPolicy", XAPP_NAME)
    ingress = policy["spec"]["ingress"]
    rmr_rule = next(r for r in ingress if {p["port"] for p in r["ports"]} == {"rmrdata",
                                                                              "rmrroute"})
    namespaces = rmr_rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert set(namespaces) == {"ricplt", "ricxapp"}
    http_rule = next(r for r in ingress if [p["port"] for p in r["ports"]] == ["http"])
    assert http_rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "monitoring"]
    assert rendered["minimal-other-namespace"].of_kind("NetworkPolicy") == []


def test_every_egress_rule_names_its_destinations(rendered: dict[str, cr.Rendered]) -> None:
    """No egress rule of any variant opens a port to anywhere: each has peers, and each peer
    selects something narrower than "every pod of every namespace" or is an explicit ipBlock."""
    for name, r in rendered.items():
        for policy in r.of_kind("NetworkPolicy"):
            assert "Egress" in policy["spec"]["policyTypes"]
            for rule in policy["spec"].get("egress", []):
                assert rule.get("to"), (name, policy["metadata"]["name"], rule)
                assert rule.get("ports"), (name, rule)
                for peer in rule["to"]:
                    assert peer, (name, rule)
                    if "ipBlock" not in peer:
                        selectors = [peer.get("namespaceSelector"), peer.get("podSelector")]
                        assert any(selectors), (name, peer)


def test_default_egress_fits_an_oran_sc_ric(rendered: dict[str, cr.Rendered]) -> None:
    """The defaults name the platform pods of a ric-dep install (ricplt, app=ricplt-<name>),
    the cluster DNS in kube-system and the broker beside the xApp."""
    policy = rendered["default"].get("NetworkPolicy", XAPP_NAME)
    dns = _egress_rule(policy, 53)
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert [(_ns(p), p["podSelector"]["matchLabels"]) for p in dns["to"]] == [
        ("kube-system", {"k8s-app": "kube-dns"})]
    sdl = _egress_rule(policy, 6379)
    assert [(_ns(p), p["podSelector"]["matchLabels"]) for p in sdl["to"]] == [
        ("ricplt", {"app": "ricplt-dbaas"})]
    rmr = _egress_rule(policy, 4562)
    assert {p["port"] for p in rmr["ports"]} == {4560, 4561, 4562, 38000}
    [peer] = rmr["to"]
    assert _ns(peer) == "ricplt"
    [expr] = peer["podSelector"]["matchExpressions"]
    assert (expr["key"], expr["operator"]) == ("app", "In")
    assert set(expr["values"]) == {"ricplt-a1mediator", "ricplt-rtmgr", "ricplt-e2term-alpha",
                                   "ricplt-submgr"}
    appmgr = _egress_rule(policy, 8080)
    assert [(_ns(p), p["podSelector"]["matchLabels"]) for p in appmgr["to"]] == [
        ("ricplt", {"app": "ricplt-appmgr"})]
    a1mediator = _egress_rule(policy, 10000)
    assert [(_ns(p), p["podSelector"]["matchLabels"]) for p in a1mediator["to"]] == [
        ("ricplt", {"app": "ricplt-a1mediator"})]
    influx = _egress_rule(policy, 8086)
    assert [(_ns(p), p["podSelector"]["matchLabels"]) for p in influx["to"]] == [
        ("ricplt", {"app.kubernetes.io/name": "influxdb2"})]
    broker = _egress_rule(policy, 8883)
    assert broker["to"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "mosquitto"}}}]
    submgr = _egress_rule(policy, 8088)
    assert [(_ns(p), p["podSelector"]["matchLabels"]) for p in submgr["to"]] == [
        ("ricplt", {"app": "ricplt-submgr"})]
    # ... and its answers to the E2 subscriptions come in on the HTTP port.
    assert {"from": submgr["to"], "ports": [{"port": "http", "protocol": "TCP"}]} in \
        policy["spec"]["ingress"]
    assert len(policy["spec"]["egress"]) == 8
    # The default URLs point where the default policy lets the xApp go.
    env = _appenv(rendered["default"])
    influx_host = urllib.parse.urlsplit(env["MCW_INFLUXDB_URL"]).hostname or ""
    assert influx_host.split(".")[1] == "ricplt"
    assert env["MCW_MQTT_HOST"] == "mosquitto"  # a Service in the xApp's own namespace
    descriptor = json.loads(rendered["default"].get(
        "ConfigMap", "configmap-ricxapp-mcw-xapp-appconfig")["data"]["config-file.json"])
    mediator = urllib.parse.urlsplit(descriptor["controls"]["a1"]["mediator_url"])
    assert (mediator.hostname or "").endswith(".ricplt") and mediator.port == 10000
    # The route table's peers are among the RMR destinations.
    table = rendered["default"].get("ConfigMap", "configmap-ricxapp-mcw-xapp-routes")
    for line in table["data"]["router.txt"].splitlines():
        if line.startswith("rte|"):
            host, _, port = line.split("|")[2].rpartition(":")
            assert host.startswith("service-ricplt-") and host.endswith(".ricplt"), host
            assert f"ricplt-{host.split('-')[2]}" in expr["values"]
            assert int(port) in {p["port"] for p in rmr["ports"]}


def test_egress_destinations_come_from_values(rendered: dict[str, cr.Rendered]) -> None:
    policy = rendered["existing-secrets"].get("NetworkPolicy", XAPP_NAME)
    influx = _egress_rule(policy, 8086)
    assert influx["to"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "tsdb"}}}]
    sdl = _egress_rule(policy, 6380)
    assert {p["port"] for p in sdl["ports"]} == {6380, 26379}
    assert sdl["to"][0]["podSelector"] == {"matchLabels": {"app": "redis"}}
    broker = _egress_rule(policy, 8884)
    assert broker["to"] == [{"ipBlock": {"cidr": "192.0.2.10/32"}}]
    extra = _egress_rule(policy, 443)
    assert extra["to"] == [{"ipBlock": {"cidr": "198.51.100.0/24"}}]
    assert 6379 not in _egress_ports(policy) and 8883 not in _egress_ports(policy)


def test_replicas_share_the_fleet(rendered: dict[str, cr.Rendered]) -> None:
    """One pod: no leases, Recreate (as before).  Three: sharding on, each pod's replica id
    its pod name (the hostname is the xApp name in every pod), rolling updates one pod at a
    time, the PDB lets one pod go, and the environment is what the runtime reads."""
    one, three = rendered["default"], rendered["three-replicas"]
    assert _appenv(one)["MCW_SHARDING_ENABLED"] == "false"
    assert one.get("Deployment", XAPP_NAME)["spec"]["strategy"] == {"type": "Recreate"}
    deployment = three.get("Deployment", XAPP_NAME)
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    env = _appenv(three)
    assert env["MCW_SHARDING_ENABLED"] == "true" and env["MCW_SHARDING_SHARDS"] == "64"
    replica_id = {e["name"]: e for e in _container(three)["env"]}["MCW_REPLICA_ID"]
    assert replica_id["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Each pod's own address for submgr's answers and its appmgr entry (docs/replicas.md).
    pod_ip = {e["name"]: e for e in _container(three)["env"]}["MCW_POD_IP"]
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert three.one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    controls = config.apply_env_overrides(load_json(DESCRIPTOR)["controls"],
                                          {k: v for k, v in env.items() if k.startswith("MCW_")})
    parsed = config.parse_controls(controls, ROOT / "schemas")
    assert parsed.sharding.enabled and parsed.sharding.shards == 64
    assert parsed.sharding.effective_replica_id({"MCW_REPLICA_ID": "mcw-xapp-7d9-abcde",
                                                 "HOSTNAME": XAPP_NAME}) == "mcw-xapp-7d9-abcde"
    assert parsed.e2.effective_client_host(True, {"MCW_POD_IP": "10.244.0.7"}) == "10.244.0.7"
    # Readiness names the lease worker when sharding is on (xapp.app.process.XappProcess.health).
    assert c_probe_paths(three) == c_probe_paths(one)


def c_probe_paths(r: cr.Rendered) -> tuple[str, str]:
    c = _container(r)
    return c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"]


def test_pdb(rendered: dict[str, cr.Rendered]) -> None:
    pdb = rendered["default"].one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert rendered["minimal-other-namespace"].of_kind("PodDisruptionBudget") == []


def test_service_monitor(rendered: dict[str, cr.Rendered]) -> None:
    assert rendered["default"].of_kind("ServiceMonitor") == []
    sm = rendered["service-monitor"].one("ServiceMonitor")
    assert sm["metadata"]["namespace"] == "monitoring"
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ricxapp"]}
    endpoint = sm["spec"]["endpoints"][0]
    assert endpoint["port"] == "http"
    assert endpoint["path"] == load_json(DESCRIPTOR)["metrics"]["url"]
    http = rendered["service-monitor"].get("Service", "service-ricxapp-mcw-xapp-http")
    assert sm["spec"]["selector"]["matchLabels"].items() <= http["metadata"]["labels"].items()
    rmr = rendered["service-monitor"].get("Service", "service-ricxapp-mcw-xapp-rmr")
    assert not sm["spec"]["selector"]["matchLabels"].items() <= rmr["metadata"]["labels"].items()


def _mosquitto_conf(text: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            conf.setdefault(key, value.strip())
    return conf


def test_deployed_broker_uses_the_channel_configuration(rendered: dict[str, cr.Rendered]) -> None:
    r = rendered["broker-deploy"]
    broker_name = f"{XAPP_NAME}-broker"
    cm = r.get("ConfigMap", broker_name)
    repo_conf = (ROOT / "broker" / "mosquitto.conf").read_text(encoding="utf-8")
    # The ACL is broker/acl plus the proxies' and the CPEs' stanzas, exactly as
    # broker/make-acl.sh writes it.
    assert cm["data"]["acl"].startswith((ROOT / "broker" / "acl").read_text())
    assert cm["data"]["acl"] == make_acl(PROXIES, CPES)
    assert "user proxy-0001\n" in cm["data"]["acl"]
    assert f"user cpe-0004\ntopic write mcw/v1/s/{shard_of('cpe-0004')}/cpe/cpe-0004/state\n" \
        in cm["data"]["acl"]
    conf = _mosquitto_conf(cm["data"]["mosquitto.conf"])
    log_dest = re.findall(r"^log_dest\s+(\S+)", cm["data"]["mosquitto.conf"], re.MULTILINE)
    assert log_dest == ["stdout"]
    # Everything but the log destination is the channel's file.
    assert {k: v for k, v in conf.items() if k != "log_dest"} == {
        k: v for k, v in _mosquitto_conf(repo_conf).items() if k != "log_dest"}
    deployment = r.get("Deployment", broker_name)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][-1] == "/etc/mosquitto/mosquitto.conf"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    projected = volumes[mounts["/etc/mosquitto"]]["projected"]["sources"]
    paths = {f"/etc/mosquitto/{i['path']}" for s in projected
             for i in (s.get("configMap") or s.get("secret"))["items"]}
    for key in ("cafile", "certfile", "keyfile", "acl_file"):
        assert conf[key] in paths, key
    assert conf["persistence_location"].rstrip("/") in mounts
    assert volumes[mounts["/var/lib/mosquitto"]]["persistentVolumeClaim"]["claimName"] == \
        "mosquitto-data"
    listener = int(conf["listener"].split()[0])
    assert container["ports"][0]["containerPort"] == listener
    svc = r.get("Service", broker_name)
    assert svc["spec"]["type"] == "LoadBalancer" and svc["spec"]["ports"][0]["nodePort"] == 30883
    # The xApp talks to it, and its NetworkPolicy lets it.
    assert _appenv(r)["MCW_MQTT_HOST"] == broker_name
    policy = r.get("NetworkPolicy", XAPP_NAME)
    broker_rule = next(rule for rule in policy["spec"]["egress"]
                       if rule.get("to") and "podSelector" in rule["to"][0]
                       and rule["ports"][0]["port"] == listener)
    assert broker_rule["to"][0]["podSelector"]["matchLabels"].items() <= \
        pod_labels(deployment).items()
    broker_policy = r.get("NetworkPolicy", broker_name)
    peers = broker_policy["spec"]["ingress"][0]["from"]
    assert {"ipBlock": {"cidr": "10.20.0.0/16"}} in peers
    assert broker_policy["spec"]["egress"] == []
    assert pod["securityContext"]["runAsNonRoot"] is True


def make_acl(proxies: dict[str, list[str]], cpes: Sequence[str] = (),
             shards: int = DEFAULT_SHARDS) -> str:
    """What broker/make-acl.sh prints for ``proxies`` and ``cpes``: the other renderer of the
    same ACL."""
    proc = subprocess.run(["bash", str(ROOT / "broker" / "make-acl.sh"), "--shards", str(shards),
                           *(["--cpes", ",".join(cpes)] if cpes else []),
                           *(f"{p}:{','.join(cpes)}" for p, cpes in proxies.items())],
                          capture_output=True, text=True, check=True)
    return proc.stdout


def _broker_acl_and_checksum(helm: str, tmp: Path, proxies: dict[str, list[str]] | None,
                             cpes: Sequence[str] | None = None,
                             shards: int | None = None) -> tuple[str, str]:
    values: dict[str, Any] = {"broker": {"deploy": True}}
    if proxies is not None:
        values["broker"]["proxies"] = proxies
    if cpes is not None:
        values["broker"]["cpes"] = list(cpes)
    if shards is not None:
        values["sharding"] = {"shards": shards}
    r = cr.template(helm, tmp, values, namespace="ricxapp")
    name = f"{XAPP_NAME}-broker"
    deployment = r.get("Deployment", name)
    checksum: str = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    acl: str = r.get("ConfigMap", name)["data"]["acl"]
    return acl, checksum


def test_deployed_broker_acl_follows_the_proxies(helm: str, tmp_path: Path) -> None:
    # No proxy and no CPE (the default, or empty): the shipped ACL byte for byte.
    base, base_sum = _broker_acl_and_checksum(helm, tmp_path, None)
    assert base == (ROOT / "broker" / "acl").read_text() == make_acl({})
    assert _broker_acl_and_checksum(helm, tmp_path, {}) == (base, base_sum)
    assert _broker_acl_and_checksum(helm, tmp_path, {}, []) == (base, base_sum)
    # One contract, two renderers: the chart and make-acl.sh agree for every set of proxies
    # and CPEs, and the broker pod restarts (new checksum) whenever the grants change.
    sums = {base_sum}
    for proxies, cpes in (({"proxy-0001": ["cpe-0001"]}, None),
                          ({"proxy-0001": ["cpe-0001", "cpe-0002"]}, None),
                          ({"proxy-0001": ["cpe-0002", "cpe-0001"]}, None),
                          ({"proxy-0001": ["cpe-0001", "cpe-0002"], "proxy-0002": []}, None),
                          ({"proxy-0002": ["cpe-0001"]}, None),
                          ({"p.1_x": ["C-1", "c.2"], "A9": ["z"]}, None),
                          ({}, ["cpe-0001"]),
                          ({}, ["cpe-0002", "cpe-0001"]),
                          ({"proxy-0002": ["cpe-0001"]}, ["cpe-0001", "cpe-0003"])):
        acl, checksum = _broker_acl_and_checksum(helm, tmp_path, proxies, cpes)
        assert acl == make_acl(proxies, cpes or ()), (proxies, cpes)
        assert checksum not in sums, (proxies, cpes)
        sums.add(checksum)


# Ids of every allowed character and length, for the chart's FNV-1a against make-acl.sh's.
SHARD_IDS = ["cpe-0001", "cpe-10000", "a", "Z9._-x", "0", "c" * 64, "A-._z",
             *(f"cpe-{i:05d}" for i in range(0, 100_000, 4999))]


@pytest.mark.parametrize("shards", [1, 7, DEFAULT_SHARDS, MAX_SHARDS])
def test_deployed_broker_grants_each_cpe_its_own_shard(helm: str, tmp_path: Path,
                                                       shards: int) -> None:
    """The chart computes FNV-1a in a template (it has no XOR): the same shards as
    make-acl.sh and xapp/core/shards.py for the fleet's sharding.shards."""
    acl, _ = _broker_acl_and_checksum(helm, tmp_path, {"proxy-0001": SHARD_IDS[:2]}, SHARD_IDS,
                                      shards)
    assert acl == make_acl({"proxy-0001": SHARD_IDS[:2]}, SHARD_IDS, shards)
    for cpe in SHARD_IDS:
        grant = f"\nuser {cpe}\ntopic write mcw/v1/s/{shard_of(cpe, shards)}/cpe/{cpe}/state\n"
        assert grant in acl


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def test_other_namespace_and_fqdn(rendered: dict[str, cr.Rendered]) -> None:
    r = rendered["minimal-other-namespace"]
    r.get("Service", "service-xapps-mcw-xapp-rmr")
    r.get("Service", "service-xapps-mcw-xapp-http")
    env = _appenv(r, "xapps")
    assert env["RMR_SRC_ID"] == "service-xapps-mcw-xapp-rmr.xapps.svc.cluster.local"
    assert _container(r)["image"] == f"registry.example.com/mcw/mcw-xapp@sha256:{'ab' * 32}"
    assert _pod(r)["serviceAccountName"] == "default"


# --- values documentation and schema ------------------------------------------------------

def _leaf_paths(node: Any, prefix: str = "") -> set[str]:
    if isinstance(node, dict) and node:
        out: set[str] = set()
        for key, value in node.items():
            out |= _leaf_paths(value, f"{prefix}.{key}" if prefix else key)
        return out
    return {prefix}


def test_every_value_is_documented() -> None:
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    values = yaml.safe_load(text)
    params = re.findall(r"^\s*## @param (\S+) \S", text, flags=re.MULTILINE)
    assert len(params) == len(set(params)), "a value is documented twice"
    leaves = _leaf_paths(values)
    # A @param documents its key and everything below it (e.g. `resources`).
    undocumented = {leaf for leaf in leaves
                    if not any(leaf == p or leaf.startswith(p + ".") for p in params)}
    assert undocumented == set()
    def exists(path: str) -> bool:
        node: Any = values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True
    assert [p for p in params if not exists(p)] == []
    assert re.findall(r"^## @section ", text, flags=re.MULTILINE)
    # The chart README's parameter table lists them all.
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    assert [p for p in params if f"| `{p}` |" not in readme] == []


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        out.add(path)
        if path != "controls":
            out |= _schema_paths(sub, path)
    return out


def test_values_schema_mirrors_values() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    schema = load_json(CHART / "values.schema.json")
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(values, schema)

    def value_paths(node: Any, prefix: str = "") -> set[str]:
        out: set[str] = set()
        if isinstance(node, dict):
            for key, value in node.items():
                path = f"{prefix}.{key}" if prefix else key
                out.add(path)
                # Free-form maps (labels, resources) are typed by their schema, not listed.
                if isinstance(value, dict) and _is_listed(schema, path):
                    out |= value_paths(value, path)
        return out

    # Every value has a schema entry (the schema also rejects unknown keys) and every schema
    # entry is a value with a default, so values.yaml is the complete list of settings.
    assert value_paths(values) == _schema_paths(schema)
    # controls is the controls schema itself, without the draft marker.
    controls = {k: v for k, v in load_json(CONTROLS_SCHEMA).items()
                if k not in ("$schema", "title")}
    assert schema["properties"]["controls"] == controls, (
        "copy schemas/controls.schema.json (without $schema and title) to "
        "charts/mcw-xapp/values.schema.json properties.controls")


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["properties"][part]
    return node


def _is_listed(schema: dict[str, Any], path: str) -> bool:
    return path != "controls" and "properties" in _node(schema, path)


def test_chart_version_matches_the_descriptor() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    descriptor = load_json(DESCRIPTOR)
    assert chart["name"] == descriptor["name"] == XAPP_NAME
    assert chart["appVersion"] == descriptor["version"]
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    image = descriptor["containers"][0]["image"]
    assert (values["image"]["registry"], values["image"]["repository"]) == (
        image["registry"], image["name"])
    assert image["tag"] == chart["appVersion"]


def test_container_arguments_are_ones_mcw_run_accepts(rendered: dict[str, cr.Rendered]) -> None:
    container = _container(rendered["default"])
    assert container["command"][:2] == ["mcw", "run"]
    parser = argparse.ArgumentParser(prog="mcw run")
    configure(parser)
    args = parser.parse_args(container["args"])
    assert args.rmr == "on"
    # mcw run stops within --grace-s; the pod's grace period must leave room for it.
    grace = _pod(rendered["default"])["terminationGracePeriodSeconds"]
    assert args.grace_s == grace - 5


def test_helm_test_pod_outlives_its_run_for_logs(rendered: dict[str, cr.Rendered]) -> None:
    """`helm test --logs` reads the pod's logs after it succeeded: a hook-succeeded delete
    policy removes it first, and helm then exits 1 although the test passed."""
    for r in rendered.values():
        pods = [p for p in r.of_kind("Pod")
                if p["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
        assert pods
        for pod in pods:
            policy = pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
            assert "hook-succeeded" not in policy and "before-hook-creation" in policy
