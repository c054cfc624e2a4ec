"""The chart's NetworkPolicies and selectors as an enforcing CNI and Kubernetes' controllers see
them: who may connect to whom (tests/packaging/netpol.py evaluates the rendered policies) and
which pods each selector takes in. ``make e2e-k8s`` enforces the same policies for real
(kube-router beside the bridge CNI, docs/k8s.md)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.packaging import chart_render as cr
from tests.packaging.netpol import Pod, can_connect, selector_matches
from tests.packaging.paths import ROOT, XAPP_NAME

NS = "ricxapp"
INSTALL_DOC = ROOT / "docs" / "install-ric.md"
DNS = Pod("kube-system", {"k8s-app": "kube-dns"})
SDL = Pod("ricplt", {"app": "ricplt-dbaas"})
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
#: What a hardened namespace adds: nothing in or out unless a policy allows it.
DEFAULT_DENY: dict[str, Any] = {
    "metadata": {"name": "default-deny", "namespace": NS},
    "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
#: Addresses the install line's InfluxDB and broker placeholders stand for.
INFLUXDB_IP, BROKER_IP = "192.0.2.20", "192.0.2.30"

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "broker-deploy": {"broker": {"deploy": True}},
    "three-replicas": {"replicaCount": 3},
}


@pytest.fixture(scope="module")
def netpol_rendered(helm: str, tmp_path_factory: pytest.TempPathFactory
                    ) -> dict[str, cr.Rendered]:
    tmp = tmp_path_factory.mktemp("values")
    return {name: cr.template(helm, tmp, values, namespace=NS)
            for name, values in VARIANTS.items()}


def _xapp(r: cr.Rendered) -> Pod:
    template = r.get("Deployment", XAPP_NAME)["spec"]["template"]
    [container] = [c for c in template["spec"]["containers"] if c["name"] == XAPP_NAME]
    return Pod(NS, template["metadata"]["labels"],
               {p["name"]: p["containerPort"] for p in container["ports"]})


def _helm_test_pod(r: cr.Rendered) -> Pod:
    [pod] = [p for p in r.of_kind("Pod")
             if p["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    return Pod(pod["metadata"]["namespace"], pod["metadata"]["labels"])


def _policies(r: cr.Rendered) -> list[dict[str, Any]]:
    return r.of_kind("NetworkPolicy")


def test_no_selector_of_the_xapp_takes_in_the_helm_test_pod(
        netpol_rendered: dict[str, cr.Rendered]) -> None:
    """The xApp's NetworkPolicy would impose its egress on the test pod (not the xApp's own
    port: `helm test` fails), and its PodDisruptionBudget would count a pod no controller owns
    (the disruption controller then allows no eviction)."""
    for name, r in netpol_rendered.items():
        xapp, test_pod = _xapp(r), _helm_test_pod(r)
        selectors = {
            "Deployment": r.get("Deployment", XAPP_NAME)["spec"]["selector"],
            "PodDisruptionBudget": r.one("PodDisruptionBudget")["spec"]["selector"],
            "NetworkPolicy": r.get("NetworkPolicy", XAPP_NAME)["spec"]["podSelector"],
            **{f"Service {s['metadata']['name']}": {"matchLabels": s["spec"]["selector"]}
               for s in r.of_kind("Service") if "broker" not in s["metadata"]["name"]},
        }
        for what, selector in selectors.items():
            assert selector_matches(selector, xapp.labels), (name, what)
            assert not selector_matches(selector, test_pod.labels), (name, what)


@pytest.mark.parametrize("hardened", [False, True], ids=["namespace-open", "default-deny"])
def test_helm_test_pod_reaches_the_xapp_http_port_and_nothing_else(
        netpol_rendered: dict[str, cr.Rendered], hardened: bool) -> None:
    for name, r in netpol_rendered.items():
        policies = _policies(r) + ([DEFAULT_DENY] if hardened else [])
        xapp, test_pod = _xapp(r), _helm_test_pod(r)
        assert can_connect(policies, test_pod, DNS, 53, "UDP"), name
        assert can_connect(policies, test_pod, xapp, 8080), name
        assert not can_connect(policies, test_pod, xapp, 4560), name
        assert not can_connect(policies, test_pod, "192.0.2.1", 443), name
        assert not can_connect(policies, test_pod, SDL, 6379), name


def test_only_named_peers_reach_the_xapp_http_port(
        netpol_rendered: dict[str, cr.Rendered]) -> None:
    r = netpol_rendered["default"]
    policies, xapp = _policies(r), _xapp(r)
    assert can_connect(policies, PROMETHEUS, xapp, 8080)
    # A pod of the namespace with the test pod's name but another release's instance label.
    stranger = dict(_helm_test_pod(r).labels, **{"app.kubernetes.io/instance": "other"})
    for pod in (Pod(NS, {"app": "curious"}), Pod(NS, stranger)):
        assert not can_connect(policies, pod, xapp, 8080), pod


def _install_args(text: str) -> tuple[list[str], str]:
    """The `helm install` line of section 5 of docs/install-ric.md: its --set* flags with the
    placeholders filled in, and its namespace."""
    section = text.split("## 5. Install with Helm", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    line = block.split("\n\n", 1)[0].replace("\\\n", " ")

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name.startswith("influxdb-"):
            return INFLUXDB_IP
        if name.startswith("broker-"):
            return BROKER_IP
        return "placeholder"
    words = shlex.split(re.sub(r"<([^>]+)>", fill, line))
    assert words[:4] == ["helm", "install", XAPP_NAME, "charts/mcw-xapp"], words[:4]
    ns = words[words.index("-n") + 1]
    flags = [w for i, w in enumerate(words) if w.startswith("--set")
             or (i > 0 and words[i - 1].startswith("--set"))]
    assert len(flags) == 2 * sum(w.startswith("--set") for w in words)
    return flags, ns


def test_documented_install_with_external_servers_lets_the_xapp_reach_them(
        helm: str, tmp_path: Path) -> None:
    """docs/install-ric.md installs with InfluxDB and the broker outside the cluster: its line
    must open the egress to them, or the xApp stays not ready (503) under an enforcing CNI."""
    flags, ns = _install_args(INSTALL_DOC.read_text(encoding="utf-8"))
    assert ns == NS
    r = cr.template(helm, tmp_path, namespace=ns, set_args=flags)
    env = r.get("ConfigMap", f"configmap-{NS}-{XAPP_NAME}-appenv")["data"]
    influx = urllib.parse.urlsplit(env["MCW_INFLUXDB_URL"])
    assert influx.hostname == INFLUXDB_IP and env["MCW_MQTT_HOST"] == BROKER_IP
    policies, xapp = _policies(r), _xapp(r)
    assert can_connect(policies, xapp, INFLUXDB_IP, influx.port or 80)
    assert can_connect(policies, xapp, BROKER_IP, int(env["MCW_MQTT_PORT"]))
    # The platform is still the RIC's own, and nothing else opens up.
    assert can_connect(policies, xapp, DNS, 53, "UDP")
    assert can_connect(policies, xapp, SDL, 6379)
    assert not can_connect(policies, xapp, "192.0.2.40", influx.port or 80)


def _fake_tools(bin_dir: Path, failures: int) -> Path:
    """``wget`` that fails ``failures`` times then prints a ready document, and a ``sleep`` that
    does not wait; the calls are counted in ``calls``."""
    calls = bin_dir / "calls"
    (bin_dir / "wget").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f'[ "$(wc -l < {calls})" -gt {failures} ] || exit 1\n'
        "echo '{\"ready\": true}'\n")
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("wget", "sleep"):
        (bin_dir / tool).chmod(0o755)
    return calls


@pytest.mark.parametrize("failures,passes", [(0, True), (3, True), (10, False)])
def test_helm_test_pod_retries_until_the_policy_lets_it_through(
        netpol_rendered: dict[str, cr.Rendered], tmp_path: Path, failures: int,
        passes: bool) -> None:
    """An enforcing CNI applies a new pod's rules a moment after it starts (kube-router did in
    make e2e-k8s): the test pod's first connections may be refused, so it tries again."""
    [pod] = [p for p in netpol_rendered["default"].of_kind("Pod")
             if p["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    command = pod["spec"]["containers"][0]["command"]
    calls = _fake_tools(tmp_path, failures)
    res = subprocess.run(command, capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    tries = calls.read_text().splitlines()
    assert (res.returncode == 0) == passes, res
    assert len(tries) == (failures + 1 if passes else 10)
    assert all(t.endswith("http://service-ricxapp-mcw-xapp-http:8080/ric/v1/health/ready")
               for t in tries)
    if passes:
        assert json.loads(res.stdout) == {"ready": True}
