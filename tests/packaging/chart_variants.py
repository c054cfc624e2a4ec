"""The chart's variants the tests render (:data:`VARIANTS`, rendered once a session by the
``rendered`` fixture of ``conftest.py``) and where the xApp's pod, container and environment sit
in a rendering."""

from __future__ import annotations

from typing import Any

from tests.packaging import chart_render as cr
from tests.packaging.paths import XAPP_NAME

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
#: An Ed25519 public key (PEM), the form `mcw model keygen` writes.
PUBLIC_KEY_PEM = ("-----BEGIN PUBLIC KEY-----\n"
                  "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n"
                  "-----END PUBLIC KEY-----\n")

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


def xapp_container(r: cr.Rendered) -> dict[str, Any]:
    containers = [c for c in xapp_pod(r)["containers"] if c["name"] == XAPP_NAME]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def xapp_pod(r: cr.Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = r.get("Deployment", XAPP_NAME)["spec"]["template"]["spec"]
    return spec


def appenv(r: cr.Rendered, ns: str = "ricxapp") -> dict[str, str]:
    data: dict[str, str] = r.get("ConfigMap", f"configmap-{ns}-{XAPP_NAME}-appenv")["data"]
    return data


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels
