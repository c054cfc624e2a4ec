"""Rate caps on the channel: ``caps_mbps`` in the weights (encoded byte-identically to the
reference encoder, refused when the schema or the contract forbids them), and the agents'
``capabilities.semantics`` and ``applied_caps_mbps`` as the subscriber reads them, on a real
Mosquitto."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.mosquitto import MosquittoBroker, connect_client
from tests.xapp.adapters.mqtt.test_subscriber import state_doc
from tests.xapp.adapters.mqtt.test_subscriber_proxy import proxy_cpe_state, proxy_state
from xapp.adapters.mqtt import ChannelSubscriber, MqttSettings, shard_topic
from xapp.adapters.mqtt.payloads import check, encode
from xapp.adapters.mqtt.weights_encoder import encode_weights_batch
from xapp.core.ports import DirectionBatch, WeightBatch

NAN = math.nan
#: Columns of the test batches (the encoder sorts them itself).
WATS = ("nr", "wifi", "lifi", "lte")


def _batch(weights: list[list[int]], caps: list[list[float]] | None) -> WeightBatch:
    w = np.array(weights, dtype=np.int64)
    n = len(w)
    present = np.ones_like(w, dtype=bool)
    d = DirectionBatch(w, present, present.copy(), np.zeros(n), ["fixed_split"] * n,
                       ["test"] * n, ["default"] * n,
                       None if caps is None else np.array(caps, dtype=np.float64))
    plain = DirectionBatch(w, present, present.copy(), np.zeros(n), ["fixed_split"] * n,
                           ["test"] * n, ["default"] * n)
    return WeightBatch([f"cpe-{i}" for i in range(n)], plain, d, 30.0, WATS)


def _encode(batch: WeightBatch):  # type: ignore[no-untyped-def]
    return encode_weights_batch(batch, 1000, lambda ids: list(range(1, len(ids) + 1)))


def test_caps_are_encoded_as_the_reference_encoder_does() -> None:
    out = _encode(_batch([[70, 30, 0, 0], [1, 1, 1, 1], [2, 3, 0, 0]],
                         [[NAN, 9.857, NAN, NAN], [NAN, NAN, NAN, NAN], [0.064, 1e5, NAN, NAN]]))
    assert out.refused == {}
    docs = [json.loads(p) for p in out.payloads]
    for payload, doc in zip(out.payloads, docs, strict=True):
        check("weights", doc)
        assert payload == encode(doc)
    assert docs[0]["ul"]["caps_mbps"] == {"wifi": 9.857}
    assert "caps_mbps" not in docs[1]["ul"]  # a row without caps is as before
    assert docs[2]["ul"]["caps_mbps"] == {"nr": 0.064, "wifi": 100000.0}
    assert all("caps_mbps" not in d["dl"] for d in docs)


def test_no_caps_is_byte_identical_to_before() -> None:
    w = [[70, 30, 0, 0], [1, 2, 3, 4]]
    assert (_encode(_batch(w, None)).payloads
            == _encode(_batch(w, [[NAN] * 4, [NAN] * 4])).payloads)


@pytest.mark.parametrize(("caps", "match"), [
    ([NAN, NAN, 5.0, NAN], "weight 0"),  # lifi is at weight 0: off, not capped
    ([0.0, NAN, NAN, NAN], "within"),
    ([-1.0, NAN, NAN, NAN], "within"),
    ([1e5 + 1, NAN, NAN, NAN], "within"),
    ([math.inf, NAN, NAN, NAN], "within"),
])
def test_bad_caps_are_refused_and_take_no_version(caps: list[float], match: str) -> None:
    out = _encode(_batch([[70, 30, 0, 0], [1, 1, 1, 1]], [caps, [NAN] * 4]))
    assert list(out.refused) == [0] and match in str(out.refused[0])
    assert out.rows == [1] and out.versions == [1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 255), st.one_of(
    st.just(NAN), st.floats(0.001, 1e5, allow_nan=False))), min_size=4, max_size=4))
def test_encoded_caps_validate_or_are_refused(cells: list[tuple[int, float]]) -> None:
    weights = [[w for w, _ in cells]]
    caps = [[c for _, c in cells]]
    out = _encode(_batch(weights, caps))
    if out.payloads:
        doc = json.loads(out.payloads[0])
        check("weights", doc)
        assert out.payloads[0] == encode(doc)
        got = doc["ul"].get("caps_mbps", {})
        assert got == {WATS[j]: c for j, (_, c) in enumerate(cells) if not math.isnan(c)}
    else:
        assert 0 in out.refused


def test_subscriber_knows_the_rate_caps_appliers(proxy_broker: MosquittoBroker,
                                                 xapp_settings: MqttSettings
                                                 ) -> None:
    c1 = connect_client(proxy_broker, "cpe-0001", client_id="c1")
    c2 = connect_client(proxy_broker, "cpe-0002", client_id="c2")
    p1 = connect_client(proxy_broker, "proxy-0001", client_id="p1")
    sub = ChannelSubscriber(xapp_settings).start()
    shares = {"backend": "mptcp-shares",
              "capabilities": {"max_weight": 255, "semantics": "rate-caps"}}
    base = "mcw/v1/proxy/proxy-0001"
    try:
        assert sub.wait_subscribed(10)
        assert c1.publish(shard_topic("cpe-0001", "state"), state_doc("cpe-0001", 1, **shares),
                          retain=True) < 0x80
        assert c2.publish(shard_topic("cpe-0002", "state"), state_doc("cpe-0002", 1),
                          retain=True) < 0x80
        assert sub.wait_for(lambda s: len(s.directory.states()) == 2, 5)
        assert sub.directory.rate_caps("ul") == {"cpe-0001"}
        assert sub.directory.rate_caps("dl") == frozenset()
        # The proxy reports rate-caps in its own state; its per-CPE states say nothing.
        assert p1.publish(f"{base}/state", proxy_state(
            "proxy-0001", capabilities={"semantics": "rate-caps"}), retain=True) < 0x80
        assert p1.publish(shard_topic("cpe-0002", "state", proxy_id="proxy-0001"),
                          proxy_cpe_state("proxy-0001", "cpe-0002", 3), retain=True) < 0x80
        assert sub.wait_for(lambda s: s.directory.downlink("cpe-0002") is not None
                            and s.directory.proxy("proxy-0001") is not None, 5)
        assert sub.directory.rate_caps("dl") == {"cpe-0002"}
        # A per-CPE state's own semantics wins over the proxy's.
        assert p1.publish(shard_topic("cpe-0002", "state", proxy_id="proxy-0001"), proxy_cpe_state(
            "proxy-0001", "cpe-0002", 4, capabilities={"semantics": "on-off"}),
            retain=True) < 0x80
        assert sub.wait_for(lambda s: s.directory.rate_caps("dl") == frozenset(), 5)
        # The CPE agent goes offline: its uplink is nobody's to cap.
        assert c1.publish(shard_topic("cpe-0001", "state"),
                          state_doc("cpe-0001", 1, online=False, **shares), retain=True) < 0x80
        assert sub.wait_for(lambda s: s.directory.rate_caps("ul") == frozenset(), 5)
        with pytest.raises(ValueError, match="direction"):
            sub.directory.rate_caps("up")
    finally:
        sub.stop()
        for c in (c1, c2, p1):
            c.close()
