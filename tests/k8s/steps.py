"""The steps of ``make e2e-k8s`` after the cluster is up (:mod:`tests.k8s.run` lists them in
order): the platform, the namespace, ``helm install``, the sites, ``helm test``, the
NetworkPolicies enforced, the upgrades, the rollback, a pod rescheduled and ``helm uninstall``.
Each takes the :class:`~tests.k8s.context.Run` and appends its checks to its
:class:`~tests.k8s.report.Step`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.feeder import ScenarioFeeder
from tests.e2e.observer import Observer
from tests.e2e.report import Check
from tests.k8s import netpol
from tests.k8s.cluster import NODE_IP
from tests.k8s.context import (
    BROKER_NODE_PORT,
    BROKER_PORT,
    BROKER_SELECTOR,
    CHART,
    HTTP_SERVICE,
    NS,
    PLT,
    RELEASE,
    REPLICAS,
    ROOT,
    SDL_NAMESPACE,
    SHARDS_PATH,
    TEST_LABELS,
    XAPP_SELECTOR,
    Run,
    is_ready,
    owners_publish,
    shard_split,
)
from tests.k8s.pki import leaf
from tests.k8s.report import Step
from tests.k8s.sites import PROXY_ID, Sites
from tests.support.influxd import start_influxd
from tests.support.mosquitto import cpe_name, make_pki
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer

#: The control the first upgrade changes, and its new value (applied live, no restart).
CONTROL = ("loop.control_period_s", 0.5)
#: The A1 instance written to SDL before the pod is deleted (RMR, A1's transport, is not in the
#: image): 50/50 between NR and Wi-Fi, LiFi excluded.
SPLIT = {"mode": "fixed_split", "excluded_wats": ["lifi"],
         "wats": {"nr": {"split_pct": 50}, "wifi": {"split_pct": 50}}}
SPLIT_ID = "e2e-k8s-split"


def _model_version(artifact_dir: Path) -> str:
    """The version an artifact directory's LATEST names (``capacity-<version>.skops``)."""
    name = (artifact_dir / "LATEST").read_text().strip()
    return name.removeprefix("capacity-").removesuffix(".skops")


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


def import_images(run: Run, st: Step) -> None:
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
                           bool(broker) and is_ready(broker[0]), ""))
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

    from xapp.adapters.a1 import A1Handler
    from xapp.adapters.a1_types import load_policy_types
    from xapp.adapters.sdl import SdlStateStore
    from xapp.core.policy_book import PolicyBook

    assert run.redis is not None
    os.environ["DBAAS_SERVICE_HOST"] = "127.0.0.1"
    os.environ["DBAAS_SERVICE_PORT"] = str(run.redis.port)
    store = SdlStateStore(SDL_NAMESPACE, SyncStorage)
    handler = A1Handler(PolicyBook(), load_policy_types(None), "mcw-xapp", persistence=store)
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
