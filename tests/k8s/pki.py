"""The cluster's certificates and kubeconfigs, made with openssl into the run's scratch directory.

One CA signs everything, as kubeadm's does: the apiserver's serving certificate, one client
certificate per component with the identity Kubernetes' bootstrap RBAC roles expect
(``system:kube-controller-manager``, ``system:kube-scheduler``, ``system:node:<node>`` in
``system:nodes`` for the Node authorizer, ``system:kube-proxy``; ``system:kube-router``, whose
read-only role :mod:`tests.k8s.cluster` creates), an administrator in
``system:masters`` (kubectl, helm, CoreDNS), the apiserver's client certificate towards the
kubelet and the kubelet's serving certificate; plus the service-account signing key pair.
EC P-256 keys: fast to make on 2 cores.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {res.stderr.strip()}")


@dataclass(frozen=True)
class ClusterPki:
    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    def crt(self, name: str) -> Path:
        return self.root / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.root / f"{name}.key"

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.root / "sa.pub"

    def kubeconfig(self, name: str) -> Path:
        return self.root / f"{name}.kubeconfig"


def leaf(root: Path, name: str, subject: str, *, ca: Path, ca_key: Path,
         server_sans: list[str] | None = None, client: bool = True) -> None:
    """``name.key`` and ``name.crt`` signed by ``ca``: a client certificate, a server
    certificate (``server_sans``: ``DNS:...``/``IP:...``), or both."""
    usages = (["serverAuth"] if server_sans is not None else []) + (["clientAuth"] if client
                                                                      else [])
    ext = root / f"{name}.ext"
    lines = ["basicConstraints = critical,CA:FALSE",
             "keyUsage = critical,digitalSignature,keyEncipherment",
             f"extendedKeyUsage = {','.join(usages)}"]
    if server_sans:
        lines.append(f"subjectAltName = {','.join(server_sans)}")
    ext.write_text("\n".join(lines) + "\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=root)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", DAYS, "-out", f"{name}.crt", "-extfile", str(ext),
             cwd=root)


def make_cluster_pki(root: Path, *, node: str, node_ip: str, service_ip: str,
                     apiserver_url: str) -> ClusterPki:
    root.mkdir(parents=True, exist_ok=True)
    pki = ClusterPki(root)
    _openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", DAYS,
             "-subj", "/CN=mcw-e2e-k8s-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=root)
    ca, ca_key = pki.ca, pki.ca_key
    leaf(root, "apiserver", "/CN=kube-apiserver", client=False, server_sans=[
        "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local", f"IP:{service_ip}", f"IP:{node_ip}",
        "IP:127.0.0.1"], ca=ca, ca_key=ca_key)
    leaf(root, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
         ca=ca, ca_key=ca_key)
    leaf(root, "kubelet-server", f"/CN={node}", client=False,
         server_sans=[f"DNS:{node}", f"IP:{node_ip}"], ca=ca, ca_key=ca_key)
    clients = {
        "admin": "/O=system:masters/CN=mcw-admin",
        "controller-manager": "/CN=system:kube-controller-manager",
        "scheduler": "/CN=system:kube-scheduler",
        "kubelet": f"/O=system:nodes/CN=system:node:{node}",
        "kube-proxy": "/CN=system:kube-proxy",
        "kube-router": "/CN=system:kube-router",
    }
    for name, subject in clients.items():
        leaf(root, name, subject, ca=ca, ca_key=ca_key)
        write_kubeconfig(pki.kubeconfig(name), apiserver_url, pki.ca, pki.crt(name),
                         pki.key(name))
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
             "-out", "sa.key", cwd=root)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=root)
    return pki


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path) -> None:
    path.write_text(f"""\
apiVersion: v1
kind: Config
clusters:
- name: mcw
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: user
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: mcw
  context: {{cluster: mcw, user: user}}
current-context: mcw
""")
    path.chmod(0o600)
