"""What the cluster's NetworkPolicy controller (kube-router) lets through, asked with real TCP
connections: from a probe pod started in a namespace with the labels under test (bash's
``/dev/tcp``), and from inside a running container (``kubectl exec``, the xApp's Python).

Each answer is ``{"address:port": reached}``. A probe pod tries each target a few times before
calling it refused: kube-router applies a new pod's policies a moment after the pod got its
address, and a refusal that lasts across the tries is the policy's. How many tries a reached
target took is kept (:func:`tries_taken`): more than one shows that window.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tests.k8s.cluster import Cluster
from tests.support.polling import wait_until

TRIES = 4


def probe_script(tries: int = TRIES) -> str:
    """bash: each argument (address:port) tried up to ``tries`` times, a line per target."""
    return ('for t in "$@"; do r=refused; for i in $(seq ' + str(tries) + '); do '
            'if timeout 2 bash -c "exec 3<>/dev/tcp/${t%:*}/${t##*:}" 2>/dev/null; then '
            'r=reached; break; fi; sleep 1; done; echo "$t $r $i"; done')


CONNECT = ("import socket, sys\n"
            "for t in sys.argv[1:]:\n"
            "    host, port = t.rsplit(':', 1)\n"
            "    try:\n"
            "        socket.create_connection((host, int(port)), 3).close()\n"
            "        print(t, 'reached', 1)\n"
            "    except OSError:\n"
            "        print(t, 'refused', 1)\n")


def _lines(out: str, targets: Sequence[str]) -> dict[str, list[str]]:
    seen = {w[0]: w[1:] for w in (line.split() for line in out.splitlines()) if len(w) == 3}
    missing = [t for t in targets if t not in seen]
    if missing:
        raise RuntimeError(f"no answer for {missing} in {out!r}")
    return {t: seen[t] for t in targets}


def parse(out: str, targets: Sequence[str]) -> dict[str, bool]:
    """Each target reached or refused, from the probes' ``target reached|refused tries``."""
    return {t: r == "reached" for t, (r, _) in _lines(out, targets).items()}


def tries_taken(out: str, targets: Sequence[str]) -> dict[str, int]:
    """The try on which each reached target answered."""
    return {t: int(n) for t, (r, n) in _lines(out, targets).items() if r == "reached"}


@dataclass(frozen=True)
class Seen:
    """A probe's answers: each target reached or refused, and the try a reached one took."""

    reached: dict[str, bool]
    tries: dict[str, int]

    @classmethod
    def of(cls, out: str, targets: Sequence[str]) -> Seen:
        return cls(parse(out, targets), tries_taken(out, targets))

    def describe(self) -> str:
        return ", ".join(
            f"{t} " + (f"reached (try {self.tries[t]})" if ok else "refused")
            for t, ok in self.reached.items())


def probe_pod(cluster: Cluster, image: str, namespace: str, name: str,
              labels: Mapping[str, str], targets: Sequence[str],
              timeout_s: float = 120) -> Seen:
    """A pod with ``labels`` (and the restricted profile's security context) tries each
    target; it is deleted afterwards."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
           "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                        "runAsGroup": 65534,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "probe", "image": image, "imagePullPolicy": "Never",
                        "command": ["bash", "-c", probe_script(), "probe", *targets],
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}}]}}
    cluster.apply(json.dumps(pod))

    def phase() -> str:
        return cluster.kubectl("-n", namespace, "get", "pod", name, "-o",
                               "jsonpath={.status.phase}").stdout

    try:
        if not wait_until(lambda: phase() in ("Succeeded", "Failed"), timeout_s, 1.0):
            raise RuntimeError(f"probe pod {name} not done within {timeout_s:.0f} s ({phase()})")
        return Seen.of(cluster.kubectl("-n", namespace, "logs", name).stdout, targets)
    finally:
        cluster.kubectl("-n", namespace, "delete", "pod", name, "--wait=false", check=False)


def from_container(cluster: Cluster, namespace: str, pod: str, container: str,
                   targets: Sequence[str]) -> Seen:
    """The running ``container`` (its image has Python) tries each target once."""
    res = cluster.kubectl("-n", namespace, "exec", pod, "-c", container, "--", "python", "-c",
                          CONNECT, *targets, timeout=60)
    return Seen.of(res.stdout, targets)
