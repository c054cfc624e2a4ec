"""The xApp descriptor (config-file.json) passes the onboarder's rules and states what the xApp
does."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from tests.packaging.paths import (
    CONTROLS_SCHEMA,
    DESCRIPTOR,
    DESCRIPTOR_RULES,
    ONBOARDER_SCHEMA,
    POLICY_TYPE_IDS,
    PORTS,
    XAPP_NAME,
    load_json,
)

RX = {"A1_POLICY_REQ", "RIC_HEALTH_CHECK_REQ", "RIC_INDICATION"}
TX = {"A1_POLICY_RESP", "A1_POLICY_QUERY", "RIC_HEALTH_CHECK_RESP"}


def onboarder_validator(rules: dict[str, Any]) -> jsonschema.Draft7Validator:
    """What the onboarder does: the xApp's controls schema replaces the placeholder."""
    schema = copy.deepcopy(rules)
    schema["properties"]["controls"] = load_json(CONTROLS_SCHEMA)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def descriptor() -> dict[str, Any]:
    doc: dict[str, Any] = load_json(DESCRIPTOR)
    return doc


@pytest.fixture(scope="module")
def rules() -> jsonschema.Draft7Validator:
    return onboarder_validator(load_json(DESCRIPTOR_RULES))


def test_descriptor_passes_the_onboarder_rules(descriptor: dict[str, Any],
                                               rules: jsonschema.Draft7Validator) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in rules.iter_errors(descriptor)]
    assert errors == []


def test_descriptor_passes_the_shared_onboarder_schema(descriptor: dict[str, Any]) -> None:
    if not ONBOARDER_SCHEMA.is_file():
        pytest.skip(f"cross-check only: {ONBOARDER_SCHEMA} is not present")
    validator = onboarder_validator(load_json(ONBOARDER_SCHEMA))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(descriptor)]
    assert errors == []


# Each mutation breaks one onboarder rule; the rules schema must reject every one, which shows
# the restated rules are not vacuous.
def _drop_policies(d: dict[str, Any]) -> None:
    del _rmrdata(d)["policies"]


def _string_port(d: dict[str, Any]) -> None:
    _rmrdata(d)["port"] = "4560"


def _float_delay(d: dict[str, Any]) -> None:
    d["livenessProbe"]["initialDelaySeconds"] = 5.5


def _probe_without_period(d: dict[str, Any]) -> None:
    del d["readinessProbe"]["periodSeconds"]


def _bad_version(d: dict[str, Any]) -> None:
    d["version"] = "0.1"


def _registry_with_path(d: dict[str, Any]) -> None:
    d["containers"][0]["image"]["registry"] = "registry.example.com/mcw"


def _image_without_tag(d: dict[str, Any]) -> None:
    del d["containers"][0]["image"]["tag"]


def _metrics_list(d: dict[str, Any]) -> None:
    d["metrics"] = [d["metrics"]]


def _unknown_control(d: dict[str, Any]) -> None:
    d["controls"]["mqtt"]["hostname"] = "x"


def _negative_period(d: dict[str, Any]) -> None:
    d["controls"]["loop"]["control_period_s"] = 0


def _bad_default_policy(d: dict[str, Any]) -> None:
    d["controls"]["default_policy"]["max_weight"] = 256


def _port_without_container(d: dict[str, Any]) -> None:
    del d["messaging"]["ports"][0]["container"]


@pytest.mark.parametrize("mutate", [
    _drop_policies, _string_port, _float_delay, _probe_without_period, _bad_version,
    _registry_with_path, _image_without_tag, _metrics_list, _unknown_control, _negative_period,
    _bad_default_policy, _port_without_container,
], ids=lambda f: f.__name__.strip("_"))
def test_rules_reject_a_broken_descriptor(descriptor: dict[str, Any],
                                          rules: jsonschema.Draft7Validator,
                                          mutate: Any) -> None:
    broken = copy.deepcopy(descriptor)
    mutate(broken)
    assert not rules.is_valid(broken)


def _rmrdata(d: dict[str, Any]) -> dict[str, Any]:
    port: dict[str, Any] = next(p for p in d["messaging"]["ports"] if p["name"] == "rmrdata")
    return port


def test_identity_and_ports(descriptor: dict[str, Any]) -> None:
    assert descriptor["name"] == XAPP_NAME
    assert descriptor["version"] == "0.1.0"
    ports = {p["name"]: p["port"] for p in descriptor["messaging"]["ports"]}
    assert ports == PORTS
    containers = {c["name"] for c in descriptor["containers"]}
    assert containers == {XAPP_NAME}
    assert {p["container"] for p in descriptor["messaging"]["ports"]} <= containers
    assert descriptor["containers"][0]["command"] == ["mcw", "run"]


def test_messages_and_policy_type(descriptor: dict[str, Any]) -> None:
    data = _rmrdata(descriptor)
    rmr = descriptor["rmr"]
    assert set(data["rxMessages"]) == set(rmr["rxMessages"]) == RX
    assert set(data["txMessages"]) == set(rmr["txMessages"]) == TX
    assert data["policies"] == rmr["policies"] == POLICY_TYPE_IDS
    assert rmr["protPort"] == f"tcp:{PORTS['rmrdata']}"
    assert isinstance(rmr["maxSize"], int) and rmr["maxSize"] >= 2072
    assert isinstance(rmr["numWorkers"], int) and rmr["numWorkers"] >= 1
    # Only the RMR data port carries message lists.
    for port in descriptor["messaging"]["ports"]:
        if port["name"] != "rmrdata":
            assert not {"rxMessages", "txMessages", "policies"} & set(port)


def test_probes_point_at_the_health_endpoints(descriptor: dict[str, Any]) -> None:
    assert descriptor["livenessProbe"]["httpGet"] == {"path": "/ric/v1/health/alive",
                                                      "port": PORTS["http"]}
    assert descriptor["readinessProbe"]["httpGet"] == {"path": "/ric/v1/health/ready",
                                                       "port": PORTS["http"]}


def test_metrics_section(descriptor: dict[str, Any]) -> None:
    assert descriptor["metrics"] == {"url": "/metrics", "namespace": "ricxapp"}
