"""The broker the chart can deploy: the channel's Mosquitto configuration, and its ACL against
``broker/make-acl.sh`` (the other renderer of the same contract) for every set of proxies, CPEs
and shard counts."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.packaging import chart_render as cr
from tests.packaging.chart_variants import CPES, PROXIES, appenv, pod_labels
from tests.packaging.paths import ROOT, XAPP_NAME
from xapp.core.shards import DEFAULT_SHARDS, MAX_SHARDS, shard_of


def _mosquitto_conf(text: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            conf.setdefault(key, value.strip())
    return conf


def test_deployed_broker_uses_the_channel_configuration(rendered: dict[str, cr.Rendered]) -> None:
    r = rendered["broker-deploy"]
    broker_name = f"{XAPP_NAME}-broker"
    cm = r.get("ConfigMap", broker_name)
    repo_conf = (ROOT / "broker" / "mosquitto.conf").read_text(encoding="utf-8")
    # The ACL is broker/acl plus the proxies' and the CPEs' stanzas, exactly as
    # broker/make-acl.sh writes it.
    assert cm["data"]["acl"].startswith((ROOT / "broker" / "acl").read_text())
    assert cm["data"]["acl"] == make_acl(PROXIES, CPES)
    assert "user proxy-0001\n" in cm["data"]["acl"]
    assert f"user cpe-0004\ntopic write mcw/v1/s/{shard_of('cpe-0004')}/cpe/cpe-0004/state\n" \
        in cm["data"]["acl"]
    conf = _mosquitto_conf(cm["data"]["mosquitto.conf"])
    log_dest = re.findall(r"^log_dest\s+(\S+)", cm["data"]["mosquitto.conf"], re.MULTILINE)
    assert log_dest == ["stdout"]
    # Everything but the log destination is the channel's file.
    assert {k: v for k, v in conf.items() if k != "log_dest"} == {
        k: v for k, v in _mosquitto_conf(repo_conf).items() if k != "log_dest"}
    deployment = r.get("Deployment", broker_name)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][-1] == "/etc/mosquitto/mosquitto.conf"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    projected = volumes[mounts["/etc/mosquitto"]]["projected"]["sources"]
    paths = {f"/etc/mosquitto/{i['path']}" for s in projected
             for i in (s.get("configMap") or s.get("secret"))["items"]}
    for key in ("cafile", "certfile", "keyfile", "acl_file"):
        assert conf[key] in paths, key
    assert conf["persistence_location"].rstrip("/") in mounts
    assert volumes[mounts["/var/lib/mosquitto"]]["persistentVolumeClaim"]["claimName"] == \
        "mosquitto-data"
    listener = int(conf["listener"].split()[0])
    assert container["ports"][0]["containerPort"] == listener
    svc = r.get("Service", broker_name)
    assert svc["spec"]["type"] == "LoadBalancer" and svc["spec"]["ports"][0]["nodePort"] == 30883
    # The xApp talks to it, and its NetworkPolicy lets it.
    assert appenv(r)["MCW_MQTT_HOST"] == broker_name
    policy = r.get("NetworkPolicy", XAPP_NAME)
    broker_rule = next(rule for rule in policy["spec"]["egress"]
                       if rule.get("to") and "podSelector" in rule["to"][0]
                       and rule["ports"][0]["port"] == listener)
    assert broker_rule["to"][0]["podSelector"]["matchLabels"].items() <= \
        pod_labels(deployment).items()
    broker_policy = r.get("NetworkPolicy", broker_name)
    peers = broker_policy["spec"]["ingress"][0]["from"]
    assert {"ipBlock": {"cidr": "10.20.0.0/16"}} in peers
    assert broker_policy["spec"]["egress"] == []
    assert pod["securityContext"]["runAsNonRoot"] is True


def make_acl(proxies: dict[str, list[str]], cpes: Sequence[str] = (),
             shards: int = DEFAULT_SHARDS) -> str:
    """What broker/make-acl.sh prints for ``proxies`` and ``cpes``: the other renderer of the
    same ACL."""
    proc = subprocess.run(["bash", str(ROOT / "broker" / "make-acl.sh"), "--shards", str(shards),
                           *(["--cpes", ",".join(cpes)] if cpes else []),
                           *(f"{p}:{','.join(cpes)}" for p, cpes in proxies.items())],
                          capture_output=True, text=True, check=True)
    return proc.stdout


def _broker_acl_and_checksum(helm: str, tmp: Path, proxies: dict[str, list[str]] | None,
                             cpes: Sequence[str] | None = None,
                             shards: int | None = None) -> tuple[str, str]:
    values: dict[str, Any] = {"broker": {"deploy": True}}
    if proxies is not None:
        values["broker"]["proxies"] = proxies
    if cpes is not None:
        values["broker"]["cpes"] = list(cpes)
    if shards is not None:
        values["sharding"] = {"shards": shards}
    r = cr.template(helm, tmp, values, namespace="ricxapp")
    name = f"{XAPP_NAME}-broker"
    deployment = r.get("Deployment", name)
    checksum: str = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    acl: str = r.get("ConfigMap", name)["data"]["acl"]
    return acl, checksum


def test_deployed_broker_acl_follows_the_proxies(helm: str, tmp_path: Path) -> None:
    # No proxy and no CPE (the default, or empty): the shipped ACL byte for byte.
    base, base_sum = _broker_acl_and_checksum(helm, tmp_path, None)
    assert base == (ROOT / "broker" / "acl").read_text() == make_acl({})
    assert _broker_acl_and_checksum(helm, tmp_path, {}) == (base, base_sum)
    assert _broker_acl_and_checksum(helm, tmp_path, {}, []) == (base, base_sum)
    # One contract, two renderers: the chart and make-acl.sh agree for every set of proxies
    # and CPEs, and the broker pod restarts (new checksum) whenever the grants change.
    sums = {base_sum}
    for proxies, cpes in (({"proxy-0001": ["cpe-0001"]}, None),
                          ({"proxy-0001": ["cpe-0001", "cpe-0002"]}, None),
                          ({"proxy-0001": ["cpe-0002", "cpe-0001"]}, None),
                          ({"proxy-0001": ["cpe-0001", "cpe-0002"], "proxy-0002": []}, None),
                          ({"proxy-0002": ["cpe-0001"]}, None),
                          ({"p.1_x": ["C-1", "c.2"], "A9": ["z"]}, None),
                          ({}, ["cpe-0001"]),
                          ({}, ["cpe-0002", "cpe-0001"]),
                          ({"proxy-0002": ["cpe-0001"]}, ["cpe-0001", "cpe-0003"])):
        acl, checksum = _broker_acl_and_checksum(helm, tmp_path, proxies, cpes)
        assert acl == make_acl(proxies, cpes or ()), (proxies, cpes)
        assert checksum not in sums, (proxies, cpes)
        sums.add(checksum)


# Ids of every allowed character and length, for the chart's FNV-1a against make-acl.sh's.
SHARD_IDS = ["cpe-0001", "cpe-10000", "a", "Z9._-x", "0", "c" * 64, "A-._z",
             *(f"cpe-{i:05d}" for i in range(0, 100_000, 4999))]


@pytest.mark.parametrize("shards", [1, 7, DEFAULT_SHARDS, MAX_SHARDS])
def test_deployed_broker_grants_each_cpe_its_own_shard(helm: str, tmp_path: Path,
                                                       shards: int) -> None:
    """The chart computes FNV-1a in a template (it has no XOR): the same shards as
    make-acl.sh and xapp/core/shards.py for the fleet's sharding.shards."""
    acl, _ = _broker_acl_and_checksum(helm, tmp_path, {"proxy-0001": SHARD_IDS[:2]}, SHARD_IDS,
                                      shards)
    assert acl == make_acl({"proxy-0001": SHARD_IDS[:2]}, SHARD_IDS, shards)
    for cpe in SHARD_IDS:
        grant = f"\nuser {cpe}\ntopic write mcw/v1/s/{shard_of(cpe, shards)}/cpe/{cpe}/state\n"
        assert grant in acl
