"""What every step of ``make e2e-k8s`` reaches: the release's names, the run's parts
(:class:`Run`: the cluster, the platform's servers, the sites, helm and the xApp's pods) and the
checks over the pods' ``/ric/v1/shards`` and ``/ric/v1/cpes``."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.feeder import ScenarioFeeder
from tests.e2e.observer import Observer
from tests.k8s.cluster import Cluster
from tests.k8s.images import Images
from tests.k8s.report import Report
from tests.k8s.sites import Sites
from tests.support.influxd import InfluxServer
from tests.support.mosquitto import Pki
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from xapp.core.shards import shard_of

ROOT = Path(__file__).resolve().parents[2]
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


@dataclass
class Run:
    """The run's parts, filled in as the steps start them, and how the steps reach the
    release: helm, kubectl, the xApp's pods and SDL."""

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
            return (len(pods) == count and all(is_ready(p) for p in pods)
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


def is_ready(pod: dict[str, Any]) -> bool:
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
