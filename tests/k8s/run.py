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
from collections.abc import Callable
from pathlib import Path

from tests.e2e.report import Check, versions_in_order
from tests.integration.stack import AGENT_BINARY
from tests.k8s.cgroups import leftovers_of_earlier_runs
from tests.k8s.cluster import Cluster
from tests.k8s.context import HELM, ROOT, Run
from tests.k8s.images import build_images
from tests.k8s.report import Report, Step, StepFailed
from tests.k8s.steps import (
    helm_test,
    import_images,
    install,
    netpol_enforced,
    prepare_namespace,
    reschedule,
    rollback,
    start_platform,
    start_sites,
    train_model,
    uninstall,
    upgrade_control,
    upgrade_model,
)
from tests.support.influxd import influxd_binary
from tests.support.redis_server import redis_binary

K8S_BIN = ROOT / ".tools" / "k8s" / "bin"


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
         lambda st: import_images(run, st)),
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
