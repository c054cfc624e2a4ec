"""The xApp's NetworkPolicy rules as the chart writes them: ingress from the platform and
monitoring, every egress rule naming its destinations, defaults that fit an O-RAN SC RIC and
destinations taken from the values.  ``test_chart_netpol.py`` evaluates who may then connect to
whom."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from tests.packaging import chart_render as cr
from tests.packaging.chart_variants import appenv
from tests.packaging.paths import XAPP_NAME


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
    env = appenv(rendered["default"])
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
