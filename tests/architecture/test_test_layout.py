"""Tests mirror the packages: ``xapp/<pkg>/<module>.py`` is tested by
``tests/xapp/<pkg>/test_<module>.py`` (or ``test_<module>_<aspect>.py``), ``twin/<module>.py`` by
``tests/twin/test_<module>.py``.  A module without one is in :data:`UNMIRRORED` with where it is
tested instead, or why it needs no test of its own; the list is checked both ways, so it cannot
drift from the tree.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: module -> where it is tested instead, or why it has no test of its own.
UNMIRRORED: dict[str, str] = {
    "xapp/adapters/a1_types.py": "the A1 policy types; tests/xapp/adapters/test_a1.py",
    "xapp/adapters/e2/records.py": "plain records; built and read by every e2 test",
    "xapp/adapters/e2/subscription_state.py":
        "the subscriber's per-node state; tests/xapp/adapters/e2/test_subscriber.py (view())",
    "xapp/adapters/lab.py": "the lab ports; tests/xapp/app/test_process.py runs mcw run on them",
    "xapp/adapters/mqtt/connection.py":
        "the MQTT 5 connection; tests/xapp/adapters/mqtt/test_reader.py, test_codec.py",
    "xapp/app/collector.py": "Prometheus collectors; tests/xapp/app/test_endpoints.py (/metrics)",
    "xapp/app/json_logs.py": "tests/integration/test_full_stack.py reads mcw run's JSON logs",
    "xapp/app/metrics.py": "tests/xapp/app/test_endpoints.py (/metrics)",
    "xapp/app/model_cli.py": "mcw model; tests/xapp/model/test_cli.py",
    "xapp/app/runner.py": "the loop's thread; tests/xapp/app/test_supervision.py",
    "xapp/app/sharding.py": "tests/sharding/ and tests/xapp/app/test_sdl_loss.py",
    "xapp/cli.py": "the command table; tests/twin/test_cli.py and every CLI test",
    "xapp/core/class_columns.py":
        "the classes' columns; tests/xapp/core/test_classes.py, adapters/mqtt/test_classes.py",
    "xapp/core/extras.py": "a set's caps and classes; tests/xapp/core/test_classes.py, test_caps",
    "xapp/core/forecast.py":
        "estimators; tests/xapp/core/test_ewma.py, tests/twin/test_policies.py",
    "xapp/core/intake.py": "the latest-KPI table; tests/xapp/core/test_loop.py",
    "xapp/core/kpis.py": "the KPI schema: names and ranges; tests/xapp/adapters/e2/test_mapping.py",
    "xapp/core/policy_book.py": "tests/xapp/core/test_policy.py, tests/xapp/adapters/test_a1.py",
    "xapp/core/ports.py": "interfaces and records; every adapter's tests implement them",
    "xapp/core/rowmap.py": "the loop's row map and decision inputs; tests/xapp/core/test_loop.py",
    "xapp/core/thresholds.py": "tests/xapp/core/test_weights.py, test_decisions, test_classes",
    "xapp/core/traffic.py": "traffic descriptors and class records; tests/xapp/core/test_rules.py",
    "xapp/model/archive.py": "tests/xapp/model/test_artifact_bounds.py",
    "xapp/model/errors.py": "one exception class",
    "xapp/model/files.py": "read_bounded; tests/xapp/model/test_artifact_bounds.py",
    "xapp/model/online.py": "hot reload; tests/xapp/model/test_artifact_online.py",
    "xapp/model/payload.py": "tests/xapp/model/test_artifact_bounds.py",
    "xapp/model/training.py": "tests/xapp/model/test_features.py, test_calibration.py, test_cli.py",
    "xapp/schemas.py": "the schemas' loader; tests/packaging/test_schemas.py",
    "twin/closed_loop_data.py": "tests/twin/test_policies.py, test_directions.py",
    "twin/demo.py": "mcw demo; tests/twin/test_cli.py",
    "twin/fluid.py": "the fluid WRR model; tests/twin/test_policies.py, test_directions.py",
    "twin/kpis.py": "the twin's radio KPIs; tests/xapp/adapters/test_raca5g.py, tests/twin/",
    "twin/loop_driver.py": "tests/twin/test_policies.py, test_directions.py, test_rate_caps.py",
    "twin/plots.py": "the demo's PNGs; tests/twin/test_cli.py",
}


def modules() -> list[Path]:
    return sorted(p for root in ("xapp", "twin") for p in (REPO / root).rglob("*.py")
                  if p.name != "__init__.py" and "asn1" not in p.parts)


def mirrored(module: Path) -> bool:
    rel = module.relative_to(REPO)
    folder = REPO / "tests" / rel.parent
    return (folder / f"test_{rel.stem}.py").exists() or any(folder.glob(f"test_{rel.stem}_*.py"))


def test_every_module_has_a_test_module_or_a_reason() -> None:
    found = modules()
    assert len(found) >= 100, f"read {len(found)} modules: is the tree where it was?"
    missing = [str(m.relative_to(REPO)) for m in found
               if not mirrored(m) and str(m.relative_to(REPO)) not in UNMIRRORED]
    assert missing == [], "add tests/<same path>/test_<module>.py, or a line in UNMIRRORED"


def test_the_list_names_only_modules_that_are_there_without_a_test_module() -> None:
    stale = [name for name in UNMIRRORED
             if not (REPO / name).exists() or mirrored(REPO / name)]
    assert stale == [], "these have a test module now (or are gone): take them off the list"
