"""The A1 policy type and the controls schema agree with what the xApp accepts."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from functools import cache
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from tests.packaging.paths import (
    CHART,
    CONTROLS_SCHEMA,
    DESCRIPTOR,
    POLICY_TYPE,
    POLICY_TYPE_IDS,
    POLICY_TYPES,
    SCHEMAS,
    load_json,
)
from xapp.app import config
from xapp.core.policy import KNOWN_WATS, Policy, PolicyError, SteeringMode

#: Policy rules that span several fields: JSON Schema cannot state them (and with
#: default_policy merging they depend on the xApp's configuration), so the xApp checks them.
CROSS_FIELD = ("exceeds max_share", "add up to more than 1", "fixed_split needs",
               "active_standby needs", "latency_bound needs", "priority needs",
               # Issue 33: no WAT left to carry traffic.
               "excludes every WAT", "split_pct > 0 is in excluded_wats",
               "priority list is in excluded_wats",
               # Issue 35: a mode no mainline data path can carry out.
               "mode redundant is refused")
#: What 20101 adds to 20100's keys.
NEW_KEYS = {"rules", "rtt_max_ms", "loss_max_pct", "urgent_cap_fraction"}


@pytest.fixture(scope="module")
def policy_type() -> dict[str, Any]:
    """The newest type (20101): the one the default policy follows."""
    doc: dict[str, Any] = load_json(POLICY_TYPE)
    return doc


@pytest.fixture(scope="module")
def a1_validator(policy_type: dict[str, Any]) -> jsonschema.Draft7Validator:
    jsonschema.Draft7Validator.check_schema(policy_type["create_schema"])
    return jsonschema.Draft7Validator(policy_type["create_schema"])


@pytest.mark.parametrize("type_id", POLICY_TYPE_IDS)
def test_registration_body(type_id: int) -> None:
    # Exactly what PUT /A1-P/v2/policytypes/{id} takes.
    policy_type = load_json(POLICY_TYPES[type_id])
    assert set(policy_type) == {"name", "description", "policy_type_id", "create_schema"}
    assert policy_type["policy_type_id"] == type_id
    assert policy_type["name"] == "mcw_steering"
    assert policy_type["create_schema"]["additionalProperties"] is False
    jsonschema.Draft7Validator.check_schema(policy_type["create_schema"])


def test_policy_keys_match_the_policy_record(policy_type: dict[str, Any]) -> None:
    props = set(policy_type["create_schema"]["properties"])
    record_keys = set(Policy.from_dict({
        "rtt_bound_ms": 10.0, "rtt_max_ms": 20.0, "loss_max_pct": 1.0,
        "urgent_cap_fraction": 0.8, "directions": {"dl": {}},
        "rules": [{"name": "r", "match": {"dscp": [1]}}]}).to_dict())
    assert props == record_keys | {"scope"}
    # redundant is in the enum so that the xApp, not the mediator, answers it with the reason.
    assert set(policy_type["create_schema"]["properties"]["mode"]["enum"]) == {
        m.value for m in SteeringMode} | {"redundant"}
    wats = policy_type["create_schema"]["properties"]["wats"]["propertyNames"]["enum"]
    assert tuple(wats) == KNOWN_WATS
    # 20100: the same keys without what 20101 added, and the four modes of its time.
    older = load_json(POLICY_TYPES[20100])["create_schema"]["properties"]
    assert set(older) == props - NEW_KEYS
    assert set(older["mode"]["enum"]) == {"load_balancing", "fixed_split", "active_standby",
                                          "latency_bound"}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_everything_20100_accepts_20101_accepts_with_the_same_meaning(
        data: st.DataObject) -> None:
    doc = data.draw(from_schema(load_json(POLICY_TYPES[20100])["create_schema"]))
    assert isinstance(doc, dict) and a1_create_schema().is_valid(doc)
    # One record for both types: the same document is the same policy (or the same refusal).
    body = {k: v for k, v in doc.items() if k != "scope"}
    try:
        policy = Policy.from_dict(body)
    except PolicyError as exc:
        assert any(rule in str(exc) for rule in CROSS_FIELD), str(exc)
        return
    assert not policy.rules and not policy.has_thresholds


@pytest.mark.parametrize("doc", [
    {},
    {"scope": {"cpes": []}},
    {"scope": {"cpes": ["cpe-0001", "agv.7"]}, "mode": "load_balancing", "max_weight": 255},
    {"mode": "fixed_split", "wats": {"nr": {"split_pct": 30}, "wifi": {"split_pct": 70}}},
    {"mode": "active_standby", "priority": ["wifi", "nr"], "excluded_wats": ["lifi"]},
    {"mode": "latency_bound", "rtt_bound_ms": 20, "demand_mbps": 100},
    {"wats": {"lifi": {"min_share": 0.1, "max_share": 0.5}}, "hysteresis_pct": 5,
     "capacity_floor_mbps": 2, "update_period_s": 0.5},
    # 20101 (issue 35)
    {"mode": "priority", "priority": ["wifi", "nr"], "demand_mbps": 40, "rtt_max_ms": 80,
     "wats": {"lte": {"loss_max_pct": 2}}},
    {"mode": "smallest_delay", "rtt_max_ms": 30, "directions": {"dl": {"loss_max_pct": 1}}},
    {"urgent_cap_fraction": 0.85, "rules": [
        {"name": "voice", "match": {"protocols": ["udp", 132], "dscp": [46],
                                    "destination_ports": [5060, [10000, 20000]]},
         "mode": "smallest_delay", "rtt_max_ms": 60, "urgent": True},
        {"name": "robot", "match": {"cgroup": "/system.slice/robot.service"},
         "mode": "active_standby", "priority": ["nr", "wifi"],
         "directions": {"dl": {"match": {"destination_prefixes": ["10.20.0.0/16"]}}}},
        {"name": "bulk", "match": {"destination_prefixes": ["2001:db8::/32"]},
         "mode": "load_balancing", "excluded_wats": ["lte"]}]},
])
def test_examples_accepted_by_schema_and_xapp(a1_validator: jsonschema.Draft7Validator,
                                              doc: dict[str, Any]) -> None:
    assert a1_validator.is_valid(doc)
    Policy.from_dict({k: v for k, v in doc.items() if k != "scope"})


@pytest.mark.parametrize("doc", [
    {"mode": "round_robin"},
    {"max_weight": 0},
    {"max_weight": 256},
    {"max_weight": "100"},
    {"wats": {"5g": {"min_share": 0.1}}},
    {"wats": {"nr": {"min_share": 1.5}}},
    {"wats": {"nr": {"weight": 3}}},
    {"priority": ["nr", "nr"]},
    {"priority": ["satellite"]},
    {"rtt_bound_ms": 0},
    {"update_period_s": 0},
    {"hysteresis_pct": -1},
    {"scope": {"cpes": ["a/b"]}},
    {"scope": {"cpes": "cpe-1"}},
    {"scope": {"cells": ["c1"]}},
    {"colour": "blue"},
    {"rules": [{"name": "x"}]},
    {"rules": [{"name": "x", "match": {}}]},
    {"rules": [{"name": "X", "match": {"dscp": [1]}}]},
    {"rules": [{"name": "x", "match": {"protocols": ["quic"]}}]},
    {"rules": [{"name": "x", "match": {"destination_ports": [0]}}]},
    {"rules": [{"name": "x", "match": {"dscp": [1]}, "update_period_s": 1}]},
    {"rules": [{"name": f"r{i}", "match": {"dscp": [i]}} for i in range(9)]},
    {"rtt_max_ms": 0},
    {"loss_max_pct": 101},
    {"urgent_cap_fraction": 1.5},
])
def test_schema_rejects(a1_validator: jsonschema.Draft7Validator, doc: dict[str, Any]) -> None:
    assert not a1_validator.is_valid(doc)


_wat = st.sampled_from([*KNOWN_WATS, "5g"])
_share = st.floats(min_value=-0.2, max_value=1.2, allow_nan=False)
_limits = st.fixed_dictionaries({}, optional={
    "min_share": _share, "max_share": _share,
    "split_pct": st.floats(min_value=-5, max_value=99, allow_nan=False)})
_policy_docs = st.fixed_dictionaries({}, optional={
    "mode": st.sampled_from([*(m.value for m in SteeringMode), "redundant", "bogus"]),
    "max_weight": st.integers(min_value=-1, max_value=300),
    "wats": st.dictionaries(_wat, _limits, max_size=4),
    "excluded_wats": st.lists(_wat, max_size=3),
    "priority": st.lists(_wat, max_size=3),
    "rtt_bound_ms": st.floats(min_value=-1, max_value=100, allow_nan=False),
    "demand_mbps": st.floats(min_value=-1, max_value=1000, allow_nan=False),
    "capacity_floor_mbps": st.floats(min_value=-1, max_value=10, allow_nan=False),
    "hysteresis_pct": st.floats(min_value=-1, max_value=10, allow_nan=False),
    "update_period_s": st.floats(min_value=-1, max_value=10, allow_nan=False),
    "rtt_max_ms": st.floats(min_value=-1, max_value=100, allow_nan=False),
    "loss_max_pct": st.floats(min_value=-1, max_value=101, allow_nan=False),
    "urgent_cap_fraction": st.floats(min_value=0.3, max_value=1.1, allow_nan=False),
})


# A function, not a fixture: hypothesis would print the validator's (huge) repr on failure.
@cache
def a1_create_schema() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(load_json(POLICY_TYPE)["create_schema"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_policy_docs)
def test_schema_and_policy_record_agree(doc: dict[str, Any]) -> None:
    """Whatever the mediator lets through the xApp accepts, up to the cross-field rules, and
    whatever the xApp accepts the mediator lets through."""
    a1 = a1_create_schema()
    schema_ok = a1.is_valid(doc)
    try:
        Policy.from_dict(doc)
    except PolicyError as exc:
        if schema_ok:
            assert any(rule in str(exc) for rule in CROSS_FIELD), str(exc)
    else:
        assert schema_ok, sorted(e.message for e in a1.iter_errors(doc))


@settings(max_examples=100, deadline=None)
@given(doc=_policy_docs)
def test_policy_record_serialises_into_the_schema(doc: dict[str, Any]) -> None:
    try:
        policy = Policy.from_dict(doc)
    except PolicyError:
        return
    assert a1_create_schema().is_valid(policy.to_dict())


def test_controls_default_policy_uses_the_a1_keys(policy_type: dict[str, Any]) -> None:
    controls = load_json(CONTROLS_SCHEMA)
    a1_props = {k: v for k, v in policy_type["create_schema"]["properties"].items()
                if k != "scope"}
    assert controls["properties"]["default_policy"]["properties"] == a1_props, (
        "copy the A1 create_schema properties (without scope) to controls.schema.json "
        "default_policy, then controls.schema.json to the chart's values.schema.json")
    assert controls["properties"]["default_policy"]["additionalProperties"] is False


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_controls_schema_is_self_contained() -> None:
    # The onboarder embeds it in the descriptor schema, where '#' means the descriptor schema.
    controls = load_json(CONTROLS_SCHEMA)
    jsonschema.Draft7Validator.check_schema(controls)
    assert _refs(controls) == []
    assert "$id" not in controls


def test_controls_schema_matches_the_runtime_settings() -> None:
    controls = load_json(CONTROLS_SCHEMA)["properties"]
    defaults = config.Controls().to_dict()
    # The schema still describes where the loop's settings were (read, with a warning).
    former = {(s, k) for s, k in config._FORMER_PLACES}
    assert set(controls) == set(defaults) | {k for s, k in former if s is None}
    for section, value in defaults.items():
        if dataclasses.is_dataclass(getattr(config.Controls(), section)):
            moved = {k for s, k in former if s == section}
            assert set(controls[section]["properties"]) == set(value) | moved, section
    for s, k in former:  # and says where they went
        where = controls[k] if s is None else controls[s]["properties"][k]
        assert f"Deprecated: use loop.{k}" in where["description"]


def test_runtime_loads_the_descriptor() -> None:
    loaded = config.load_config(DESCRIPTOR, schemas=SCHEMAS, environ={})
    raw = load_json(DESCRIPTOR)["controls"]
    assert loaded.controls.mqtt.port == raw["mqtt"]["port"]
    assert loaded.controls.model.path == raw["model"]["path"]
    assert dict(loaded.controls.default_policy) == raw["default_policy"]


def test_descriptor_controls_validate(policy_type: dict[str, Any]) -> None:
    validator = jsonschema.Draft7Validator(load_json(CONTROLS_SCHEMA))
    controls = load_json(DESCRIPTOR)["controls"]
    assert validator.is_valid(controls)
    # The default policy is a valid policy on its own.
    Policy.from_dict(controls["default_policy"])
    broken = copy.deepcopy(controls)
    broken["default_policy"]["mode"] = "fastest"
    assert not validator.is_valid(broken)


def test_policy_examples_in_the_install_guide_are_valid() -> None:
    guide = (SCHEMAS.parent / "docs" / "install-ric.md").read_text(encoding="utf-8")
    bodies = [json.loads(b) for b in re.findall(r"/policies/[\w-]+\"\s*\\\s*-d '(\{.*?\})'",
                                                 guide, flags=re.DOTALL)]
    assert len(bodies) >= 2
    for body in bodies:
        assert a1_create_schema().is_valid(body), body
        Policy.from_dict({k: v for k, v in body.items() if k != "scope"})
    for t in POLICY_TYPE_IDS:
        assert f"A1-P/v2/policytypes/{t}\" -d @schemas/a1-policy-type-{t}.json" in guide


def test_the_install_guide_creates_the_influxdb_the_chart_names() -> None:
    """Issue 33: the guide never created the InfluxDB 2 org, bucket and token of the values."""
    import yaml

    guide = (SCHEMAS.parent / "docs" / "install-ric.md").read_text(encoding="utf-8")
    influx = yaml.safe_load((CHART / "values.yaml").read_text())["influxdb"]
    org, bucket = influx["org"], influx["bucket"]
    assert f"influx org create --name {org}\n" in guide
    assert f"influx bucket create --org {org} --name {bucket} " in guide
    assert f"influx bucket list --org {org} --name {bucket} " in guide
    create = re.search(r"influx auth create (.*?)\n\n", guide.replace("\\\n", ""), re.DOTALL)
    assert create is not None
    assert f"--org {org}" in create.group(1)
    assert '--read-bucket "$BUCKET_ID" --write-bucket "$BUCKET_ID"' in create.group(1)
    # The token goes into the Secret the chart reads by default.
    assert f"create secret generic {influx['auth']['existingSecret']} --from-file=token=" in guide
