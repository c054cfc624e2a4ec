"""The channel's CPE and proxy topics: built and parsed (the sharded ones:
test_topics_shards.py)."""

from __future__ import annotations

import pytest

from xapp.adapters.mqtt import PayloadError, topic
from xapp.adapters.mqtt.topics import parse_channel_topic, parse_topic, proxy_topic


def test_topics() -> None:
    assert topic("cpe-0001", "weights") == "mcw/v1/cpe/cpe-0001/weights"
    assert parse_topic("mcw/v1/cpe/cpe-0001/state") == ("cpe-0001", "state")
    for bad in ["mcw/v1/cpe/cpe-0001", "mcw/v2/cpe/x/state", "mcw/v1/cpe/x/other",
                "mcw/v1/cpe/+/state"]:
        assert parse_topic(bad) is None
    for bad_id in ["", "a/b", "+", "#", "x" * 65]:
        with pytest.raises(PayloadError):
            topic(bad_id, "weights")
        with pytest.raises(PayloadError):
            proxy_topic(bad_id, "cpe-0001", "state")
    assert proxy_topic("proxy-0001", None, "state") == "mcw/v1/proxy/proxy-0001/state"
    assert (proxy_topic("proxy-0001", "cpe-0001", "telemetry")
            == "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/telemetry")
    for name, kind, cpe, proxy in [
            ("mcw/v1/cpe/cpe-0001/weights", "weights", "cpe-0001", None),
            ("mcw/v1/proxy/proxy-0001/state", "proxy-state", None, "proxy-0001"),
            ("mcw/v1/proxy/proxy-0001/cpe/cpe-0002/state", "state", "cpe-0002", "proxy-0001"),
            ("mcw/v1/proxy/p/cpe/c/telemetry", "telemetry", "c", "p")]:
        t = parse_channel_topic(name)
        assert t is not None and (t.kind, t.cpe_id, t.proxy_id) == (kind, cpe, proxy)
    for bad in ["mcw/v1/proxy/p", "mcw/v1/proxy/p/telemetry", "mcw/v1/proxy/p/cpe/c/weights",
                "mcw/v1/proxy/+/state", "mcw/v1/proxy/p/cpe/c/state/x",
                "mcw/v1/proxy/p/cpu/c/state", "mcw/v1/proxy/p/cpe/#/state"]:
        assert parse_channel_topic(bad) is None
