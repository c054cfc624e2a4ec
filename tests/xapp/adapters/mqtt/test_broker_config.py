"""The shipped broker files: production and test configs agree, the PKI script is idempotent."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.mosquitto import BROKER_DIR, REPO, Pki, make_pki
from xapp.core.shards import DEFAULT_SHARDS, MAX_SHARDS, shard_of

# Directives whose values must be identical in production and in what the tests exercise.
SECURITY_AND_SIZING = {
    "per_listener_settings", "protocol", "require_certificate", "use_identity_as_username",
    "tls_version", "allow_anonymous", "max_connections", "max_keepalive", "max_packet_size",
    "retain_available", "max_inflight_messages", "max_queued_messages", "max_queued_bytes",
    "queue_qos0_messages", "persistence", "persistent_client_expiration",
}


def directives(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            out.setdefault(key, value.strip())
    return out


def test_test_config_has_the_production_security_settings() -> None:
    prod = directives(BROKER_DIR / "mosquitto.conf")
    test = directives(BROKER_DIR / "mosquitto.test.conf.in")
    assert prod.keys() >= SECURITY_AND_SIZING
    assert {k: prod[k] for k in SECURITY_AND_SIZING} == {k: test[k] for k in SECURITY_AND_SIZING}
    assert prod["require_certificate"] == "true" and prod["allow_anonymous"] == "false"
    assert prod["listener"] == "8883" and prod["acl_file"] == "/etc/mosquitto/acl"


def test_acl_grants_exactly_the_contract() -> None:
    lines = [ln.split() for ln in (BROKER_DIR / "acl").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines == [
        # No pattern grants a sharded topic: make-acl.sh writes each CPE's, in its own shard.
        ["pattern", "read", "mcw/v1/cpe/%u/weights"],
        # Deprecated: the unsharded topics of agents of earlier releases.
        ["pattern", "write", "mcw/v1/cpe/%u/state"],
        ["pattern", "write", "mcw/v1/cpe/%u/telemetry"],
        ["user", "mcw-xapp"],
        ["topic", "deny", "mcw/v1/cpe/mcw-xapp/#"],
        ["topic", "deny", "mcw/v1/s/+/cpe/mcw-xapp/#"],
        ["topic", "write", "mcw/v1/cpe/+/weights"],
        ["topic", "read", "mcw/v1/s/#"],
        ["topic", "read", "mcw/v1/proxy/#"],
        ["topic", "read", "mcw/v1/cpe/+/state"],
        ["topic", "read", "mcw/v1/cpe/+/telemetry"],
    ]


def make_acl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(BROKER_DIR / "make-acl.sh"), *args],
                          capture_output=True, text=True, check=False)


def grants(text: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def test_make_acl_appends_one_user_stanza_per_proxy() -> None:
    base = (BROKER_DIR / "acl").read_text()
    # Proxies come out sorted by id, CPEs in the order given.
    proc = make_acl("proxy-0002:cpe-0003", "proxy-0001:cpe-0002,cpe-0001", "proxy-0003:")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(base)
    assert grants(proc.stdout[len(base):]) == [
        ["user", "proxy-0001"],
        ["topic", "deny", "mcw/v1/cpe/proxy-0001/#"],
        ["topic", "deny", "mcw/v1/s/+/cpe/proxy-0001/#"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/state"],
        ["topic", "read", "mcw/v1/cpe/cpe-0002/weights"],
        ["topic", "read", "mcw/v1/s/2/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/s/2/proxy/proxy-0001/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/s/2/proxy/proxy-0001/cpe/cpe-0002/telemetry"],
        ["topic", "read", "mcw/v1/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/cpe/cpe-0002/telemetry"],
        ["topic", "read", "mcw/v1/cpe/cpe-0001/weights"],
        ["topic", "read", "mcw/v1/s/47/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/s/47/proxy/proxy-0001/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/s/47/proxy/proxy-0001/cpe/cpe-0001/telemetry"],
        ["topic", "read", "mcw/v1/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry"],
        ["user", "proxy-0002"],
        ["topic", "deny", "mcw/v1/cpe/proxy-0002/#"],
        ["topic", "deny", "mcw/v1/s/+/cpe/proxy-0002/#"],
        ["topic", "write", "mcw/v1/proxy/proxy-0002/state"],
        ["topic", "read", "mcw/v1/cpe/cpe-0003/weights"],
        ["topic", "read", "mcw/v1/s/21/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/s/21/proxy/proxy-0002/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/s/21/proxy/proxy-0002/cpe/cpe-0003/telemetry"],
        ["topic", "read", "mcw/v1/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0002/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0002/cpe/cpe-0003/telemetry"],
        ["user", "proxy-0003"],
        ["topic", "deny", "mcw/v1/cpe/proxy-0003/#"],
        ["topic", "deny", "mcw/v1/s/+/cpe/proxy-0003/#"],
        ["topic", "write", "mcw/v1/proxy/proxy-0003/state"],
        # Every served CPE once, sorted, under its own shard.
        ["user", "cpe-0001"],
        ["topic", "write", "mcw/v1/s/47/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/s/47/cpe/cpe-0001/telemetry"],
        ["user", "cpe-0002"],
        ["topic", "write", "mcw/v1/s/2/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/s/2/cpe/cpe-0002/telemetry"],
        ["user", "cpe-0003"],
        ["topic", "write", "mcw/v1/s/21/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/s/21/cpe/cpe-0003/telemetry"],
    ]
    # No proxy, no CPE: the shipped ACL, byte for byte.
    assert make_acl().stdout == base


def test_make_acl_binds_each_cpe_to_its_own_shard() -> None:
    base = (BROKER_DIR / "acl").read_text()
    proc = make_acl("--shards", "7", "--cpes", "cpe-0002,a", "--cpes", "cpe-0001,cpe-0002",
                    "proxy-0001:cpe-0001")
    assert proc.returncode == 0, proc.stderr
    assert grants(proc.stdout[len(base):])[-9:] == [
        ["user", "a"],
        ["topic", "write", f"mcw/v1/s/{shard_of('a', 7)}/cpe/a/state"],
        ["topic", "write", f"mcw/v1/s/{shard_of('a', 7)}/cpe/a/telemetry"],
        ["user", "cpe-0001"],
        ["topic", "write", f"mcw/v1/s/{shard_of('cpe-0001', 7)}/cpe/cpe-0001/state"],
        ["topic", "write", f"mcw/v1/s/{shard_of('cpe-0001', 7)}/cpe/cpe-0001/telemetry"],
        ["user", "cpe-0002"],
        ["topic", "write", f"mcw/v1/s/{shard_of('cpe-0002', 7)}/cpe/cpe-0002/state"],
        ["topic", "write", f"mcw/v1/s/{shard_of('cpe-0002', 7)}/cpe/cpe-0002/telemetry"],
    ]
    assert f"mcw/v1/s/{shard_of('cpe-0001', 7)}/proxy/proxy-0001/cpe/cpe-0001/state" in proc.stdout
    assert not [g for g in grants(proc.stdout)
                if g[:2] == ["topic", "write"] and g[2].startswith("mcw/v1/s/+/")]


# Ids of every allowed character and length, for the three implementations of the shard.
SHARD_IDS = ("cpe-0001", "cpe-0002", "cpe-0003", "cpe-10000", "a", "Z9._-x", "0", "c" * 64,
             "proxy.site-7_b", "A-._z", *(f"cpe-{i:05d}" for i in range(0, 100_000, 7919)))


@pytest.mark.parametrize("shards", [1, 7, DEFAULT_SHARDS, 1000, MAX_SHARDS])
def test_make_acl_shard_is_the_xapps_and_the_agents(shards: int) -> None:
    """make-acl.sh's FNV-1a in bash against xapp/core/shards.py (whose vectors the Go agent's
    mqttclient tests share): a CPE must be granted the shard its agent publishes under."""
    proc = make_acl("--shards", str(shards), "--cpes", ",".join(SHARD_IDS))
    assert proc.returncode == 0, proc.stderr
    lines = grants(proc.stdout)
    got = {user[1]: int(topic[2].split("/")[3]) for user, topic in itertools.pairwise(lines)
           if user[0] == "user" and user[1] != "mcw-xapp"}
    assert got == {cpe: shard_of(cpe, shards) for cpe in SHARD_IDS}


def test_one_shard_count_everywhere() -> None:
    """The default shard count is one number in the xApp, the agent, make-acl.sh and the chart:
    a CPE granted another count's shard could not report at all."""
    go = (REPO / "kernel-agent" / "mqttclient" / "mqttclient.go").read_text()
    assert re.search(r"DefaultShards\s*=\s*(\d+)", go)[1] == str(DEFAULT_SHARDS)  # type: ignore[index]
    assert re.search(r"MaxShards\s*=\s*(\d+)", go)[1] == str(MAX_SHARDS)  # type: ignore[index]
    script = (BROKER_DIR / "make-acl.sh").read_text()
    assert re.search(r"^shards=(\d+)$", script, re.M)[1] == str(DEFAULT_SHARDS)  # type: ignore[index]
    assert f"(( $2 <= {MAX_SHARDS} ))" in script
    values = yaml.safe_load((REPO / "charts" / "mcw-xapp" / "values.yaml").read_text())
    assert values["sharding"]["shards"] == DEFAULT_SHARDS
    # Without --shards make-acl.sh uses the default.
    assert make_acl("--cpes", "cpe-0001").stdout == \
        make_acl("--shards", str(DEFAULT_SHARDS), "--cpes", "cpe-0001").stdout


@pytest.mark.parametrize(("args", "reason"), [
    (["proxy-0001"], "expected PROXY_ID:CPE_ID"),
    (["proxy-0001:cpe-0001,"], "empty CPE id"),
    (["proxy-0001:cpe-0001,,cpe-0002"], "does not match"),
    (["proxy-0001:cpe-0001/weights"], "does not match"),
    (["proxy+:cpe-0001"], "does not match"),
    (["proxy-#:cpe-0001"], "does not match"),
    (["-proxy:cpe-0001"], "does not match"),
    (["proxy 1:cpe-0001"], "does not match"),
    (["proxy-0001:cpe 1"], "does not match"),
    (["proxy-0001:cpe-0001\nuser mcw-xapp"], "does not match"),
    (["proxy-0001:cpe-0001\ntopic write #"], "does not match"),
    ([f"proxy-0001:{'c' * 65}"], "does not match"),
    (["proxy-0001:cpe-0001:cpe-0002"], "does not match"),
    (["mcw-xapp:cpe-0001"], "xApp's identity"),
    (["proxy-0001:mcw-xapp"], "xApp's identity"),
    (["proxy-0001:cpe-0001,cpe-0001"], "given twice"),
    (["proxy-0001:cpe-0001", "proxy-0001:cpe-0002"], "given twice"),
    (["proxy-0001:cpe-0001", "cpe-0001:cpe-0002"], "both as a proxy and as a CPE"),
    (["--cpes", "proxy-0001", "proxy-0001:cpe-0002"], "both as a proxy and as a CPE"),
    (["--cpes", "cpe-0001,"], "empty CPE id"),
    (["--cpes", ",cpe-0001"], "empty CPE id"),
    (["--cpes", ""], "empty CPE id"),
    (["--cpes"], "missing CPE ids"),
    (["--cpes", "cpe-0001/state"], "does not match"),
    (["--cpes", "cpe-0001\nuser mcw-xapp"], "does not match"),
    (["--cpes", "mcw-xapp"], "xApp's identity"),
    (["--shards", "0"], "want 1..4096"),
    (["--shards", "4097"], "want 1..4096"),
    (["--shards", "064"], "want 1..4096"),
    (["--shards", "6 4"], "want 1..4096"),
    (["--shards"], "missing N"),
    (["--shard", "64"], "unknown option"),
])
def test_make_acl_refuses_bad_ids(args: list[str], reason: str) -> None:
    proc = make_acl(*args)
    assert proc.returncode == 2
    assert reason in proc.stderr
    assert proc.stdout == ""


def subject(cert: Path) -> str:
    return subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-subject",
                           "-ext", "subjectAltName,extendedKeyUsage"],
                          check=True, capture_output=True, text=True).stdout


def test_pki_script_is_idempotent_and_names_certificates_by_cpe(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", n_cpes=2)
    ca_before = pki.ca.read_bytes()
    cpe1_before = pki.cert("cpe-0001")[0].read_bytes()
    again: Pki = make_pki(tmp_path / "pki", n_cpes=2, first=3)
    assert again.ca.read_bytes() == ca_before
    assert again.cert("cpe-0001")[0].read_bytes() == cpe1_before
    assert sorted(p.name for p in (tmp_path / "pki" / "cpe").glob("*.crt")) == [
        f"cpe-000{i}.crt" for i in range(1, 5)]
    assert "CN = cpe-0004" in subject(again.cert("cpe-0004")[0])
    assert "TLS Web Client Authentication" in subject(again.cert("cpe-0004")[0])
    server = subject(again.server_cert)
    assert "IP Address:127.0.0.1" in server and "DNS:localhost" in server
    assert "CN = mcw-xapp" in subject(again.cert("mcw-xapp")[0])
    assert oct(again.cert("cpe-0004")[1].stat().st_mode & 0o777) == "0o600"
    # One proxy certificate by default (CN = proxy id, client auth), more on request, the
    # existing ones kept.
    assert sorted(p.name for p in (tmp_path / "pki" / "proxy").iterdir()) == [
        "proxy-0001.crt", "proxy-0001.key"]
    proxy1_before = again.cert("proxy-0001")[0].read_bytes()
    more = make_pki(tmp_path / "pki", n_cpes=0, n_proxies=3)
    assert more.cert("proxy-0001")[0].read_bytes() == proxy1_before
    assert sorted(p.name for p in (tmp_path / "pki" / "proxy").glob("*.crt")) == [
        f"proxy-000{i}.crt" for i in range(1, 4)]
    proxy3 = subject(more.cert("proxy-0003")[0])
    assert "CN = proxy-0003" in proxy3 and "TLS Web Client Authentication" in proxy3
    assert oct(more.cert("proxy-0003")[1].stat().st_mode & 0o777) == "0o600"
    assert len(list((tmp_path / "pki" / "cpe").glob("*.crt"))) == 4


def test_pki_script_refuses_bad_arguments(tmp_path: Path) -> None:
    script = BROKER_DIR / "make-test-pki.sh"
    for args in ([], [str(tmp_path), "many"], [str(tmp_path), "3", "-1"],
                 [str(tmp_path), "3", "1", "two"], [str(tmp_path), "3", "1", "-2"]):
        proc = subprocess.run(["bash", str(script), *args], capture_output=True, text=True)
        assert proc.returncode == 2
    assert not (tmp_path / "ca.crt").exists()
