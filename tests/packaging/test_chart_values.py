"""The chart's values: bad ones refused, every one documented (values.yaml and the chart's
README), values.schema.json mirroring values.yaml and the controls schema, and the chart's
version matching the descriptor."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.packaging import chart_render as cr
from tests.packaging.chart_variants import PEM, PUBLIC_KEY_PEM
from tests.packaging.paths import CHART, CONTROLS_SCHEMA, DESCRIPTOR, XAPP_NAME, load_json


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
