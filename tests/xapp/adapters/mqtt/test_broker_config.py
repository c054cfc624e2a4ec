"""The shipped broker files: production and test configs agree, the PKI script is idempotent."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.mosquitto import BROKER_DIR, Pki, make_pki

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
        ["pattern", "read", "mcw/v1/cpe/%u/weights"],
        ["pattern", "write", "mcw/v1/s/+/cpe/%u/state"],
        ["pattern", "write", "mcw/v1/s/+/cpe/%u/telemetry"],
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
        ["topic", "read", "mcw/v1/s/+/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/s/+/proxy/proxy-0001/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/s/+/proxy/proxy-0001/cpe/cpe-0002/telemetry"],
        ["topic", "read", "mcw/v1/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/cpe/cpe-0002/telemetry"],
        ["topic", "read", "mcw/v1/cpe/cpe-0001/weights"],
        ["topic", "read", "mcw/v1/s/+/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/s/+/proxy/proxy-0001/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/s/+/proxy/proxy-0001/cpe/cpe-0001/telemetry"],
        ["topic", "read", "mcw/v1/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry"],
        ["user", "proxy-0002"],
        ["topic", "deny", "mcw/v1/cpe/proxy-0002/#"],
        ["topic", "deny", "mcw/v1/s/+/cpe/proxy-0002/#"],
        ["topic", "write", "mcw/v1/proxy/proxy-0002/state"],
        ["topic", "read", "mcw/v1/cpe/cpe-0003/weights"],
        ["topic", "read", "mcw/v1/s/+/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/s/+/proxy/proxy-0002/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/s/+/proxy/proxy-0002/cpe/cpe-0003/telemetry"],
        ["topic", "read", "mcw/v1/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0002/cpe/cpe-0003/state"],
        ["topic", "write", "mcw/v1/proxy/proxy-0002/cpe/cpe-0003/telemetry"],
        ["user", "proxy-0003"],
        ["topic", "deny", "mcw/v1/cpe/proxy-0003/#"],
        ["topic", "deny", "mcw/v1/s/+/cpe/proxy-0003/#"],
        ["topic", "write", "mcw/v1/proxy/proxy-0003/state"],
    ]
    # No proxy: the shipped ACL, byte for byte.
    assert make_acl().stdout == base


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
