"""A real single-node Kubernetes, built by the project and run inside one network namespace.

Everything runs as root in ``mcwk8s<pid>``, a network namespace of the run's own (the harness
enters it with ``setns``, so its children, kubectl and helm included, see the cluster on their
loopback and the node address): etcd (Debian ``etcd-server``), kube-apiserver,
kube-controller-manager, kube-scheduler, containerd (Debian, with runc), the kubelet
(cgroupfs driver, ``failCgroupV1: false`` on this cgroup v1 machine), kube-proxy (iptables mode,
the rules live in the namespace), kube-router as the NetworkPolicy controller (its firewall
alone: iptables rules and ipsets in the namespace) and CoreDNS (the cluster DNS, a process on
the node address). Pods get their addresses from the CNI ``bridge`` plugin (``mcwk8s0``,
10.244.0.0/24, host-local IPAM), which does not enforce NetworkPolicy itself: kube-router
filters the bridge's traffic (``br_netfilter``) and the pods' traffic to the node. Nothing
touches the host's network: the bridge, the iptables rules, the ipsets and the node address
vanish with the namespace.

File system and cgroups: every directory (etcd data, containerd root and state, runc root, the
CNI's IPAM and the pods' network namespaces, kubelet root, pod logs) is under the run's scratch
directory, the pods' cgroups under ``/mcw-e2e-k8s-<pid>`` of each hierarchy
(:mod:`tests.k8s.cgroups`);
:meth:`Cluster.stop` deletes the pods through the API, stops every process it started, kills
what is left of the containers through containerd, unmounts what is mounted under the scratch
directory and removes the cgroups and the namespace.

Measured facts this follows (issue 26): crun refuses this machine's hybrid cgroup layout and
runc works; root lacks CAP_SYS_RESOURCE, so containerd needs ``restrict_oom_score_adj``; PID 1
is not systemd, so the kubelet uses the cgroupfs driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.k8s.cgroups import CGROUP_ROOT, make_cgroups, remove_cgroups
from tests.k8s.host import NetNs, Proc, http_body, sh
from tests.k8s.pki import ClusterPki, make_cluster_pki
from tests.support.polling import wait_until

NODE = "mcw-node"
#: The node's address: on the namespace's loopback, reached by pods through their gateway and
#: by the sites' namespaces through their veth.
NODE_IP = "10.201.0.1"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/24"
#: The ``kubernetes`` Service's address (the first of SERVICE_CIDR).
SERVICE_IP = "10.96.0.1"
BRIDGE = "mcwk8s0"
#: Per run (the harness's pid), so that two runs on one machine never touch each other's.
CNI_NETWORK = f"mcwk8s-{os.getpid()}"
APISERVER_PORT = 6443
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/mcw-pause:3.10.1"
KUBE_ROUTER_HEALTH_PORT = 20244
#: What kube-router's NetworkPolicy controller reads (its informers watch all of it); it
#: writes nothing to the API when it neither routes nor proxies.
KUBE_ROUTER_RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "mcw-e2e:kube-router"}
rules:
- apiGroups: [""]
  resources: [pods, namespaces, nodes, services, endpoints]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "mcw-e2e:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "mcw-e2e:kube-router"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:kube-router"}
"""
CNI_BIN = Path("/usr/lib/cni")


@dataclass
class Cluster:
    """The node and its control plane; see the module docstring."""

    root: Path
    bins: Path
    logs: Path
    netns: NetNs = field(default_factory=lambda: NetNs(f"mcwk8s{os.getpid()}"))
    procs: dict[str, Proc] = field(default_factory=dict)
    pki: ClusterPki | None = None
    #: Steps that ran, for :meth:`stop` (what to undo).
    _cgroups_made: bool = False

    # --- paths --------------------------------------------------------------------------------

    @property
    def containerd_sock(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def kubeconfig(self) -> Path:
        assert self.pki is not None
        return self.pki.kubeconfig("admin")

    def bin(self, name: str) -> str:
        return str(self.bins / name)

    def env(self) -> dict[str, str]:
        """The environment kubectl and helm run with (their caches inside the scratch dir)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                "HELM_CACHE_HOME": str(self.root / "helm" / "cache"),
                "HELM_CONFIG_HOME": str(self.root / "helm" / "config"),
                "HELM_DATA_HOME": str(self.root / "helm" / "data"),
                "PATH": f"{self.bins}:{os.environ.get('PATH', '')}"}

    # --- commands -----------------------------------------------------------------------------

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([self.bin("kubectl"), *args], input=input_text,
                             capture_output=True, text=True, timeout=timeout, env=self.env())
        if check and res.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {res.stderr.strip()}")
        return res

    def kubectl_json(self, *args: str) -> dict[str, object]:
        out: dict[str, object] = json.loads(self.kubectl(*args, "-o", "json").stdout)
        return out

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", input_text=manifest)

    def ctr(self, *args: str, timeout: float = 600) -> str:
        return sh("ctr", "--address", str(self.containerd_sock), "-n", "k8s.io", *args,
                  timeout=timeout)

    # --- start --------------------------------------------------------------------------------

    def _spawn(self, name: str, cmd: Sequence[str], env: dict[str, str] | None = None) -> Proc:
        p = Proc(name, list(cmd), self.logs / f"{name}.log", env).start()
        self.procs[name] = p
        return p

    def _wait(self, what: str, cond: Callable[[], bool], proc: Proc, timeout_s: float) -> None:
        def ok() -> bool:
            proc.check()
            return cond()
        if not wait_until(ok, timeout_s, 0.5):
            raise RuntimeError(f"{what} not within {timeout_s:.0f} s")

    def start_network(self) -> None:
        """The node's namespace with its address, then the harness moves into it."""
        self.netns.create()
        sh("ip", "-n", self.netns.name, "addr", "add", f"{NODE_IP}/32", "dev", "lo")
        self.netns.enter()
        # Pods and the sites reach each other through this namespace; its own setting only.
        sh("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")

    def make_pki(self) -> None:
        self.pki = make_cluster_pki(self.root / "pki", node=NODE, node_ip=NODE_IP,
                                    service_ip=SERVICE_IP,
                                    apiserver_url=f"https://{NODE_IP}:{APISERVER_PORT}")

    def start_etcd(self) -> None:
        etcd = shutil.which("etcd") or "/usr/bin/etcd"
        data = self.root / "etcd"
        p = self._spawn("etcd", [
            etcd, "--name", "mcw", "--data-dir", str(data),
            "--listen-client-urls", "http://127.0.0.1:2379",
            "--advertise-client-urls", "http://127.0.0.1:2379",
            "--listen-peer-urls", "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "mcw=http://127.0.0.1:2380",
            "--listen-metrics-urls", "http://127.0.0.1:2381",
            "--log-level", "warn", "--logger", "zap"])

        self._wait("etcd /health", lambda: b'"true"' in http_body("http://127.0.0.1:2381/health"),
                   p, 60)

    def start_apiserver(self) -> None:
        pki = self.pki
        assert pki is not None
        p = self._spawn("kube-apiserver", [
            self.bin("kube-apiserver"),
            "--etcd-servers=http://127.0.0.1:2379",
            f"--advertise-address={NODE_IP}", "--bind-address=0.0.0.0",
            f"--secure-port={APISERVER_PORT}",
            f"--tls-cert-file={pki.crt('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca}",
            f"--kubelet-client-certificate={pki.crt('apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
            f"--kubelet-certificate-authority={pki.ca}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            # PodSecurity is on by default; namespaces choose their level with labels.
            "--enable-admission-plugins=NodeRestriction",
            "--profiling=false", "--v=1"])
        self._wait("kube-apiserver /readyz",
                   lambda: self.kubectl("get", "--raw", "/readyz", check=False,
                                        timeout=10).returncode == 0, p, 120)

    def start_controllers(self) -> None:
        pki = self.pki
        assert pki is not None
        cm = pki.kubeconfig("controller-manager")
        self._spawn("kube-controller-manager", [
            self.bin("kube-controller-manager"), f"--kubeconfig={cm}",
            f"--authentication-kubeconfig={cm}", f"--authorization-kubeconfig={cm}",
            "--bind-address=127.0.0.1", "--leader-elect=false",
            f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca}",
            "--use-service-account-credentials=true", "--cluster-name=mcw",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--v=1"])
        sc = pki.kubeconfig("scheduler")
        self._spawn("kube-scheduler", [
            self.bin("kube-scheduler"), f"--kubeconfig={sc}",
            f"--authentication-kubeconfig={sc}", f"--authorization-kubeconfig={sc}",
            "--bind-address=127.0.0.1", "--leader-elect=false", "--v=1"])

        def default_sa() -> bool:
            for p in ("kube-controller-manager", "kube-scheduler"):
                self.procs[p].check()
            return self.kubectl("-n", "default", "get", "serviceaccount", "default",
                                check=False, timeout=10).returncode == 0
        self._wait("the default ServiceAccount (controller-manager working)", default_sa,
                   self.procs["kube-controller-manager"], 90)

    def start_containerd(self) -> None:
        base = self.root / "containerd"
        cni = self.root / "cni"
        for d in (base, cni / "net.d", cni / "ipam"):
            d.mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-mcwk8s.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": CNI_NETWORK,
            "plugins": [
                {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(cni / "ipam"),
                          "ranges": [[{"subnet": POD_CIDR}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=2))
        conf = base / "config.toml"
        conf.write_text(f"""\
version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "{self.containerd_sock}"
[ttrpc]
  address = "{base / 'ttrpc.sock'}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # root here lacks CAP_SYS_RESOURCE: never lower a container's oom_score_adj below ours.
  restrict_oom_score_adj = true
  # The pods' network namespaces under the state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{shutil.which('runc') or '/usr/sbin/runc'}"
        Root = "{base / 'runc'}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni / 'net.d'}"
    max_conf_num = 1
""")
        containerd = shutil.which("containerd") or "/usr/bin/containerd"
        p = self._spawn("containerd", [containerd, "--config", str(conf), "--log-level", "warn"])
        self._wait("containerd's socket", lambda: subprocess.run(
            ["ctr", "--address", str(self.containerd_sock), "version"],
            capture_output=True, timeout=10).returncode == 0, p, 60)

    def import_image(self, archive: Path) -> None:
        """An image archive (``podman save``) into containerd's ``k8s.io`` namespace."""
        self.ctr("images", "import", "--no-unpack=false", str(archive), timeout=900)

    def images(self) -> list[str]:
        return self.ctr("images", "ls", "-q").split()

    def start_kubelet(self) -> None:
        pki = self.pki
        assert pki is not None
        make_cgroups()
        self._cgroups_made = True
        kroot = self.root / "kubelet"
        kroot.mkdir(parents=True, exist_ok=True)
        # The pods' upstream resolver: none (the cluster needs only its own names).
        resolv = self.root / "resolv.conf"
        resolv.write_text(f"nameserver {NODE_IP}\n")
        conf = kroot / "config.yaml"
        conf.write_text(f"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {pki.ca}}}
authorization: {{mode: Webhook}}
tlsCertFile: {pki.crt('kubelet-server')}
tlsPrivateKeyFile: {pki.key('kubelet-server')}
rotateCertificates: false
serverTLSBootstrap: false
containerRuntimeEndpoint: unix://{self.containerd_sock}
# PID 1 is not systemd here, and the hierarchy is cgroup v1 (hybrid).
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: /{CGROUP_ROOT}
failSwapOn: false
clusterDNS: [{NODE_IP}]
clusterDomain: {CLUSTER_DOMAIN}
resolvConf: {resolv}
podLogsDir: {self.root / 'pod-logs'}
# ConfigMap changes reach the pods' volumes within seconds, not a minute.
syncFrequency: 10s
maxPods: 30
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%,
  nodefs.inodesFree: 1%}}
# The images were imported, not pulled: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
""")
        self._spawn("kubelet", [
            self.bin("kubelet"), f"--config={conf}", f"--kubeconfig={pki.kubeconfig('kubelet')}",
            f"--root-dir={kroot}", f"--hostname-override={NODE}", f"--node-ip={NODE_IP}",
            "--v=1"])

        def node_ready() -> bool:
            res = self.kubectl("get", "node", NODE, "-o",
                               "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                               check=False, timeout=10)
            return res.stdout.strip() == "True"
        self._wait(f"node {NODE} Ready", node_ready, self.procs["kubelet"], 180)

    def start_proxy(self) -> None:
        pki = self.pki
        assert pki is not None
        conf = self.root / "kube-proxy.yaml"
        conf.write_text(f"""\
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {pki.kubeconfig('kube-proxy')}}}
hostnameOverride: {NODE}
mode: iptables
clusterCIDR: {POD_CIDR}
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [{NODE_IP}/32]
# Pod to Service to a pod on the same bridge: the reply must come back through the node.
iptables: {{masqueradeAll: true, localhostNodePorts: false}}
# Leave the conntrack sysctls as they are (some are not per-namespace).
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s,
  udpTimeout: 0s, udpStreamTimeout: 0s}}
""")
        p = self._spawn("kube-proxy", [self.bin("kube-proxy"), f"--config={conf}", "--v=1"])
        self._wait("kube-proxy /healthz", lambda: bool(http_body("http://127.0.0.1:10256/healthz")),
                   p, 60)

    def start_netpol(self) -> None:
        """kube-router's NetworkPolicy controller, nothing else of it (no routing, no service
        proxy: the bridge CNI and kube-proxy do those). It writes each pod's firewall chain,
        jumped to from INPUT, FORWARD and OUTPUT, so traffic between pods on the bridge and
        from pods to the node's address goes through the policies selecting either end."""
        pki = self.pki
        assert pki is not None
        self.apply(KUBE_ROUTER_RBAC)
        p = self._spawn("kube-router", [
            self.bin("kube-router"), f"--kubeconfig={pki.kubeconfig('kube-router')}",
            "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
            f"--hostname-override={NODE}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--health-port={KUBE_ROUTER_HEALTH_PORT}", "--metrics-port=0", "--v=1"])

        def synced() -> bool:
            # Healthy, and its first sync done: the default policy chain exists and FORWARD
            # jumps to its chain.
            if not http_body(f"http://127.0.0.1:{KUBE_ROUTER_HEALTH_PORT}/healthz"):
                return False
            rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True,
                                   timeout=10).stdout
            return "-N KUBE-NWPLCY-DEFAULT" in rules and "-A FORWARD" in rules and \
                "-j KUBE-ROUTER-FORWARD" in rules
        self._wait("kube-router's first NetworkPolicy sync", synced, p, 90)

    def start_dns(self) -> None:
        corefile = self.root / "Corefile"
        corefile.write_text(f"""\
.:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig} mcw
        ttl 5
    }}
}}
""")
        p = self._spawn("coredns", [self.bin("coredns"), "-conf", str(corefile)])
        self._wait("CoreDNS /ready", lambda: bool(http_body("http://127.0.0.1:18181/ready")),
                   p, 60)

    # --- diagnosis ----------------------------------------------------------------------------

    def diagnose(self, namespace: str | None = None, lines: int = 30) -> str:
        """What a failed step shows: every component's state and log tail, the pods, events."""
        out = []
        for name, p in self.procs.items():
            state = "running" if p.running else (
                "not started" if p.proc is None else f"exited {p.proc.returncode}")
            out.append(f"--- {name} ({state}), last lines of {p.log}:\n{p.tail(lines)}")
        if self.procs.get("kube-apiserver") and self.procs["kube-apiserver"].running:
            for args in (["get", "nodes", "-o", "wide"], ["get", "pods", "-A", "-o", "wide"],
                         ["get", "events", "-A", "--sort-by=.lastTimestamp"]):
                res = self.kubectl(*args, check=False, timeout=20)
                out.append(f"--- kubectl {' '.join(args)}:\n{res.stdout}{res.stderr}"[-6000:])
            if namespace:
                res = self.kubectl("-n", namespace, "describe", "pods", check=False, timeout=20)
                out.append(f"--- kubectl -n {namespace} describe pods:\n{res.stdout}"[-8000:])
        return "\n".join(out)

    # --- stop ---------------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Undo everything; returns what could not be cleaned (empty when all went)."""
        problems: list[str] = []
        api = self.procs.get("kube-apiserver")
        for name in ("kube-controller-manager", "kube-scheduler"):
            if name in self.procs:
                self.procs[name].stop()
        kubelet = self.procs.get("kubelet")
        if api is not None and api.running and kubelet is not None and kubelet.running:
            # With the controllers gone nothing recreates them; the kubelet stops each pod's
            # containers and sandbox (and its CNI address and namespace).
            self.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=5",
                         "--wait=false", check=False, timeout=60)
            if not wait_until(lambda: not self.kubectl(
                    "get", "pods", "-A", "-o", "name", check=False,
                    timeout=10).stdout.strip(), 90, 1.0):
                problems.append("pods still present 90 s after their deletion")
        for name in ("coredns", "kube-router", "kube-proxy", "kubelet"):
            if name in self.procs:
                self.procs[name].stop()
        if "containerd" in self.procs and self.procs["containerd"].running:
            self._kill_containers()
            self.procs["containerd"].stop()
        self._kill_shims()
        for name in ("kube-apiserver", "etcd"):
            if name in self.procs:
                self.procs[name].stop()
        problems += self._unmount()
        if not problems:
            # The unpacked images and the pods' volumes: a gigabyte and more, nothing to read.
            for d in ("containerd", "kubelet"):
                shutil.rmtree(self.root / d, ignore_errors=True)
        if self._cgroups_made:
            problems += remove_cgroups()
        self._forget_cni_results()
        self.netns.leave()
        self.netns.delete()
        return problems

    def _kill_containers(self) -> None:
        try:
            tasks = self.ctr("tasks", "ls", "-q", timeout=30).split()
            for t in tasks:
                subprocess.run(["ctr", "--address", str(self.containerd_sock), "-n", "k8s.io",
                                "tasks", "kill", "-s", "SIGKILL", t], capture_output=True,
                               timeout=30)
            wait_until(lambda: not set(tasks) & self._running_tasks(), 10, 0.2)
            for t in tasks:
                subprocess.run(["ctr", "--address", str(self.containerd_sock), "-n", "k8s.io",
                                "tasks", "delete", "-f", t], capture_output=True, timeout=30)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass

    def _running_tasks(self) -> set[str]:
        """The tasks ``ctr tasks ls`` (TASK PID STATUS) lists as RUNNING; none when it fails."""
        try:
            rows = [line.split() for line in self.ctr("tasks", "ls", timeout=30).splitlines()[1:]]
        except (RuntimeError, subprocess.TimeoutExpired):
            return set()
        return {r[0] for r in rows if len(r) >= 3 and r[2] == "RUNNING"}

    def _kill_shims(self) -> None:
        """containerd's shims outlive containerd; only ours (they name our socket)."""
        ours = str(self.containerd_sock).encode()
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmdline = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and ours in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(d.name), signal.SIGKILL)

    def _unmount(self) -> list[str]:
        """Everything mounted under the scratch directory (overlays, the pods' tmpfs and
        network namespaces), deepest first."""
        root = str(self.root.resolve())
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == root or point.startswith(root + "/"):
                mounts.append(point)
        left = []
        for point in sorted(mounts, key=len, reverse=True):
            res = subprocess.run(["umount", "-l", point], capture_output=True, text=True,
                                 timeout=30)
            if res.returncode != 0:
                left.append(f"umount {point}: {res.stderr.strip()}")
        return left

    @staticmethod
    def _forget_cni_results() -> None:
        """libcni caches each attachment's result under /var/lib/cni/results and deletes it on
        CNI DEL; a container killed without DEL leaves its file."""
        results = Path("/var/lib/cni/results")
        if results.is_dir():
            for f in results.glob(f"{CNI_NETWORK}-*"):
                f.unlink(missing_ok=True)
