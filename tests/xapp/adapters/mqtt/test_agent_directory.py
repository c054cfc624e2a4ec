"""The agent directory without a broker: the agents' states, who applies which direction of a
CPE, rate caps, downlink semantics and how many traffic classes each applier takes, what is
forgotten when shards go, and the records built from the documents.  Fed the documents the
subscriber's tests publish, checked against the schemas first: what the subscriber hands over
has validated."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.xapp.adapters.mqtt.test_payloads import PROXY_CPE_STATE, STATE
from tests.xapp.adapters.mqtt.test_subscriber import state_doc
from tests.xapp.adapters.mqtt.test_subscriber_proxy import proxy_cpe_state, proxy_state
from xapp.adapters.mqtt import AgentDirectory, CpeState
from xapp.adapters.mqtt.payloads import Kind, check

SHARES: dict[str, Any] = {"backend": "mptcp-shares",
                          "capabilities": {"max_weight": 255, "semantics": "rate-caps"}}


def valid(kind: Kind, payload: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(payload)
    check(kind, doc)
    return doc


def cpe(directory: AgentDirectory, cpe_id: str, version: int, at: float = 1.0,
        **extra: Any) -> CpeState:
    return directory.report_state(valid("state", state_doc(cpe_id, version, **extra)), at)


def served(directory: AgentDirectory, proxy: str, cpe_id: str, version: int, at: float = 1.0,
           **extra: Any) -> CpeState:
    return directory.report_state(
        valid("state", proxy_cpe_state(proxy, cpe_id, version, **extra)), at)


def proxy(directory: AgentDirectory, proxy_id: str, online: bool = True, at: float = 1.0,
          **extra: Any) -> None:
    directory.report_proxy(valid("proxy-state", proxy_state(proxy_id, online, **extra)), at)


def test_cpe_agent_states_and_their_last_will() -> None:
    d = AgentDirectory()
    st = cpe(d, "cpe-0001", 7)
    assert d.state("cpe-0001") == st and st.direction == "ul" and st.role == "cpe"
    cpe(d, "cpe-0002", 1, online=False)
    assert d.online() == ["cpe-0001"] and set(d.states()) == {"cpe-0001", "cpe-0002"}
    # The last will (online false only) keeps what was known, but not the event.
    will = d.report_state({"schema": "mcw.state.v2", "cpe_id": "cpe-0001", "online": False}, 2.0)
    assert not will.online and will.applied_version == 7 and will.event is None
    assert will.received_s == 2.0 and d.online() == []
    # A CPE's state is not a proxy's per-CPE state, and nobody applies its downlink.
    assert d.proxy_cpe_states() == {} and d.downlink("cpe-0001") is None
    assert d.state("cpe-0003") is None


def test_queries_return_copies() -> None:
    d = AgentDirectory()
    cpe(d, "cpe-0001", 1)
    proxy(d, "proxy-0001")
    served(d, "proxy-0001", "cpe-0001", 1)
    d.states().clear()
    d.proxies().clear()
    d.proxy_cpe_states().clear()
    d.downlinks().clear()
    assert set(d.states()) == {"cpe-0001"} and set(d.proxies()) == {"proxy-0001"}
    assert set(d.proxy_cpe_states()) == {("proxy-0001", "cpe-0001")}
    assert set(d.downlinks()) == {"cpe-0001"}


def test_downlink_follows_the_proxy_and_its_per_cpe_state() -> None:
    d = AgentDirectory()
    served(d, "proxy-0001", "cpe-0001", 9)
    # The proxy has not reported its own state yet: its per-CPE state is enough.
    down = d.downlink("cpe-0001")
    assert down is not None and down.proxy_id == "proxy-0001"
    assert down.state.applied_version == 9 and down.state.direction == "dl"
    assert d.state("cpe-0001") is None  # the CPE agent's own state is another record
    proxy(d, "proxy-0001")
    assert d.downlink("cpe-0001") is not None
    # The proxy goes offline (its last will): it applies nothing.
    proxy(d, "proxy-0001", online=False)
    assert d.downlink("cpe-0001") is None and d.downlinks() == {}
    proxy(d, "proxy-0001")
    assert d.downlink("cpe-0001") is not None
    # The per-CPE state says offline (lease ran out, CPE unknown): nobody applies it.
    served(d, "proxy-0001", "cpe-0001", 9, online=False)
    assert d.downlink("cpe-0001") is None
    served(d, "proxy-0001", "cpe-0001", 10)
    assert (down := d.downlink("cpe-0001")) is not None and down.state.applied_version == 10
    # The proxy cleared its per-CPE state: it stopped serving the CPE.
    d.stop_serving("proxy-0001", "cpe-0001")
    assert d.downlink("cpe-0001") is None and d.proxy_cpe_states() == {}
    d.stop_serving("proxy-0001", "cpe-0001")  # nothing left to clear: no harm
    assert set(d.proxies()) == {"proxy-0001"}


def test_the_most_recently_heard_proxy_applies_the_downlink() -> None:
    d = AgentDirectory()
    served(d, "proxy-0001", "cpe-0001", 1, at=5.0)
    served(d, "proxy-0002", "cpe-0001", 2, at=6.0)
    assert (down := d.downlink("cpe-0001")) is not None and down.proxy_id == "proxy-0002"
    served(d, "proxy-0001", "cpe-0001", 3, at=7.0)
    assert (down := d.downlink("cpe-0001")) is not None and down.proxy_id == "proxy-0001"
    # The newer one goes offline: the other still applies it.
    proxy(d, "proxy-0001", online=False, at=8.0)
    assert (down := d.downlink("cpe-0001")) is not None and down.proxy_id == "proxy-0002"


def test_a_proxy_state_removes_the_cpe_of_its_name() -> None:
    """A CPE state under a proxy's id was the proxy's certificate speaking as a CPE."""
    d = AgentDirectory()
    cpe(d, "proxy-0001", 1)
    assert "proxy-0001" in d.states() and not d.is_proxy("proxy-0001")
    proxy(d, "proxy-0001")
    assert "proxy-0001" not in d.states() and d.is_proxy("proxy-0001")
    assert not d.is_proxy("cpe-0001")
    got = d.proxy("proxy-0001")
    assert got is not None and got.online and got.cpes == 2 and got.directions_coupled


def test_rate_caps_per_direction() -> None:
    d = AgentDirectory()
    cpe(d, "cpe-0001", 1, **SHARES)
    cpe(d, "cpe-0002", 1)
    assert d.rate_caps("ul") == {"cpe-0001"} and d.rate_caps("dl") == frozenset()
    # The proxy reports rate-caps in its own state; its per-CPE states say nothing.
    proxy(d, "proxy-0001", capabilities={"semantics": "rate-caps"})
    served(d, "proxy-0001", "cpe-0002", 3)
    assert d.rate_caps("dl") == {"cpe-0002"}
    down = d.downlink("cpe-0002")
    assert down is not None and d.downlink_semantics(down) == "rate-caps"
    # A per-CPE state's own semantics wins over the proxy's.
    served(d, "proxy-0001", "cpe-0002", 4, capabilities={"semantics": "on-off"})
    assert d.rate_caps("dl") == frozenset()
    down = d.downlink("cpe-0002")
    assert down is not None and d.downlink_semantics(down) == "on-off"
    # The CPE agent goes offline: its uplink is nobody's to cap.
    cpe(d, "cpe-0001", 1, online=False, **SHARES)
    assert d.rate_caps("ul") == frozenset()
    with pytest.raises(ValueError, match="direction"):
        d.rate_caps("up")


def test_downlink_semantics_not_reported() -> None:
    d = AgentDirectory()
    served(d, "proxy-0001", "cpe-0001", 1)
    down = d.downlink("cpe-0001")
    assert down is not None and d.downlink_semantics(down) is None  # proxy not heard yet
    proxy(d, "proxy-0001")  # an agent from before the field
    assert d.downlink_semantics(down) is None and d.rate_caps("dl") == frozenset()


def test_rate_caps_are_recomputed_after_every_change_only() -> None:
    """The loop asks every tick: the answer is the one computed, until something changes."""
    d = AgentDirectory()
    cpe(d, "cpe-0001", 1, **SHARES)
    first = d.rate_caps("ul")
    assert d.rate_caps("ul") is first
    cpe(d, "cpe-0002", 1, **SHARES)
    assert d.rate_caps("ul") == {"cpe-0001", "cpe-0002"}
    proxy(d, "proxy-0001", capabilities={"semantics": "rate-caps"})
    served(d, "proxy-0001", "cpe-0001", 1)
    assert d.rate_caps("dl") == {"cpe-0001"}
    d.stop_serving("proxy-0001", "cpe-0001")
    assert d.rate_caps("dl") == frozenset()
    d.keep_only(lambda c: c == "cpe-0002")
    assert d.rate_caps("ul") == {"cpe-0002"}


def test_keep_only_forgets_the_cpes_given_up() -> None:
    d = AgentDirectory()
    for c in ("cpe-0001", "cpe-0002"):
        cpe(d, c, 1)
        served(d, "proxy-0001", c, 1)
    proxy(d, "proxy-0001")
    d.keep_only(lambda c: c == "cpe-0002")
    assert set(d.states()) == {"cpe-0002"}
    assert set(d.proxy_cpe_states()) == {("proxy-0001", "cpe-0002")}
    assert set(d.downlinks()) == {"cpe-0002"}
    assert set(d.proxies()) == {"proxy-0001"}  # a proxy's own state is no shard's
    d.keep_only(lambda _c: False)
    assert d.states() == {} and d.proxy_cpe_states() == {} and d.is_proxy("proxy-0001")


def test_writers_and_readers_on_other_threads() -> None:
    """The network thread writes while the loop, the metrics and the endpoints read: whole
    passes over the maps see no change of size under them, and every write lands."""
    d = AgentDirectory()
    proxy(d, "proxy-0001", capabilities={"semantics": "rate-caps"})
    writers, rounds = 4, 300
    state = valid("state", state_doc("cpe-0001", 1, **SHARES))
    down = valid("state", proxy_cpe_state("proxy-0001", "cpe-0001", 1))
    errors: list[BaseException] = []
    done = threading.Event()

    def write(w: int) -> None:
        try:
            for i in range(rounds):
                c = f"cpe-{w}-{i}"
                d.report_state({**state, "cpe_id": c, "applied_version": i}, float(i))
                d.report_state({**down, "cpe_id": c, "applied_version": i}, float(i))
                if i % 3 == 0:
                    d.stop_serving("proxy-0001", c)
        except BaseException as exc:  # reported on the test's thread
            errors.append(exc)

    def read() -> None:
        try:
            while not done.is_set():
                d.downlinks()
                d.rate_caps("ul")
                d.rate_caps("dl")
                d.online()
                d.keep_only(lambda _c: True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    reader = threading.Thread(target=read)
    reader.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join()
    assert errors == []
    assert len(d.states()) == writers * rounds
    kept = writers * sum(1 for i in range(rounds) if i % 3)
    assert len(d.proxy_cpe_states()) == kept
    assert len(d.rate_caps("ul")) == writers * rounds and len(d.rate_caps("dl")) == kept


# --- the records ---------------------------------------------------------------------------------


def test_last_will_keeps_what_was_known() -> None:
    online = CpeState.from_doc(STATE, None, 1.0)
    assert online.online and online.applied_version == 42 and not online.on_off_only
    assert online.backend == "wrr-sysctl" and online.links["wifi"] == "down"
    assert (online.role, online.direction, online.proxy_id) == ("cpe", "ul", None)
    assert online.addresses == {"nr": "10.0.1.2", "wifi": "fd00::2"}
    assert online.directions_coupled is False
    served_by = CpeState.from_doc(PROXY_CPE_STATE, None, 1.0)
    assert (served_by.role, served_by.direction, served_by.proxy_id) == (
        "proxy", "dl", "proxy-0001")
    will = {"schema": "mcw.state.v2", "cpe_id": "cpe-0001", "online": False}
    gone = CpeState.from_doc(will, online, 2.0)
    assert not gone.online and gone.applied_version == 42 and gone.event is None
    fresh = CpeState.from_doc(will, None, 2.0)
    assert not fresh.online and fresh.applied_version == 0


def test_state_semantics_and_applied_caps() -> None:
    doc = json.loads(state_doc("cpe-1", 4, backend="mptcp-shares",
                               capabilities={"max_weight": 255, "semantics": "rate-caps"},
                               applied_caps_mbps={"wifi": 8.5}))
    check("state", doc)
    st1 = CpeState.from_doc(doc, None, 1.0)
    assert st1.semantics == "rate-caps" and st1.rate_caps
    assert st1.applied_caps_mbps == {"wifi": 8.5}
    # A last will keeps what was known.
    will = CpeState.from_doc({"schema": "mcw.state.v2", "cpe_id": "cpe-1", "online": False},
                             st1, 2.0)
    assert will.rate_caps and will.applied_caps_mbps == {"wifi": 8.5}
    # New applied weights without caps: uncapped now.
    again = json.loads(state_doc("cpe-1", 5, backend="mptcp-shares",
                                 capabilities={"semantics": "rate-caps"}))
    assert CpeState.from_doc(again, st1, 3.0).applied_caps_mbps == {}
    # No semantics reported (an agent from before the field): never rate-caps.
    old = CpeState.from_doc(json.loads(state_doc("cpe-1", 1, backend="mptcp-shares")),
                            None, 1.0)
    assert old.semantics is None and not old.rate_caps


def test_the_directory_reads_max_classes_per_direction() -> None:
    d = AgentDirectory()
    caps = {"max_weight": 255, "on_off_only": False, "directions_coupled": True}
    d.report_state(valid("state", state_doc("cpe-a", 1,
                                            capabilities={**caps, "max_classes": 8})), 1.0)
    d.report_state(valid("state", state_doc("cpe-b", 1, capabilities=caps)), 1.0)
    d.report_state(valid("state", state_doc("cpe-c", 1, online=False,
                                  capabilities={**caps, "max_classes": 4})), 1.0)
    assert d.max_classes("ul") == {"cpe-a": 8}  # b from before classes, c offline
    # The downlink: the proxy's per-CPE state, else its own state.
    d.report_proxy(valid("proxy-state", proxy_state(
        "px-1", capabilities={**caps, "max_classes": 3})), 1.0)
    d.report_state(valid("state", proxy_cpe_state("px-1", "cpe-a", 1)), 2.0)
    d.report_state(valid("state", proxy_cpe_state("px-1", "cpe-b", 1,
                                        capabilities={**caps, "max_classes": 2})), 2.0)
    assert d.max_classes("dl") == {"cpe-a": 3, "cpe-b": 2}
    # A last will keeps what was known; capabilities without it (a downgrade) say none.
    d.report_state({"schema": "mcw.state.v2", "cpe_id": "cpe-a", "online": True}, 3.0)
    assert d.max_classes("ul") == {"cpe-a": 8}
    d.report_state(valid("state", state_doc("cpe-a", 2, capabilities=caps)), 4.0)
    assert d.max_classes("ul") == {}
    with pytest.raises(ValueError):
        d.max_classes("up")


def test_the_classes_an_agent_applied_are_kept_with_its_weights() -> None:
    d = AgentDirectory()
    caps = {"max_weight": 255, "on_off_only": False, "directions_coupled": True,
            "semantics": "rate-caps", "max_classes": 8}
    applied = {"voice": {"caps_mbps": {"wifi": 36.0}, "urgent": True}}
    d.report_state(valid("state", state_doc("cpe-a", 4, capabilities=caps,
                                            applied_classes=applied)), 1.0)
    state = d.state("cpe-a")
    assert state is not None and state.applied_classes == applied
    # A last will keeps them; new weights without classes clear them.
    d.report_state({"schema": "mcw.state.v2", "cpe_id": "cpe-a", "online": False}, 2.0)
    assert d.states()["cpe-a"].applied_classes == applied
    d.report_state(valid("state", state_doc("cpe-a", 5, capabilities=caps)), 3.0)
    assert d.states()["cpe-a"].applied_classes == {}
