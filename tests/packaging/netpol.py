"""What a set of NetworkPolicies lets through, as the NetworkPolicy API defines it (what an
enforcing CNI implements), so chart tests can ask "can this pod reach that one on this port"
of the rendered manifests instead of reading their structure.

Namespaces carry only their automatic ``kubernetes.io/metadata.name`` label here, and an
``ipBlock`` matches addresses outside the cluster only (pods are matched by selectors), which
is how the chart uses both.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Policy = Mapping[str, Any]


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: Mapping[str, str]
    #: Named container ports (name -> number), for rules that name a port.
    ports: Mapping[str, int] = field(default_factory=dict)


#: A destination or source: a pod, or an address outside the cluster.
Peer = Pod | str


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector: every matchLabels pair and every matchExpression holds (empty: all)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        holds = {"In": key in labels and labels[key] in values,
                 "NotIn": key not in labels or labels[key] not in values,
                 "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not holds:
            return False
    return True


def selects(policy: Policy, pod: Pod) -> bool:
    return (policy["metadata"]["namespace"] == pod.namespace
            and selector_matches(policy["spec"]["podSelector"], pod.labels))


def _peer_matches(peer: Mapping[str, Any], policy_ns: str, other: Peer) -> bool:
    if "ipBlock" in peer:
        if isinstance(other, Pod):
            return False
        addr = ipaddress.ip_address(other)
        block = peer["ipBlock"]
        return addr in ipaddress.ip_network(block["cidr"]) and not any(
            addr in ipaddress.ip_network(e) for e in block.get("except") or [])
    if not isinstance(other, Pod):
        return False
    ns_sel = peer.get("namespaceSelector")
    if ns_sel is None:
        in_ns = other.namespace == policy_ns
    else:
        in_ns = selector_matches(ns_sel, {"kubernetes.io/metadata.name": other.namespace})
    return in_ns and selector_matches(peer.get("podSelector") or {}, other.labels)


def _port_matches(ports: Iterable[Mapping[str, Any]] | None, port: int, protocol: str,
                  dst: Peer) -> bool:
    rules = list(ports or [])
    if not rules:
        return True
    for rule in rules:
        if rule.get("protocol", "TCP") != protocol:
            continue
        want = rule.get("port")
        if want is None:
            return True
        if isinstance(want, str):
            if isinstance(dst, Pod) and dst.ports.get(want) == port:
                return True
        elif want <= port <= rule.get("endPort", want):
            return True
    return False


def _allowed(policies: Iterable[Policy], pod: Pod, kind: str, other: Peer, port: int,
             protocol: str, dst: Peer) -> bool:
    """Whether the policies selecting ``pod`` for ``kind`` (Ingress, Egress) let the
    connection with ``other`` through; no such policy lets everything through."""
    mine = [p for p in policies if selects(p, pod) and kind in p["spec"]["policyTypes"]]
    if not mine:
        return True
    peers_key = "to" if kind == "Egress" else "from"
    for policy in mine:
        for rule in policy["spec"].get(kind.lower()) or []:
            peers = rule.get(peers_key)
            if (not peers or any(_peer_matches(p, policy["metadata"]["namespace"], other)
                                 for p in peers)) and \
                    _port_matches(rule.get("ports"), port, protocol, dst):
                return True
    return False


def can_connect(policies: Iterable[Policy], src: Pod, dst: Peer, port: int,
                protocol: str = "TCP") -> bool:
    """``src`` opens a connection to ``dst`` on ``port``: the source's egress and, for a pod,
    the destination's ingress both allow it."""
    policies = list(policies)
    if not _allowed(policies, src, "Egress", dst, port, protocol, dst):
        return False
    return not isinstance(dst, Pod) or _allowed(policies, dst, "Ingress", src, port, protocol,
                                                dst)
