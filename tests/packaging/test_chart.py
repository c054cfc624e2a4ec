"""The Helm chart lints, renders in every variant, validates against the Kubernetes API schemas
and follows the O-RAN SC conventions and the descriptor's contract: the xApp's pod, its
Services, probes, security context, replicas and helm test pod.  Its mounted files, its
NetworkPolicy rules, the deployed broker and the values are in ``test_chart_files.py``,
``test_chart_egress.py``, ``test_chart_broker.py`` and ``test_chart_values.py``."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from tests.packaging import chart_render as cr
from tests.packaging.chart_variants import VARIANTS, appenv, pod_labels, xapp_container, xapp_pod
from tests.packaging.paths import DESCRIPTOR, GID, PORTS, ROOT, UID, XAPP_NAME, load_json
from xapp.app import config
from xapp.app.run_cli import configure


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


def test_oran_conventions(rendered: dict[str, cr.Rendered]) -> None:
    r = rendered["default"]
    pod = xapp_pod(r)
    assert pod["hostname"] == XAPP_NAME
    assert pod["enableServiceLinks"] is True
    rmr = r.get("Service", "service-ricxapp-mcw-xapp-rmr")
    assert [(p["name"], p["port"]) for p in rmr["spec"]["ports"]] == [
        ("rmrdata", PORTS["rmrdata"]), ("rmrroute", PORTS["rmrroute"])]
    http = r.get("Service", "service-ricxapp-mcw-xapp-http")
    assert [(p["name"], p["port"]) for p in http["spec"]["ports"]] == [("http", PORTS["http"])]
    env = appenv(r)
    assert env["CONFIG_FILE"] == "/opt/ric/config/config-file.json"
    assert env["RMR_SEED_RT"] == "/opt/ric/config/router.txt"
    assert env["RMR_SRC_ID"] == "service-ricxapp-mcw-xapp-rmr.ricxapp"
    assert env["RMR_RTG_SVC"] == str(PORTS["rmrroute"])
    assert env["PLT_NAMESPACE"] == "ricplt"
    container = xapp_container(r)
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
    assert xapp_container(r)["args"][:2] == ["--rmr", "auto"]
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
        pod = xapp_pod(r)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == UID
        assert pod["securityContext"]["runAsGroup"] == GID
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        sc = xapp_container(r)["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["runAsUser"] == UID
        # The only writable path is the /tmp emptyDir.
        mounts = {m["mountPath"]: m for m in xapp_container(r)["volumeMounts"]}
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
    c = xapp_container(rendered["default"])
    assert c["livenessProbe"]["httpGet"] == {"path": "/ric/v1/health/alive", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ric/v1/health/ready", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/ric/v1/health/alive"
    descriptor = load_json(DESCRIPTOR)
    assert descriptor["livenessProbe"]["httpGet"]["path"] == c["livenessProbe"]["httpGet"]["path"]
    assert "startupProbe" not in xapp_container(rendered["minimal-other-namespace"])


def test_replicas_share_the_fleet(rendered: dict[str, cr.Rendered]) -> None:
    """One pod: no leases, Recreate (as before).  Three: sharding on, each pod's replica id
    its pod name (the hostname is the xApp name in every pod), rolling updates one pod at a
    time, the PDB lets one pod go, and the environment is what the runtime reads."""
    one, three = rendered["default"], rendered["three-replicas"]
    assert appenv(one)["MCW_SHARDING_ENABLED"] == "false"
    assert one.get("Deployment", XAPP_NAME)["spec"]["strategy"] == {"type": "Recreate"}
    deployment = three.get("Deployment", XAPP_NAME)
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    env = appenv(three)
    assert env["MCW_SHARDING_ENABLED"] == "true" and env["MCW_SHARDING_SHARDS"] == "64"
    replica_id = {e["name"]: e for e in xapp_container(three)["env"]}["MCW_REPLICA_ID"]
    assert replica_id["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Each pod's own address for submgr's answers and its appmgr entry (docs/replicas.md).
    pod_ip = {e["name"]: e for e in xapp_container(three)["env"]}["MCW_POD_IP"]
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
    c = xapp_container(r)
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


def test_other_namespace_and_fqdn(rendered: dict[str, cr.Rendered]) -> None:
    r = rendered["minimal-other-namespace"]
    r.get("Service", "service-xapps-mcw-xapp-rmr")
    r.get("Service", "service-xapps-mcw-xapp-http")
    env = appenv(r, "xapps")
    assert env["RMR_SRC_ID"] == "service-xapps-mcw-xapp-rmr.xapps.svc.cluster.local"
    assert xapp_container(r)["image"] == f"registry.example.com/mcw/mcw-xapp@sha256:{'ab' * 32}"
    assert xapp_pod(r)["serviceAccountName"] == "default"


def test_container_arguments_are_ones_mcw_run_accepts(rendered: dict[str, cr.Rendered]) -> None:
    container = xapp_container(rendered["default"])
    assert container["command"][:2] == ["mcw", "run"]
    parser = argparse.ArgumentParser(prog="mcw run")
    configure(parser)
    args = parser.parse_args(container["args"])
    assert args.rmr == "on"
    # mcw run stops within --grace-s; the pod's grace period must leave room for it.
    grace = xapp_pod(rendered["default"])["terminationGracePeriodSeconds"]
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
