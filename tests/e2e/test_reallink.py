"""The real MPTCP connection of ``make e2e`` on its own: both agents up on the run's broker, the
bulk transfer using both WATs in both directions, a WAT down seen by the CPE agent and in the
delivered rate, and back."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.e2e.reallink import RealLink, proxy_acl
from tests.integration.stack import AGENT_BINARY
from tests.support.mosquitto import MosquittoBroker, make_pki, mosquitto_binary
from tests.support.polling import wait_until
from xapp.adapters.mqtt import shard_topic

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not AGENT_BINARY.exists() or mosquitto_binary() is None
    or shutil.which("ip") is None, reason="needs root, ip, mosquitto and make agent")

CPE = "cpe-0001"


@pytest.fixture
def link(tmp_path: Path) -> Iterator[tuple[RealLink, list[dict[str, object]]]]:
    pki = make_pki(tmp_path / "pki", n_cpes=1)
    broker = MosquittoBroker(pki, tmp_path / "broker",
                             acl=proxy_acl(tmp_path / "acl", CPE)).start()
    states: list[dict[str, object]] = []
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="mcw-xapp")
    cert, key = pki.cert("mcw-xapp")
    c.tls_set(ca_certs=str(pki.ca), certfile=str(cert), keyfile=str(key))
    c.on_message = lambda _c, _u, m: states.append(json.loads(m.payload)) if m.payload else None
    c.connect("127.0.0.1", broker.port)
    c.subscribe(shard_topic(CPE, "state"), qos=1)
    c.loop_start()
    rl = RealLink(tmp_path / "link", pki, broker.port, CPE)
    try:
        yield rl.start(), states
    finally:
        rl.stop()
        c.loop_stop()
        broker.stop()


def test_both_directions_use_both_wats_and_a_wat_down_is_seen(
        link: tuple[RealLink, list[dict[str, object]]]) -> None:
    rl, states = link
    best = max(p.mbit for p in rl.topo.paths)
    ul = rl.best_window("ul", 8, best, timeout=40)
    dl = rl.best_window("dl", 8, best, timeout=20)
    # More than the fastest path alone: the connection carries data over both WATs.
    assert ul is not None and ul > best, (ul, rl.delivered("ul"))
    assert dl is not None and dl > best, (dl, rl.delivered("dl"))
    assert ul <= rl.sum_mbit * 1.05 and dl <= rl.sum_mbit * 1.05
    down = time.time()
    rl.topo.set_link("wifi", False)
    # The uplink once the queued second drained (2 s after the link went down): three whole
    # seconds of it.
    assert wait_until(lambda: sum(t >= down + 3 for t, _ in rl.delivered("ul")) >= 3, 20, 0.5)
    ul_down = rl.mean("ul", down + 2, time.time())
    assert ul_down is not None and 0 < ul_down <= rl.topo.paths[0].mbit * 1.05, ul_down
    assert wait_until(lambda: any(s.get("event") == "link-down" for s in states), 10), \
        states[-3:]
    rl.topo.set_link("wifi", True)
    # Back above the fastest path alone within 30 s in both directions: the subflow that stood
    # through the outage waits out its backed-off retransmission timer first.
    up = time.time()
    assert rl.recovered_at(up, best, 30) is not None, rl.delivered("ul")[-12:]
    # The link came back before its route (set_link adds it after `ip link set up`): the agent
    # waited for the route, so the path manager's one join found it and no re-add was needed.
    assert rl.logged("agent-cpe", "link back, its route not yet")
    assert not rl.logged("agent-cpe",
                         "link returned but no connection rejoined it: path put back again")
