"""Render the chart with helm and validate the manifests against the Kubernetes API schemas.

Validation uses the PyPI package kubernetes-validate, which bundles the OpenAPI-derived JSON
schemas of every Kubernetes release and works offline. The ServiceMonitor is a CRD, absent from
those schemas: it is validated against the CRD's openAPIV3Schema shipped in crds/, made strict
(unknown fields rejected) the way kubernetes-validate's strict mode treats built-in kinds.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.packaging.paths import CHART, SERVICEMONITOR_SCHEMA, load_json

#: Oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and a recent one.
KUBE_VERSIONS = ("1.25.0", "1.33.0")
RELEASE = "mcw-xapp"


class HelmError(RuntimeError):
    """helm exited non-zero; the message carries its stderr."""


@dataclass(frozen=True)
class Rendered:
    """The manifests of one `helm template` run."""

    docs: tuple[dict[str, Any], ...]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        hits = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        if len(hits) != 1:
            names = [d["metadata"]["name"] for d in self.of_kind(kind)]
            raise KeyError(f"{kind}/{name} not rendered exactly once (have {names})")
        return hits[0]

    def one(self, kind: str) -> dict[str, Any]:
        hits = self.of_kind(kind)
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} objects of kind {kind}")
        return hits[0]


def run_helm(helm: str, args: Sequence[str]) -> str:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120,
                          check=False)
    if proc.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout


def _set_args(values: Mapping[str, Any], tmp: Path) -> list[str]:
    if not values:
        return []
    digest = hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:16]
    path = tmp / f"values-{digest}.yaml"
    path.write_text(yaml.safe_dump(dict(values)), encoding="utf-8")
    return ["-f", str(path)]


def template(helm: str, tmp: Path, values: Mapping[str, Any] | None = None, *,
             namespace: str | None = None, kube_version: str = KUBE_VERSIONS[-1],
             set_args: Sequence[str] = ()) -> Rendered:
    """`helm template` the chart (hooks and test pods included) and parse every manifest;
    ``set_args`` are helm's own flags (``--set``, ``--set-json``), after ``values``."""
    args = ["template", RELEASE, str(CHART), "--kube-version", kube_version,
            *_set_args(values or {}, tmp), *set_args]
    if namespace:
        args += ["--namespace", namespace]
    out = run_helm(helm, args)
    docs = tuple(d for d in yaml.safe_load_all(out) if d)
    return Rendered(docs)


def lint(helm: str, tmp: Path, values: Mapping[str, Any] | None = None) -> str:
    return run_helm(helm, ["lint", "--strict", str(CHART), "--kube-version",
                           KUBE_VERSIONS[-1], *_set_args(values or {}, tmp)])


def _strict(node: Any) -> Any:
    """A copy of an OpenAPI v3 schema where objects with listed properties reject others."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.cache
def _servicemonitor_validator() -> jsonschema.Draft7Validator:
    schema = _strict(copy.deepcopy(load_json(SERVICEMONITOR_SCHEMA)))
    return jsonschema.Draft7Validator(schema)


def validate(doc: Mapping[str, Any], kube_version: str) -> list[str]:
    """Problems of one manifest against the API schema of its kind ([] when valid)."""
    if doc.get("apiVersion") == "monitoring.coreos.com/v1" and doc.get("kind") == "ServiceMonitor":
        validator = _servicemonitor_validator()
        return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
    try:
        kubernetes_validate.validate(dict(doc), kube_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{list(exc.path)}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"no schema: {exc}"]
    return []
