"""The receive boundary: what decode() accepts, and what it drops with which reason."""

from __future__ import annotations

from tests.xapp.adapters.mqtt.test_payloads import (
    PROXY_CPE_STATE,
    PROXY_STATE,
    PROXY_TELEMETRY,
    STATE,
    TELEMETRY,
    WEIGHTS_V1,
    with_,
)
from xapp.adapters.mqtt import DropCounter, decode
from xapp.adapters.mqtt.payloads import encode


def test_decode_drops_and_counts_with_reason() -> None:
    drops = DropCounter()
    ok = decode("mcw/v1/cpe/cpe-0001/state", encode(STATE), drops)
    assert ok is not None and ok[0] == "state"
    assert decode("mcw/v1/cpe/cpe-0001/state", b"{not json", drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/state", b"\xff\xfe", drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/telemetry", encode(with_(TELEMETRY, wats=3)), drops) is None
    # A CPE speaking for another CPE in its own topic.
    assert decode("mcw/v1/cpe/cpe-0002/state", encode(STATE), drops) is None
    assert decode("somewhere/else", encode(STATE), drops) is None
    assert drops.snapshot() == {
        "state/bad-json": 2, "telemetry/schema": 1, "state/cpe-id-mismatch": 1,
        "unknown/bad-topic": 1,
    }
    assert drops.total() == 5 and drops.total("state") == 3


def test_decode_of_proxy_topics_checks_who_speaks() -> None:
    drops = DropCounter()
    cpe_state = "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state"
    ok = decode(cpe_state, encode(PROXY_CPE_STATE), drops)
    assert ok is not None and ok[0] == "state" and ok[1]["proxy_id"] == "proxy-0001"
    ok = decode("mcw/v1/proxy/proxy-0001/state", encode(PROXY_STATE), drops)
    assert ok is not None and ok[0] == "proxy-state"
    ok = decode("mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry", encode(PROXY_TELEMETRY),
                drops)
    assert ok is not None and ok[0] == "telemetry"
    assert drops.total() == 0
    # Another proxy's id, another CPE, a CPE's state on a proxy topic and the reverse, a proxy
    # telemetry without its id, a v1 document.
    assert decode("mcw/v1/proxy/proxy-0002/state", encode(PROXY_STATE), drops) is None
    assert decode("mcw/v1/proxy/proxy-0002/cpe/cpe-0001/state", encode(PROXY_CPE_STATE),
                  drops) is None
    assert decode("mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state", encode(PROXY_CPE_STATE),
                  drops) is None
    assert decode(cpe_state, encode(with_(STATE, proxy_id="proxy-0001")), drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/state", encode(PROXY_CPE_STATE), drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/state", encode(with_(STATE, role="proxy")),
                  drops) is None
    assert decode("mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry",
                  encode(with_(PROXY_TELEMETRY, proxy_id=...)), drops) is None
    assert decode("mcw/v1/cpe/cpe-0001/weights", encode(WEIGHTS_V1), drops) is None
    assert decode("mcw/v1/proxy/proxy-0001/state", b"", drops) is None
    assert drops.snapshot() == {
        "proxy-state/proxy-id-mismatch": 1, "proxy-state/bad-json": 1,
        "state/proxy-id-mismatch": 2, "state/cpe-id-mismatch": 1, "state/role-mismatch": 2,
        "telemetry/proxy-id-mismatch": 1, "weights/schema": 1,
    }
