"""Rate caps through the running xApp (``mcw run`` in-process, lab KPIs, the real MQTT channel
on a real Mosquitto with make-acl.sh's ACL): agents' retained states say which directions are
applied with ``rate-caps``, the weights the xApp publishes carry ``caps_mbps`` for those only,
``/ric/v1/cpes`` shows the semantics and caps, and ``controls.loop.caps_headroom`` is applied on
reload."""

from __future__ import annotations

import argparse
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.mosquitto import MosquittoBroker, Pki, TestClient, connect_client
from tests.support.polling import wait_until
from tests.xapp.adapters.mqtt.test_subscriber import state_doc
from tests.xapp.adapters.mqtt.test_subscriber_proxy import proxy_cpe_state, proxy_state
from xapp.adapters.mqtt import shard_topic
from xapp.app.config import load_config
from xapp.app.process import XappProcess
from xapp.app.run_cli import configure
from xapp.app.run_options import RunOptions

#: Equal forecasts on both WATs and a 70/30 split: nr sets the total (300 / 0.7) and stays
#: uncapped; wifi carries 0.3 of it, under its own 300, so it is capped (xapp.core.caps).
KPIS = {"cpes": {cpe: {"nr": {"delivered_mbps": 300, "saturated": 1},
                       "wifi": {"delivered_mbps": 300, "saturated": 1}}
                 for cpe in ("cpe-0001", "cpe-0002")}}
POLICY = {"mode": "fixed_split", "max_weight": 100, "hysteresis_pct": 2.0,
          "capacity_floor_mbps": 1.0,
          "wats": {"nr": {"split_pct": 70}, "wifi": {"split_pct": 30}}}
SHARES = {"backend": "mptcp-shares",
          "capabilities": {"max_weight": 255, "semantics": "rate-caps",
                           "directions_coupled": True}}
PROXY = "mcw/v1/proxy/proxy-0001"


def _controls(broker: MosquittoBroker, pki: Pki, headroom: float) -> dict[str, Any]:
    cert, key = pki.cert("mcw-xapp")
    return {"log_level": "INFO", "sdl_namespace": "mcw-caps",
            "loop": {"control_period_s": 0.1, "kpi_max_age_s": 5.0, "caps_headroom": headroom},
            "mqtt": {"host": "127.0.0.1", "port": broker.port, "client_id": "mcw-xapp",
                     "ca_file": str(pki.ca), "cert_file": str(cert), "key_file": str(key)},
            "default_policy": POLICY}


def _write(path: Path, controls: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"name": "mcw-xapp", "version": "0.1.0", "controls": controls}))
    return path


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def _weights(client: TestClient, cpe: str) -> list[dict[str, Any]]:
    return [json.loads(m.payload) for m in client.on(f"mcw/v1/cpe/{cpe}/weights")]


@pytest.fixture
def agents(proxy_broker: MosquittoBroker) -> Iterator[dict[str, TestClient]]:
    """Both CPE agents and the proxy with their states retained before the xApp starts (as
    after an xApp restart): cpe-0001 caps its uplink, cpe-0002 is WRR; the proxy reports
    rate-caps in its own state, its per-CPE state of cpe-0001 says nothing (so the proxy's
    counts) and that of cpe-0002 says wrr."""
    c1 = connect_client(proxy_broker, "cpe-0001", client_id="c1")
    c2 = connect_client(proxy_broker, "cpe-0002", client_id="c2")
    p1 = connect_client(proxy_broker, "proxy-0001", client_id="p1")
    clients = {"cpe-0001": c1, "cpe-0002": c2, "proxy-0001": p1}
    try:
        assert c1.publish(shard_topic("cpe-0001", "state"), state_doc(
            "cpe-0001", 1, applied_weights={"nr": 70, "wifi": 30},
            applied_caps_mbps={"wifi": 12.5}, **SHARES), retain=True) < 0x80
        assert c2.publish(shard_topic("cpe-0002", "state"), state_doc(
            "cpe-0002", 1, applied_weights={"nr": 7, "wifi": 3}, backend="wrr-sysctl",
            capabilities={"max_weight": 255, "semantics": "wrr"}), retain=True) < 0x80
        assert p1.publish(f"{PROXY}/state", proxy_state(
            "proxy-0001", backend="mptcp-shares",
            capabilities={"max_weight": 255, "semantics": "rate-caps"}), retain=True) < 0x80
        assert p1.publish(shard_topic("cpe-0001", "state", proxy_id="proxy-0001"), proxy_cpe_state(
            "proxy-0001", "cpe-0001", 1, backend="mptcp-shares",
            applied_caps_mbps={"wifi": 40.0}), retain=True) < 0x80
        assert p1.publish(shard_topic("cpe-0002", "state", proxy_id="proxy-0001"), proxy_cpe_state(
            "proxy-0001", "cpe-0002", 1, capabilities={"semantics": "wrr"}),
            retain=True) < 0x80
        for cpe in ("cpe-0001", "cpe-0002"):
            assert clients[cpe].subscribe(f"mcw/v1/cpe/{cpe}/weights")[0] < 0x80
        yield clients
    finally:
        for c in clients.values():
            c.close()


def test_rate_caps_reach_the_agents_and_the_cpes_view(
        proxy_broker: MosquittoBroker, pki: Pki, agents: dict[str, TestClient],
        tmp_path: Path) -> None:
    kpis = tmp_path / "kpis.json"
    kpis.write_text(json.dumps(KPIS))
    config = _write(tmp_path / "config-file.json", _controls(proxy_broker, pki, 1.1))
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args([
        "--config", str(config), "--http-host", "127.0.0.1", "--http-port", "0", "--rmr", "off",
        "--sdl", "memory", "--estimator", "ewma", "--kpi-file", str(kpis),
        "--config-poll-s", "0.1"])
    proc = XappProcess(RunOptions.from_args(args), load_config(args.config))
    proc.start()
    c1, c2 = agents["cpe-0001"], agents["cpe-0002"]
    try:
        assert proc.http is not None
        port = proc.http.port
        # The retained states arrive in any order: wait for the set that caps both directions.
        def capped(d: dict[str, Any]) -> bool:
            return "caps_mbps" in d["ul"] and "caps_mbps" in d["dl"]

        assert wait_until(lambda: any(capped(d) for d in _weights(c1, "cpe-0001")),
                          timeout_s=20), _weights(c1, "cpe-0001")
        first = next(d for d in _weights(c1, "cpe-0001") if capped(d))
        split = first["ul"]["weights"]
        assert set(split) == {"nr", "wifi"}
        assert abs(split["wifi"] / (split["nr"] + split["wifi"]) - 0.3) < 0.01
        # nr sets the total and is left uncapped; wifi's cap is 1.1 x its 30 % of that total.
        assert set(first["ul"]["caps_mbps"]) == {"wifi"}
        cap = first["ul"]["caps_mbps"]["wifi"]
        # T = 300 / s_nr, so wifi's cap is 1.1 x 300 x w_wifi / w_nr (the ewma forecast of a
        # constant saturated 300 is 300): the configured headroom, not the default 1.15.
        assert cap == pytest.approx(1.1 * 300 * split["wifi"] / split["nr"], abs=0.001)
        # The downlink: the proxy's own state says rate-caps, its per-CPE state nothing.
        assert first["dl"]["caps_mbps"] == {"wifi": cap}

        # The WRR agent's sets carry no caps in either direction.
        assert wait_until(lambda: len(_weights(c2, "cpe-0002")) > 0, timeout_s=10)
        assert all("caps_mbps" not in d[x] for d in _weights(c2, "cpe-0002")
                   for x in ("ul", "dl"))

        # The view records a publish once the tick that made it has ended, which a loaded
        # machine may let the agent's copy overtake.
        assert wait_until(lambda: _get(port, "/ric/v1/cpes")["cpes"]["cpe-0001"]["published"][
            "version"] >= first["version"], timeout_s=10)
        view = _get(port, "/ric/v1/cpes")["cpes"]
        one, two = view["cpe-0001"], view["cpe-0002"]
        assert one["published"]["ul"]["caps_mbps"] == {"wifi": cap}
        assert one["published"]["dl"]["caps_mbps"] == {"wifi": cap}
        assert one["applied_by"]["ul"]["semantics"] == "rate-caps"
        assert one["applied_by"]["ul"]["applied_caps_mbps"] == {"wifi": 12.5}
        assert one["applied_by"]["dl"]["semantics"] == "rate-caps"  # the proxy's own
        assert one["applied_by"]["dl"]["applied_caps_mbps"] == {"wifi": 40.0}
        assert one["agent"]["semantics"] == "rate-caps"
        assert one["agent"]["applied_caps_mbps"] == {"wifi": 12.5}
        assert "caps_mbps" not in two["published"]["ul"]
        assert "caps_mbps" not in two["published"]["dl"]
        assert two["applied_by"]["ul"]["semantics"] == "wrr"
        assert two["applied_by"]["dl"]["semantics"] == "wrr"  # its per-CPE state wins
        assert _get(port, "/ric/v1/config")["controls"]["loop"]["caps_headroom"] == 1.1

        # A new headroom on disk: the caps move by 1.5 / 1.1 (more than half the new margin),
        # so the sets are sent again with the same weights.
        _write(config, _controls(proxy_broker, pki, 1.5))
        want = 1.5 * 300 * split["wifi"] / split["nr"]
        assert wait_until(lambda: any(
            abs(d["ul"].get("caps_mbps", {}).get("wifi", 0) - want) < 0.01
            for d in _weights(c1, "cpe-0001")), timeout_s=10), _weights(c1, "cpe-0001")[-1]
        last = _weights(c1, "cpe-0001")[-1]
        assert last["ul"]["weights"] == split
        assert set(last["ul"]["caps_mbps"]) == {"wifi"}
        assert wait_until(lambda: _get(port, "/ric/v1/cpes")["cpes"]["cpe-0001"]["published"][
            "dl"].get("caps_mbps") == last["dl"]["caps_mbps"], timeout_s=5)
    finally:
        proc.stop(grace_s=10)
