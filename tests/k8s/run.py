"""``make e2e-k8s``: the chart installed by helm into a real single-node Kubernetes built here.

The steps, in order (each timed; the first that fails stops the run, prints its error and the
logs that explain it, and everything is torn down):

1. images: the xApp's (podman, the Dockerfile's ``runtime`` target, without RMR), the broker's
   and ``helm test``'s (Debian mosquitto and wget, debootstrap), the pause image (``pause.c``);
   a second model artifact (``mcw model train``, a new signing key) for the model upgrade;
2. the cluster (:mod:`tests.k8s.cluster`): node namespace, certificates, etcd, kube-apiserver,
   kube-controller-manager, kube-scheduler, containerd with the images imported, the kubelet
   (node Ready), kube-proxy, kube-router (NetworkPolicy enforced), CoreDNS;
3. the platform the chart expects in ``ricplt``: Redis (SDL) and InfluxDB 1.8 run as processes
   on the node's address, outside the cluster, behind Services of their O-RAN SC names
   (``service-ricplt-dbaas-tcp``, ``r4-influxdb-influxdb2``) with EndpointSlices naming that
   address; ``ricxapp`` with Pod Security ``restricted`` enforced, the Secrets and the
   ``dbaas-appconfig`` ConfigMap the chart refers to;
4. ``helm install`` (the xApp as ``REPLICAS`` pods sharing the CPEs by shards, with
   ``rmr.mode=auto``, the chart's Mosquitto with a NodePort and ``broker.proxies``); checks:
   admitted under ``restricted`` (and a pod without its security context refused), startup,
   liveness and readiness probes pass and the pods turn Ready, their shards are disjoint and
   cover all, the NetworkPolicy objects exist (their egress names the node's address, where the
   platform's servers and CoreDNS run, as ipBlocks: the chart's external-server case);
5. the sites (:mod:`tests.k8s.sites`): dry-run CPE agents and a proxy agent in network
   namespaces outside the cluster, a KPI feed into InfluxDB; every agent applies weights from
   the in-cluster xApp through the in-cluster broker;
6. ``helm test --logs``; NetworkPolicy enforced: probe pods with and without the helm test
   pod's labels, the xApp's own connections, the PodDisruptionBudget counting the xApp's pods
   only; ``helm upgrade`` of a control (applied live: same pod, the new value in
   ``/ric/v1/config``); ``helm upgrade`` of the model (a new pod that runs the new artifact);
   ``helm rollback`` (the shipped model again, the control kept); one pod deleted with an A1
   policy in SDL: the survivor takes every shard, the replacement rejoins, both put the policy
   in force and every agent's weight version keeps growing (nothing lost); ``helm uninstall``.

The report (every step, its time and checks) is printed and written to ``OUT/report.json`` and
``OUT/report.txt``; every component's log is in ``OUT/logs``, the agents' in ``OUT/run/sites``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.feeder import ScenarioFeeder
from tests.e2e.observer import Observer
from tests.e2e.report import Check, versions_in_order
from tests.integration.stack import AGENT_BINARY
from tests.k8s import netpol
from tests.k8s.cluster import NODE_IP, Cluster, leftovers_of_earlier_runs
from tests.k8s.images import Images, build_images
from tests.k8s.pki import leaf
from tests.k8s.sites import PROXY_ID, Sites
from tests.support.influxd import InfluxServer, influxd_binary, start_influxd
from tests.support.mosquitto import Pki, cpe_name, make_pki
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer, redis_binary
from xapp.core.shards import shard_of

ROOT = Path(__file__).resolve().parents[2]
K8S_BIN = ROOT / ".tools" / "k8s" / "bin"
HELM = ROOT / ".tools" / "bin" / "helm"
CHART = ROOT / "charts" / "mcw-xapp"
RELEASE = "mcw-xapp"
NS = "ricxapp"
PLT = "ricplt"
BROKER_NODE_PORT = 30883
#: The deployed broker's listener (broker/mosquitto.conf).
BROKER_PORT = 8883
HTTP_SERVICE = f"service-{NS}-{RELEASE}-http"
SDL_NAMESPACE = "mcw"
#: xApp pods the chart installs (replicaCount): above one, they share the CPEs by shards.
REPLICAS = 2
SHARDS_PATH = "/ric/v1/shards"
CPES_PATH = "/ric/v1/cpes"
XAPP_SELECTOR = f"app.kubernetes.io/name=mcw-xapp,app.kubernetes.io/instance={RELEASE}"
#: The helm test pod's labels (the chart's mcw-xapp.testSelectorLabels).
TEST_LABELS = {"app.kubernetes.io/name": "mcw-xapp-test", "app.kubernetes.io/instance": RELEASE}
BROKER_SELECTOR = f"app.kubernetes.io/name=mcw-xapp-broker,app.kubernetes.io/instance={RELEASE}"
#: The control the first upgrade changes, and its new value (applied live, no restart).
CONTROL = ("loop.control_period_s", 0.5)
#: The A1 instance written to SDL before the pod is deleted (RMR, A1's transport, is not in the
#: image): 50/50 between NR and Wi-Fi, LiFi excluded.
SPLIT = {"mode": "fixed_split", "excluded_wats": ["lifi"],
         "wats": {"nr": {"split_pct": 50}, "wifi": {"split_pct": 50}}}
SPLIT_ID = "e2e-k8s-split"


class StepFailed(Exception):
    def __init__(self, step: str, error: BaseException) -> None:
        super().__init__(f"{step}: {type(error).__name__}: {error}")
        self.step = step
        self.error = error


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    ok: bool = True
    error: str = ""
    checks: list[Check] = field(default_factory=list)


@dataclass
class Report:
    steps: list[Step] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        st = Step(name)
        self.steps.append(st)
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        try:
            yield st
        except Exception as exc:
            st.ok, st.error = False, f"{type(exc).__name__}: {exc}"
            raise StepFailed(name, exc) from exc
        except BaseException:  # Ctrl-C, SIGTERM: the step did not finish
            st.ok, st.error = False, "interrupted"
            raise
        finally:
            st.seconds = round(time.monotonic() - t0, 1)
        for c in st.checks:
            print(f"   {'ok ' if c.ok else 'FAIL'} {c.name}" + (f": {c.detail}" if c.detail
                                                              else ""), flush=True)
        print(f"   ({st.seconds} s)", flush=True)

    @property
    def ok(self) -> bool:
        return all(s.ok and all(c.ok for c in s.checks) for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "facts": self.facts,
                "steps": [{"name": s.name, "seconds": s.seconds, "ok": s.ok, "error": s.error,
                           "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail}
                                      for c in s.checks]} for s in self.steps]}

    def to_text(self) -> str:
        lines = []
        for s in self.steps:
            mark = "ok  " if s.ok and all(c.ok for c in s.checks) else "FAIL"
            lines.append(f"{mark} {s.seconds:7.1f} s  {s.name}")
            if s.error:
                lines.append(f"             error: {s.error}")
            for c in s.checks:
                lines.append(f"             {'ok ' if c.ok else 'FAIL'} {c.name}"
                             + (f": {c.detail}" if c.detail else ""))
        lines.append(f"facts: {json.dumps(self.facts)}")
        lines.append("e2e-k8s: " + ("PASS" if self.ok else "FAIL"))
        return "\n".join(lines)


# --- the run's parts --------------------------------------------------------------------------

@dataclass
class Run:
    out: Path
    report: Report
    cluster: Cluster
    agents: int = 3
    images: Images | None = None
    pki: Pki | None = None
    model_dir: Path | None = None
    model_pub: Path | None = None
    redis: RedisServer | None = None
    influx: InfluxServer | None = None
    sites: Sites | None = None
    observer: Observer | None = None
    feeder: ScenarioFeeder | None = None
    cpes: list[str] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    @property
    def scratch(self) -> Path:
        return self.out / "run"

    # helm and kubectl
    def helm(self, *args: str, timeout: float = 600,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=timeout,
                             env=self.cluster.env())
        if check and res.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args[:2])}: exit {res.returncode}\n"
                               f"{res.stdout[-3000:]}{res.stderr[-3000:]}")
        return res

    def pods(self, selector: str) -> list[dict[str, Any]]:
        doc = self.cluster.kubectl_json("-n", NS, "get", "pods", "-l", selector)
        items: list[dict[str, Any]] = doc["items"]  # type: ignore[assignment]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def xapp_pods(self) -> list[dict[str, Any]]:
        """The xApp's pods (not terminating), by name."""
        return sorted(self.pods(XAPP_SELECTOR), key=lambda p: str(p["metadata"]["name"]))

    def wait_xapp_ready(self, other_than: Collection[str] = (), count: int = REPLICAS,
                        timeout_s: float = 240) -> list[dict[str, Any]]:
        """``count`` xApp pods, none of ``other_than``, all Ready (and no other)."""
        def ready() -> bool:
            pods = self.xapp_pods()
            return (len(pods) == count and all(_is_ready(p) for p in pods)
                    and not {p["metadata"]["name"] for p in pods} & set(other_than))
        if not wait_until(ready, timeout_s, 1.0):
            raise RuntimeError(f"not {count} Ready xApp pods (other than {sorted(other_than)}) "
                               f"within {timeout_s:.0f} s: "
                               f"{[p['metadata']['name'] for p in self.xapp_pods()]}")
        return self.xapp_pods()

    def xapp_get(self, path: str, pod: dict[str, Any] | None = None) -> tuple[int, Any]:
        """GET ``path`` from ``pod`` (default: the first xApp pod) at its pod IP."""
        if pod is None:
            pods = self.xapp_pods()
            if not pods:
                return 0, "no xApp pod"
            pod = pods[0]
        ip = pod["status"].get("podIP")
        if not ip:
            return 0, f"{pod['metadata']['name']} has no IP"
        try:
            with urllib.request.urlopen(f"http://{ip}:8080{path}", timeout=5) as r:
                body = r.read()
                return int(r.status), json.loads(body) if body[:1] in (b"{", b"[") else body
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError as exc:
            return 0, str(exc)

    def xapp_get_all(self, path: str) -> dict[str, tuple[int, Any]]:
        """GET ``path`` from every xApp pod: pod name -> (status, document)."""
        return {p["metadata"]["name"]: self.xapp_get(path, p) for p in self.xapp_pods()}

    def sdl(self) -> dict[str, Any]:
        """The xApp's SDL namespace as stored in Redis (ricsdl, as the xApp reads it)."""
        from ricsdl.syncstorage import SyncStorage

        assert self.redis is not None
        os.environ["DBAAS_SERVICE_HOST"] = "127.0.0.1"
        os.environ["DBAAS_SERVICE_PORT"] = str(self.redis.port)
        sdl = SyncStorage()
        try:
            return {k: json.loads(v) for k, v in sdl.find_and_get(SDL_NAMESPACE, "*").items()}
        finally:
            sdl.close()

    def latest(self) -> dict[str, tuple[int, dict[str, int]]]:
        """Each CPE's latest applied (version, weights), online messages only."""
        assert self.observer is not None
        out: dict[str, tuple[int, dict[str, int]]] = {}
        for r in self.observer.snapshot():
            if r.online and r.version > 0:
                out[r.cpe] = (r.version, r.weights)
        return out

    def diagnose(self) -> str:
        text = [self.cluster.diagnose(NS)]
        if self.cluster.procs.get("kube-apiserver") and \
                self.cluster.procs["kube-apiserver"].running:
            for sel in (XAPP_SELECTOR, BROKER_SELECTOR):
                res = self.cluster.kubectl("-n", NS, "logs", "-l", sel, "--tail=40",
                                           "--all-containers", "--prefix", check=False)
                text.append(f"--- logs {sel}:\n{res.stdout}{res.stderr}")
        if self.sites is not None:
            for s in self.sites.sites:
                text.append(f"--- agent {s.ident}:\n{self.sites.log(s.ident, 15)}")
        return "\n".join(text)


def _is_ready(pod: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def shard_split(run: Run, count: int = REPLICAS) -> tuple[bool, str, dict[str, set[int]]]:
    """Whether ``count`` pods' ``/ric/v1/shards`` hold disjoint sets covering every shard,
    what they hold (a line for the report), and pod name -> held shards."""
    held: dict[str, set[int]] = {}
    total = 0
    problems: list[str] = []
    for name, (code, doc) in run.xapp_get_all(SHARDS_PATH).items():
        if code != 200 or not isinstance(doc, dict) or not doc.get("enabled"):
            problems.append(f"{name}: HTTP {code} {str(doc)[:120]}")
            continue
        held[name], total = set(doc["held"]), int(doc["shards"])
    union: set[int] = set().union(*held.values()) if held else set()
    disjoint = sum(map(len, held.values())) == len(union)
    ok = not problems and len(held) == count and disjoint and union == set(range(total))
    detail = "; ".join([*problems, *(f"{n}: {len(h)} held" for n, h in sorted(held.items()))])
    detail += f"; {len(union)} of {total} covered, {'disjoint' if disjoint else 'OVERLAPPING'}"
    return ok, detail, held


def owners_publish(run: Run) -> tuple[bool, str]:
    """Every test CPE has exactly one owner among the pods' ``/ric/v1/cpes`` (the pod holding
    its shard), whose last published version is at least what its agent applied before."""
    applied = {c: v for c, (v, _) in run.latest().items()}
    _, _, held = shard_split(run)
    docs = run.xapp_get_all(CPES_PATH)
    lines, ok = [], True
    for cpe in run.cpes:
        shard = shard_of(cpe)
        owners = [n for n, (code, doc) in docs.items() if code == 200 and isinstance(doc, dict)
                  and (doc["cpes"].get(cpe) or {}).get("owner")]
        entry = docs[owners[0]][1]["cpes"][cpe] if len(owners) == 1 else {}
        version = (entry.get("published") or {}).get("version", 0)
        good = (len(owners) == 1 and shard in held.get(owners[0], set())
                and entry.get("shard") == shard and version > 0
                and version >= applied.get(cpe, 0) > 0)
        ok = ok and good
        lines.append(f"{cpe} shard {shard} owner {','.join(owners) or 'none'} "
                     f"published v{version}, applied v{applied.get(cpe, 0)}")
    return ok, "; ".join(lines)


def _model_version(artifact_dir: Path) -> str:
    """The version an artifact directory's LATEST names (``capacity-<version>.skops``)."""
    name = (artifact_dir / "LATEST").read_text().strip()
    return name.removeprefix("capacity-").removesuffix(".skops")


# --- steps ------------------------------------------------------------------------------------

def train_model(run: Run) -> None:
    """A second artifact and the key it is signed with (the model upgrade installs both)."""
    work = run.scratch / "model"
    work.mkdir(parents=True, exist_ok=True)
    key = work / "signing.key"
    mcw = [sys.executable, "-m", "xapp.cli", "model"]
    subprocess.run([*mcw, "keygen", str(key)], check=True, capture_output=True, timeout=60)
    art, data = work / "artifact", work / "twin.csv"
    # The twin's telemetry as a file, then the trainer on it: as an operator would.
    for cmd in ([sys.executable, "-m", "xapp.cli", "synth", "training", "--synthetic",
                 "wifi-walk", "--cpes", "2", "--out", str(data)],
                [*mcw, "train", "--signing-key", str(key), "--csv", str(data), "--max-iter", "5",
                 "--out", str(art)]):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[3:5])}: {res.stderr[-2000:]}")
    run.model_dir, run.model_pub = art, key.with_name(key.name + ".pub")


def start_platform(run: Run, st: Step) -> None:
    """Redis and InfluxDB on the node's address, and the Services that name them in ricplt."""
    run.redis = RedisServer(run.scratch / "redis", port=6379, host="0.0.0.0").start()
    run.influx = start_influxd(run.scratch, port=8086, bind="0.0.0.0")
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": PLT}}]
    for svc, port, target in (("service-ricplt-dbaas-tcp", 6379, 6379),
                              ("r4-influxdb-influxdb2", 80, 8086)):
        docs.append({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": svc, "namespace": PLT},
                     "spec": {"ports": [{"name": "tcp", "port": port, "protocol": "TCP"}]}})
        docs.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": f"{svc}-node", "namespace": PLT,
                                  "labels": {"kubernetes.io/service-name": svc,
                                             "endpointslice.kubernetes.io/managed-by":
                                             "mcw-e2e-k8s"}},
                     "addressType": "IPv4",
                     "ports": [{"name": "tcp", "port": target, "protocol": "TCP"}],
                     "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}]})
    run.cluster.apply(yaml.safe_dump_all(docs))
    st.checks.append(Check("Redis and InfluxDB on the node address behind ricplt Services", True,
                           f"{NODE_IP}:6379, {NODE_IP}:8086"))


def prepare_namespace(run: Run, st: Step) -> None:
    c = run.cluster
    labels = {f"pod-security.kubernetes.io/{mode}": "restricted"
              for mode in ("enforce", "audit", "warn")}
    labels["pod-security.kubernetes.io/enforce-version"] = "latest"
    c.apply(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": labels}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "dbaas-appconfig", "namespace": NS},
         "data": {"DBAAS_SERVICE_HOST": f"service-ricplt-dbaas-tcp.{PLT}",
                  "DBAAS_SERVICE_PORT": "6379"}}]))
    # The test PKI (CA, the xApp's and every agent's client certificates) and a broker
    # certificate naming the broker's Service and the node address the sites dial.
    run.cpes = [cpe_name(i) for i in range(1, run.agents + 1)]
    pki = make_pki(run.scratch / "pki", n_cpes=len(run.cpes), jobs=2)
    run.pki = pki
    svc = f"{RELEASE}-broker"
    leaf(pki.root, "k8s-broker", f"/CN={svc}", ca=pki.ca, ca_key=pki.root / "ca.key",
         client=False, server_sans=[f"DNS:{svc}", f"DNS:{svc}.{NS}", f"DNS:{svc}.{NS}.svc",
                                    f"DNS:{svc}.{NS}.svc.cluster.local", f"IP:{NODE_IP}"])
    cert, key = pki.cert("mcw-xapp")
    c.kubectl("-n", NS, "create", "secret", "generic", "mcw-xapp-mqtt-tls",
              f"--from-file=ca.crt={pki.ca}", f"--from-file=tls.crt={cert}",
              f"--from-file=tls.key={key}")
    c.kubectl("-n", NS, "create", "secret", "generic", "mcw-broker-tls",
              f"--from-file=ca.crt={pki.ca}", f"--from-file=tls.crt={pki.root / 'k8s-broker.crt'}",
              f"--from-file=tls.key={pki.root / 'k8s-broker.key'}")
    # InfluxDB 1.8 without authentication: an empty token.
    c.kubectl("-n", NS, "create", "secret", "generic", "mcw-xapp-influxdb",
              "--from-literal=token=")
    # Pod Security is enforced: a pod without the restricted profile's security context is
    # refused (server-side dry run).
    assert run.images is not None
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "psa-probe", "namespace": NS},
           "spec": {"containers": [{"name": "c", "image": run.images.aux}]}}
    res = c.kubectl("create", "--dry-run=server", "-f", "-", input_text=json.dumps(bad),
                    check=False)
    st.checks.append(Check("Pod Security restricted enforced on ricxapp (a pod without "
                           "securityContext is refused)", res.returncode != 0
                           and 'violates PodSecurity "restricted:latest"' in res.stderr,
                           res.stderr.strip()[:160]))


def base_values(run: Run) -> dict[str, Any]:
    assert run.images is not None
    aux_repo, aux_tag = run.images.aux.split("/", 1)[1].split(":")
    node = {"ipBlock": {"cidr": f"{NODE_IP}/32"}}
    return {
        "image": {"registry": "localhost", "repository": "mcw-xapp", "tag": "e2e-k8s",
                  "pullPolicy": "Never"},
        # The image has no RMR (its package cannot be downloaded here): A1 goes through SDL.
        "rmr": {"mode": "auto"},
        # Sharding turns on by itself above one replica (Redis is SDL's, on the node).
        "replicaCount": REPLICAS,
        "controls": {"loop": {"lease_s": 6}},
        # Every CPE is granted its own shard (broker.cpes); the proxy serves the first.
        "broker": {"deploy": True, "cpes": list(run.cpes), "proxies": {PROXY_ID: [run.cpes[0]]},
                   "server": {"image": {"registry": "localhost", "repository": aux_repo,
                                        "tag": aux_tag, "pullPolicy": "Never"},
                              "service": {"type": "NodePort", "nodePort": BROKER_NODE_PORT}}},
        "helmTest": {"image": {"registry": "localhost", "repository": aux_repo, "tag": aux_tag}},
        # SDL, InfluxDB and CoreDNS are processes on the node's address, outside the cluster:
        # the egress names that address, as for an external InfluxDB (docs/install-ric.md).
        "networkPolicy": {"egress": {"dns": {"to": [node]},
                                     "sdl": {"to": [node], "ports": [6379]},
                                     "influxdb": {"to": [node], "ports": [8086]}}},
    }


def install(run: Run, st: Step) -> None:
    values = run.scratch / "values-install.yaml"
    values.write_text(yaml.safe_dump(base_values(run)))
    run.helm("install", RELEASE, str(CHART), "-n", NS, "-f", str(values), "--wait",
             "--timeout", "6m")
    c = run.cluster
    pods = run.wait_xapp_ready()
    pod_names = ", ".join(p["metadata"]["name"] for p in pods)
    broker = run.pods(BROKER_SELECTOR)
    st.checks.append(Check(f"admitted under Pod Security restricted: the {REPLICAS} xApp pods "
                           "and the broker pod run in ricxapp",
                           bool(broker) and len(pods) == REPLICAS
                           and all(p["status"]["phase"] == "Running" for p in pods),
                           f"{pod_names}, {broker[0]['metadata']['name']}" if broker
                           else "no broker pod"))
    probed = []
    for pod in pods:
        spec = pod["spec"]["containers"][0]
        status = pod["status"]["containerStatuses"][0]
        probes = [p for p in ("startupProbe", "livenessProbe", "readinessProbe") if p in spec]
        probed.append((len(probes) == 3 and bool(status.get("started")) and status["ready"]
                       and status["restartCount"] == 0,
                       f"{pod['metadata']['name']}: {len(probes)} probes, "
                       f"restarts {status['restartCount']}"))
    st.checks.append(Check("probes: startup, liveness, readiness passed; every pod turned Ready",
                           all(ok for ok, _ in probed), "; ".join(d for _, d in probed)))
    st.checks.append(Check("the broker pod (tcpSocket probes) is Ready",
                           bool(broker) and _is_ready(broker[0]), ""))
    readies = run.xapp_get_all("/ric/v1/health/ready")
    st.checks.append(Check("/ric/v1/health/ready from each pod IP",
                           len(readies) == REPLICAS
                           and all(code == 200 for code, _ in readies.values()),
                           "; ".join(f"{n}: {code} {str(doc)[:160]}"
                                     for n, (code, doc) in readies.items())))
    sc = pods[0]["spec"]["containers"][0]["securityContext"]
    st.checks.append(Check("the pods run non-root, read-only root, no capabilities",
                           sc.get("readOnlyRootFilesystem") is True
                           and sc.get("capabilities", {}).get("drop") == ["ALL"]
                           and pods[0]["spec"]["securityContext"].get("runAsNonRoot") is True,
                           ""))
    t0 = time.monotonic()
    split = wait_until(lambda: shard_split(run)[0], 60, 0.5)
    st.checks.append(Check(f"/ric/v1/shards: the {REPLICAS} pods hold disjoint shard sets "
                           "covering every shard", split,
                           f"{shard_split(run)[1]} ({time.monotonic() - t0:.1f} s after Ready)"))
    nps = c.kubectl_json("-n", NS, "get", "networkpolicy")
    names = sorted(i["metadata"]["name"] for i in nps["items"])  # type: ignore[attr-defined]
    st.checks.append(Check("NetworkPolicy objects accepted by the API",
                           names == sorted([RELEASE, f"{RELEASE}-broker", f"{RELEASE}-test"]),
                           ", ".join(names)))


def start_sites(run: Run, st: Step) -> None:
    assert run.pki is not None and run.influx is not None
    run.feeder = ScenarioFeeder(run.influx, run.cpes)
    run.feeder.start()
    run.observer = Observer(run.pki, BROKER_NODE_PORT, run.t0, host=NODE_IP).start()
    run.sites = Sites(run.scratch / "sites", run.pki, BROKER_NODE_PORT, run.cpes).start()

    def all_applied() -> bool:
        exited = run.sites.exited() if run.sites else []
        if exited:
            raise RuntimeError(f"agents exited: {exited}")
        return set(run.cpes) <= set(run.latest())
    ok = wait_until(all_applied, 120, 1.0)
    latest = run.latest()
    st.checks.append(Check("every CPE agent (outside the cluster, own namespace) applied "
                           "weights from the in-cluster xApp through the in-cluster broker",
                           ok, ", ".join(f"{c} v{v} {w}" for c, (v, w) in sorted(latest.items()))))
    owned = wait_until(lambda: owners_publish(run)[0], 30, 1.0)
    st.checks.append(Check("every CPE has one owner, the pod holding its shard, which published "
                           "the weights its agent applied", owned, owners_publish(run)[1]))
    observer = run.observer
    proxy_ok = wait_until(lambda: any(
        r.cpe == run.cpes[0] and r.online and r.version > 0
        for r in observer.proxy_snapshot()), 60, 1.0)
    st.checks.append(Check(f"the proxy agent ({PROXY_ID}) applied {run.cpes[0]}'s downlink "
                           "weights (the chart's broker.proxies ACL)", proxy_ok, ""))
    if not ok:
        raise RuntimeError("not every agent applied weights within 120 s")


def helm_test(run: Run, st: Step) -> None:
    res = run.helm("test", RELEASE, "-n", NS, "--logs", "--timeout", "3m", check=False)
    text = res.stdout + res.stderr
    logs = text.split("POD LOGS:", 1)[-1].strip().replace("\n", " ")
    st.checks.append(Check("helm test --logs exits 0 and prints the test pod's log",
                           res.returncode == 0 and "POD LOGS:" in text
                           and '"ready": true' in logs, logs[:300]))


def _at(doc: Any, dotted: str) -> Any:
    """``doc``'s value at a dotted path (None where it stops)."""
    for key in dotted.split("."):
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def upgrade_control(run: Run, st: Step) -> None:
    before = {p["metadata"]["uid"] for p in run.xapp_pods()}
    name, value = CONTROL
    run.helm("upgrade", RELEASE, str(CHART), "-n", NS, "--reuse-values",
             # --set would make 0.5 a string; the values schema wants a number.
             "--set-json", f"controls.{name}={json.dumps(value)}", "--wait", "--timeout", "4m")

    def applied() -> bool:
        docs = run.xapp_get_all("/ric/v1/config")
        return len(docs) == REPLICAS and all(
            code == 200 and isinstance(doc, dict) and _at(doc["controls"], name) == value
            for code, doc in docs.values())
    live = wait_until(applied, 120, 2.0)
    after = run.xapp_pods()
    same = {p["metadata"]["uid"] for p in after} == before
    restarts = sum(p["status"]["containerStatuses"][0]["restartCount"] for p in after)
    st.checks.append(Check(f"controls.{name}={value} in every pod's /ric/v1/config without a "
                           "restart", live and same and restarts == 0,
                           f"same {len(after)} pods {same}, restarts {restarts}"))
    since = {c: v for c, (v, _) in run.latest().items()}
    fresh = wait_until(lambda: all(run.latest().get(c, (0, {}))[0] > since.get(c, 0)
                                   for c in run.cpes), 60, 1.0)
    st.checks.append(Check("every agent applied newer weights after the upgrade", fresh, ""))


def upgrade_model(run: Run, st: Step) -> None:
    assert run.model_dir is not None and run.model_pub is not None
    c = run.cluster
    c.kubectl("-n", NS, "create", "configmap", "mcw-model-k8s", f"--from-file={run.model_dir}")
    before = {p["metadata"]["name"] for p in run.xapp_pods()}
    values = run.scratch / "values-model.yaml"
    values.write_text(yaml.safe_dump({
        "model": {"signingPublicKey": {"pem": run.model_pub.read_text()}},
        "extraVolumes": [{"name": "model-k8s", "configMap": {"name": "mcw-model-k8s"}}],
        "extraVolumeMounts": [{"name": "model-k8s", "mountPath": "/opt/mcw/models/k8s",
                               "readOnly": True}],
        "controls": {"model": {"path": "/opt/mcw/models/k8s"}}}))
    run.helm("upgrade", RELEASE, str(CHART), "-n", NS, "--reuse-values", "-f", str(values),
             "--wait", "--timeout", "5m")
    pods = run.wait_xapp_ready(other_than=before)
    want = _model_version(run.model_dir)
    got = wait_until(lambda: run.sdl().get("model/version") == want, 90, 2.0)
    st.checks.append(Check(f"{REPLICAS} new pods (the signing key's checksum) run the new "
                           "artifact", got, f"{[p['metadata']['name'] for p in pods]}: "
                           f"model/version in SDL {run.sdl().get('model/version')}, want {want}"))
    st.checks.append(_controls_kept(run, "controls kept across the model upgrade "
                                         "(--reuse-values), in every pod"))


def rollback(run: Run, st: Step) -> None:
    before = {p["metadata"]["name"] for p in run.xapp_pods()}
    run.helm("rollback", RELEASE, "2", "-n", NS, "--wait", "--timeout", "5m")
    pods = run.wait_xapp_ready(other_than=before)
    want = _model_version(ROOT / "models" / "default")
    got = wait_until(lambda: run.sdl().get("model/version") == want, 90, 2.0)
    st.checks.append(Check("helm rollback to revision 2: the shipped model again", got,
                           f"{[p['metadata']['name'] for p in pods]}: model/version "
                           f"{run.sdl().get('model/version')}, want {want}"))
    st.checks.append(_controls_kept(run, f"... with revision 2's controls.{CONTROL[0]}="
                                         f"{CONTROL[1]} in every pod"))
    split = wait_until(lambda: shard_split(run)[0], 60, 0.5)
    st.checks.append(Check("after the rollout the new pods' shards are disjoint and cover all",
                           split, shard_split(run)[1]))
    hist = json.loads(run.helm("history", RELEASE, "-n", NS, "-o", "json").stdout)
    st.checks.append(Check("helm history: install, 2 upgrades, rollback",
                           [h["revision"] for h in hist] == [1, 2, 3, 4]
                           and hist[-1]["description"].startswith("Rollback to 2"),
                           "; ".join(f"{h['revision']} {h['status']} {h['description']}"
                                     for h in hist)))


def _controls_kept(run: Run, name: str) -> Check:
    docs = run.xapp_get_all("/ric/v1/config")
    kept = {n: _at(doc["controls"], CONTROL[0]) if code == 200 and isinstance(doc, dict)
            else f"HTTP {code}" for n, (code, doc) in docs.items()}
    return Check(name, len(kept) == REPLICAS and all(v == CONTROL[1] for v in kept.values()),
                 str(kept))


def seed_policy(run: Run) -> None:
    """Persist an A1 instance in SDL exactly as the pod's A1 handler does when the mediator
    delivers a CREATE over RMR (its handler and SDL store, from the xApp's package)."""
    from ricsdl.syncstorage import SyncStorage

    from xapp.adapters.a1 import A1Handler, PolicyType
    from xapp.adapters.sdl import SdlStateStore
    from xapp.core.policy_book import PolicyBook

    assert run.redis is not None
    os.environ["DBAAS_SERVICE_HOST"] = "127.0.0.1"
    os.environ["DBAAS_SERVICE_PORT"] = str(run.redis.port)
    store = SdlStateStore(SDL_NAMESPACE, SyncStorage)
    handler = A1Handler(PolicyBook(), PolicyType.load(None), "mcw-xapp", persistence=store)
    resp = handler.handle({"operation": "CREATE", "policy_type_id": "20100",
                           "policy_instance_id": SPLIT_ID, "payload": json.dumps(SPLIT)})
    if not store.sync():
        raise RuntimeError(f"SDL write failed: {store.last_error}")
    if f"policy/{SPLIT_ID}" not in run.sdl():
        raise RuntimeError(f"A1 instance not in SDL after CREATE: {resp}")


def reschedule(run: Run, st: Step) -> None:
    seed_policy(run)
    victim, survivor = run.wait_xapp_ready()[:2]
    before = victim["metadata"]["name"]
    since = {c: v for c, (v, _) in run.latest().items()}
    t_delete = time.monotonic() - run.t0
    run.cluster.kubectl("-n", NS, "delete", "pod", before, "--wait=false")

    # Until the replacement joins, the survivor alone holds every shard (the deleted pod hands
    # its shards back at SIGTERM; the survivor acquires them at its next lease round).
    def survivor_holds_all() -> bool:
        code, doc = run.xapp_get(SHARDS_PATH, survivor)
        return code == 200 and isinstance(doc, dict) and \
            sorted(doc.get("held", [])) == list(range(int(doc.get("shards", 0)))) != []
    took = wait_until(survivor_holds_all, 60, 0.2)
    took_s = time.monotonic() - run.t0 - t_delete
    run.report.facts["survivor_all_shards_s"] = round(took_s, 1)
    st.checks.append(Check("one of the two pods deleted: the survivor holds every shard", took,
                           f"{survivor['metadata']['name']} held all {took_s:.1f} s after "
                           f"{before} was deleted"))
    pods = run.wait_xapp_ready(other_than={before})
    pod = next((p for p in pods if p["metadata"]["name"] != survivor["metadata"]["name"]),
               pods[0])
    node = pod["spec"].get("nodeName")

    def split_and_newer() -> bool:
        latest = run.latest()
        return all(c in latest and latest[c][0] > since.get(c, 0)
                   and latest[c][1].get("nr", 0) == latest[c][1].get("wifi", -1) > 0
                   and latest[c][1].get("lifi", 0) == 0 for c in run.cpes)
    ok = wait_until(split_and_newer, 120, 1.0)
    latest = run.latest()
    st.checks.append(Check(
        "pod deleted, a new one scheduled and Ready; the A1 instance from SDL in force on every "
        "agent (50/50) with versions above those before", ok,
        f"{before} -> {pod['metadata']['name']} on {node}; "
        + ", ".join(f"{c} v{since.get(c, 0)}->v{latest.get(c, (0, {}))[0]} "
                    f"{latest.get(c, (0, {}))[1]}" for c in run.cpes)))
    st.checks.append(Check("the A1 instance still in SDL", f"policy/{SPLIT_ID}" in run.sdl(), ""))
    assert run.observer is not None
    expired = [f"{r.cpe} at {r.t:.1f} s" for r in run.observer.snapshot()
               if r.t >= t_delete and r.event == "lease-expired"]
    st.checks.append(Check("no agent's weights lease expired across the pod's deletion",
                           not expired, ", ".join(expired)))
    split = wait_until(lambda: shard_split(run)[0], 60, 0.5)
    st.checks.append(Check("the replacement joined: shards disjoint and covering again", split,
                           shard_split(run)[1]))
    owned = wait_until(lambda: owners_publish(run)[0], 30, 1.0)
    st.checks.append(Check("every CPE's weights from its shard's owner again", owned,
                           owners_publish(run)[1]))


def netpol_enforced(run: Run, st: Step) -> None:
    """Real connections against the chart's NetworkPolicies, which kube-router enforces: each
    check has a connection that must pass and one that must be refused, so it fails both when
    enforcement is off and when a policy is too tight."""
    c = run.cluster
    assert run.images is not None
    c.procs["kube-router"].check()
    xapp, other = run.wait_xapp_ready()[:2]
    broker = run.pods(BROKER_SELECTOR)[0]
    http = f"{xapp['status']['podIP']}:8080"
    # The Service `helm test` calls: kube-proxy's DNAT comes before kube-router's filter.
    svc_ip = c.kubectl("-n", NS, "get", "service", HTTP_SERVICE, "-o",
                       "jsonpath={.spec.clusterIP}").stdout.strip()
    svc = f"{svc_ip}:8080"
    mqtt = f"{broker['status']['podIP']}:{BROKER_PORT}"
    seen = netpol.probe_pod(c, run.images.aux, NS, "netpol-stranger",
                            {"app": "netpol-stranger"}, [http, svc, mqtt])
    st.checks.append(Check("a pod without the chart's labels: the xApp's HTTP port refused (pod "
                           "and Service address), the broker (open to every source) reached",
                           seen.reached == {http: False, svc: False, mqtt: True},
                           seen.describe()))
    seen = netpol.probe_pod(c, run.images.aux, NS, "netpol-as-helm-test", TEST_LABELS,
                            [http, svc, mqtt])
    st.checks.append(Check("a pod with the helm test pod's labels (its own NetworkPolicy): the "
                           "xApp's HTTP port reached (pod and Service address), the broker "
                           "refused", seen.reached == {http: True, svc: True, mqtt: False},
                           seen.describe()))
    want = {f"{NODE_IP}:6379": True, f"{NODE_IP}:8086": True, mqtt: True,
            f"{NODE_IP}:6443": False, f"{other['status']['podIP']}:8080": False}
    seen = netpol.from_container(c, NS, xapp["metadata"]["name"], RELEASE, list(want))
    st.checks.append(Check("the xApp's egress: SDL and InfluxDB (node address, ipBlock) and the "
                           "broker reached; the apiserver and the other xApp pod refused",
                           seen.reached == want, seen.describe()))
    # The helm test pod is still there (its hook-delete-policy keeps it for --logs).
    test_pods = run.pods(",".join(f"{k}={v}" for k, v in TEST_LABELS.items()))
    pdb = c.kubectl_json("-n", NS, "get", "poddisruptionbudget", RELEASE)
    status: dict[str, Any] = pdb.get("status", {})  # type: ignore[assignment]
    unmanaged = c.kubectl_json("-n", NS, "get", "events", "--field-selector",
                               "involvedObject.kind=PodDisruptionBudget,reason=UnmanagedPods")
    warned = [e["message"] for e in unmanaged["items"]]  # type: ignore[attr-defined]
    st.checks.append(Check("the PodDisruptionBudget counts the xApp's pods only (the helm test "
                           "pod present, no UnmanagedPods warning)",
                           bool(test_pods) and status.get("expectedPods") == REPLICAS
                           and status.get("disruptionsAllowed") == 1 and not warned,
                           f"{len(test_pods)} test pod, expectedPods {status.get('expectedPods')}"
                           f", disruptionsAllowed {status.get('disruptionsAllowed')}"
                           + (f"; {warned[0]}" if warned else "")))


def uninstall(run: Run, st: Step) -> None:
    run.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "3m")
    gone = wait_until(lambda: not run.pods(XAPP_SELECTOR) and not run.pods(BROKER_SELECTOR),
                      90, 1.0)
    st.checks.append(Check("helm uninstall: the pods are gone", gone, ""))


# --- main -------------------------------------------------------------------------------------

def missing_tools() -> list[str]:
    out = []
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
                 "kube-proxy", "kubectl", "coredns", "pause", "kube-router"):
        if not (K8S_BIN / name).exists():
            out.append(f".tools/k8s/bin/{name} (make e2e-k8s builds it)")
    for cmd in ("etcd", "containerd", "ctr", "containerd-shim-runc-v2", "runc", "podman",
                "iptables", "ipset", "ip", "openssl"):
        if shutil.which(cmd) is None and not Path("/usr/sbin", cmd).exists():
            out.append(f"{cmd} (make deps-system)")
    if not (Path("/usr/lib/cni") / "bridge").exists():
        out.append("/usr/lib/cni/bridge (containernetworking-plugins)")
    if not HELM.exists():
        out.append(".tools/bin/helm (make deps-tools)")
    if influxd_binary() is None or redis_binary() is None:
        out.append("influxd and redis-server (make deps)")
    if not AGENT_BINARY.exists():
        out.append(f"{AGENT_BINARY} (make agent)")
    return out


def _clear(out: Path) -> None:
    """An earlier run's output, unmounting what a crashed run left mounted there."""
    if not out.exists():
        return
    root = str(out.resolve())
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if line.split()[4].startswith(root + "/")]
    for p in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", p], capture_output=True, timeout=30)
    shutil.rmtree(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.k8s", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "e2e-k8s", metavar="DIR",
                        help="output directory (default: out/e2e-k8s); emptied first")
    parser.add_argument("--agents", type=int, default=3,
                        help="dry-run CPE agents outside the cluster (default: 3; plus a proxy)")
    args = parser.parse_args(argv)
    if args.agents < 1:
        parser.error("--agents must be >= 1")
    if os.geteuid() != 0:
        print("e2e-k8s: needs root (network namespaces, containerd, cgroups)", file=sys.stderr)
        return 2
    missing = missing_tools()
    if missing:
        print("e2e-k8s: missing " + ", ".join(missing), file=sys.stderr)
        return 2
    left = leftovers_of_earlier_runs()
    if left:
        print(f"e2e-k8s: cgroups of an earlier run still hold processes ({left[0]}, ...); "
              f"stop them (cat {left[0]}/cgroup.procs) and run again", file=sys.stderr)
        return 2
    out = args.out.resolve()
    _clear(out)
    out.mkdir(parents=True)
    # SIGTERM (make interrupted, CI timeout) tears down like an error does.
    signal.signal(signal.SIGTERM, _interrupt)
    report = Report()
    cluster = Cluster(root=out / "run", bins=K8S_BIN, logs=out / "logs")
    run = Run(out, report, cluster, agents=args.agents)
    failed: StepFailed | None = None
    wall0 = time.monotonic()
    steps: list[tuple[str, Callable[[Step], None]]] = [
        ("images: xApp (podman build), broker and helm-test (debootstrap), pause (pause.c)",
         lambda st: setattr(run, "images", build_images(run.scratch / "images",
                                                        K8S_BIN / "pause"))),
        ("a second signed model artifact (mcw model train, new key)", lambda st: train_model(run)),
        ("node network namespace", lambda st: cluster.start_network()),
        ("certificates and kubeconfigs (openssl)", lambda st: cluster.make_pki()),
        ("etcd (Debian etcd-server)", lambda st: cluster.start_etcd()),
        ("kube-apiserver", lambda st: cluster.start_apiserver()),
        ("kube-controller-manager and kube-scheduler", lambda st: cluster.start_controllers()),
        ("containerd; images imported (ctr -n k8s.io images import)",
         lambda st: _containerd(run, st)),
        ("kubelet: node Ready", lambda st: cluster.start_kubelet()),
        ("kube-proxy (iptables)", lambda st: cluster.start_proxy()),
        ("kube-router (NetworkPolicy controller)", lambda st: cluster.start_netpol()),
        ("CoreDNS (cluster DNS)", lambda st: cluster.start_dns()),
        ("platform: Redis and InfluxDB behind ricplt Services", lambda st: start_platform(run,
                                                                                           st)),
        ("ricxapp: Pod Security restricted, Secrets, dbaas-appconfig",
         lambda st: prepare_namespace(run, st)),
        ("helm install", lambda st: install(run, st)),
        ("sites: CPE and proxy agents outside the cluster", lambda st: start_sites(run, st)),
        ("helm test --logs", lambda st: helm_test(run, st)),
        ("NetworkPolicy enforced (kube-router): probe pods, the xApp's connections, the PDB",
         lambda st: netpol_enforced(run, st)),
        ("helm upgrade: a control", lambda st: upgrade_control(run, st)),
        ("helm upgrade: the model", lambda st: upgrade_model(run, st)),
        ("helm rollback", lambda st: rollback(run, st)),
        ("one pod deleted: the survivor takes every shard, the replacement rejoins, nothing "
         "lost", lambda st: reschedule(run, st)),
    ]
    try:
        for name, fn in steps:
            with report.step(name) as st:
                fn(st)
        if run.observer is not None:
            with report.step("weights versions over the whole run") as st:
                st.checks.append(versions_in_order(run.observer.snapshot()))
        with report.step("helm uninstall") as st:
            uninstall(run, st)
    except StepFailed as exc:
        failed = exc
        diag = run.diagnose()
        (out / "failure.txt").write_text(f"step failed: {exc}\n\n{diag}\n")
        print(f"\ne2e-k8s: step failed: {exc.step}\n  {type(exc.error).__name__}: {exc.error}\n"
              f"\n{diag[-12000:]}\n\n(all of it in {out / 'failure.txt'}; component logs in "
              f"{out / 'logs'})", file=sys.stderr)
    except KeyboardInterrupt:
        print("e2e-k8s: interrupted; tearing down", file=sys.stderr)
        failed = StepFailed("interrupted", KeyboardInterrupt())
    finally:
        with report.step("teardown: agents, servers, cluster, namespaces, cgroups, mounts") as st:
            problems = teardown(run)
            st.checks.append(Check("everything stopped and removed", not problems,
                                   "; ".join(problems)))
    report.facts["wall_s"] = round(time.monotonic() - wall0, 1)
    if run.images is not None:
        report.facts["images_s"] = run.images.build_s
    report.facts["kubernetes"] = (K8S_BIN / ".version").read_text().strip() \
        if (K8S_BIN / ".version").exists() else "?"
    text = report.to_text()
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    (out / "report.txt").write_text(text + "\n")
    print("\n" + text)
    return 0 if report.ok and failed is None else 1


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _containerd(run: Run, st: Step) -> None:
    run.cluster.start_containerd()
    assert run.images is not None
    t0 = time.monotonic()
    for archive in run.images.archives:
        run.cluster.import_image(archive)
    have = set(run.cluster.images())
    want = {run.images.xapp, run.images.aux, run.images.pause}
    st.checks.append(Check("images in containerd (k8s.io)", want <= have,
                           f"{sorted(want - have) or 'all'} in {time.monotonic() - t0:.0f} s"))
    if not want <= have:
        raise RuntimeError(f"images missing after import: {sorted(want - have)}")


def teardown(run: Run) -> list[str]:
    problems: list[str] = []
    for part in (run.sites, run.observer, run.feeder):
        try:
            if part is not None:
                part.stop()
        except Exception as exc:  # teardown goes on
            problems.append(f"{type(exc).__name__}: {exc}")
    try:
        problems += run.cluster.stop()
    except Exception as exc:
        problems.append(f"cluster: {type(exc).__name__}: {exc}")
    for server in (run.redis, run.influx):
        if server is not None:
            server.stop()
    shutil.rmtree(run.scratch / "images", ignore_errors=True)  # the saved archives
    return problems
