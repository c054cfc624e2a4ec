"""The shard-keyed agent topics: building, parsing and decoding (no broker needed)."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.xapp.adapters.mqtt.test_payloads import PROXY_CPE_STATE, STATE
from xapp.adapters.mqtt import DropCounter, PayloadError, decode, shard_filter, shard_topic
from xapp.adapters.mqtt.payloads import encode
from xapp.adapters.mqtt.topics import ChannelTopic, parse_channel_topic
from xapp.core.shards import MAX_SHARDS, shard_of

IDS = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z", fullmatch=True)


def test_topics_of_the_vectors() -> None:
    # tests/xapp/core/test_shards.py's vectors: cpe-0001 is shard 47 of 64, cpe-0002 shard 2.
    assert shard_topic("cpe-0001", "state") == "mcw/v1/s/47/cpe/cpe-0001/state"
    assert shard_topic("cpe-0002", "telemetry") == "mcw/v1/s/2/cpe/cpe-0002/telemetry"
    assert (shard_topic("cpe-0003", "state", proxy_id="proxy-0001")
            == "mcw/v1/s/21/proxy/proxy-0001/cpe/cpe-0003/state")
    assert shard_topic("cpe-0001", "state", shards=1) == "mcw/v1/s/0/cpe/cpe-0001/state"
    assert shard_topic("cpe-10000", "state", shards=4096) == (
        f"mcw/v1/s/{0xB4D397A7 % 4096}/cpe/cpe-10000/state")


def test_building_refuses_what_would_escape_a_level() -> None:
    for bad in ["", "a/b", "+", "#", "x" * 65]:
        with pytest.raises(PayloadError):
            shard_topic(bad, "state")
        with pytest.raises(PayloadError):
            shard_topic("cpe-0001", "state", proxy_id=bad)
    with pytest.raises(ValueError, match="weights"):
        shard_topic("cpe-0001", "weights")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shards"):
        shard_topic("cpe-0001", "state", shards=0)


def test_filters() -> None:
    assert shard_filter(None, "state") == "mcw/v1/s/+/cpe/+/state"
    assert shard_filter(7, "telemetry") == "mcw/v1/s/7/cpe/+/telemetry"
    assert shard_filter(None, "telemetry", proxy=True) == "mcw/v1/s/+/proxy/+/cpe/+/telemetry"
    assert shard_filter(0, "state", proxy=True) == "mcw/v1/s/0/proxy/+/cpe/+/state"
    for bad in (-1, MAX_SHARDS):
        with pytest.raises(ValueError, match="shard"):
            shard_filter(bad, "state")


def test_parse() -> None:
    for name, want in [
        ("mcw/v1/s/47/cpe/cpe-0001/state", ChannelTopic("state", "cpe-0001", None, 47)),
        ("mcw/v1/s/0/cpe/c/telemetry", ChannelTopic("telemetry", "c", None, 0)),
        ("mcw/v1/s/4095/proxy/p/cpe/c/state", ChannelTopic("state", "c", "p", 4095)),
        ("mcw/v1/cpe/cpe-0001/state", ChannelTopic("state", "cpe-0001")),
        ("mcw/v1/proxy/p/cpe/c/telemetry", ChannelTopic("telemetry", "c", "p")),
    ]:
        assert parse_channel_topic(name) == want
    assert parse_channel_topic("mcw/v1/cpe/c/state").legacy  # type: ignore[union-attr]
    assert parse_channel_topic("mcw/v1/proxy/p/cpe/c/state").legacy  # type: ignore[union-attr]
    assert not parse_channel_topic("mcw/v1/s/1/cpe/c/state").legacy  # type: ignore[union-attr]
    assert not parse_channel_topic("mcw/v1/proxy/p/state").legacy  # type: ignore[union-attr]
    assert not parse_channel_topic("mcw/v1/cpe/c/weights").legacy  # type: ignore[union-attr]
    for bad in [
        "mcw/v1/s/07/cpe/c/state",  # padding: a second name for shard 7
        "mcw/v1/s/-1/cpe/c/state", "mcw/v1/s/4096/cpe/c/state", "mcw/v1/s/99999/cpe/c/state",
        "mcw/v1/s/+/cpe/c/state", "mcw/v1/s//cpe/c/state", "mcw/v1/s/1/cpe/+/state",
        "mcw/v1/s/1/cpe/c/weights", "mcw/v1/s/1/cpe/c/state/x", "mcw/v1/s/1/proxy/p/state",
        "mcw/v1/s/1/proxy/p/cpe/c/weights", "mcw/v1/s/1/proxy/#/cpe/c/state",
        "mcw/v1/s/1/cpu/c/state", "mcw/v1/s/1/cpe/c", "mcw/v1/s/ 1/cpe/c/state",
        "mcw/v1/s/1/proxy/p/cpu/c/state",
    ]:
        assert parse_channel_topic(bad) is None, bad


@given(cpe=IDS, proxy=st.none() | IDS, kind=st.sampled_from(["state", "telemetry"]),
       shards=st.integers(1, MAX_SHARDS))
def test_round_trip(cpe: str, proxy: str | None, kind: Literal["state", "telemetry"],
                    shards: int) -> None:
    name = shard_topic(cpe, kind, proxy_id=proxy, shards=shards)
    assert parse_channel_topic(name) == ChannelTopic(kind, cpe, proxy, shard_of(cpe, shards))


def test_decode_checks_who_speaks_on_sharded_topics() -> None:
    drops = DropCounter()
    ok = decode("mcw/v1/s/47/cpe/cpe-0001/state", encode(STATE), drops)
    assert ok is not None and ok[0] == "state"
    ok = decode("mcw/v1/s/47/proxy/proxy-0001/cpe/cpe-0001/state", encode(PROXY_CPE_STATE),
                drops)
    assert ok is not None and ok[1]["proxy_id"] == "proxy-0001"
    # Another CPE's id in the topic, a proxy's state on a CPE's topic, a CPE's on a proxy's.
    assert decode("mcw/v1/s/2/cpe/cpe-0002/state", encode(STATE), drops) is None
    assert decode("mcw/v1/s/47/cpe/cpe-0001/state", encode(PROXY_CPE_STATE), drops) is None
    assert decode("mcw/v1/s/47/proxy/proxy-0001/cpe/cpe-0001/state", encode(STATE),
                  drops) is None
    assert drops.snapshot() == {"state/cpe-id-mismatch": 1, "state/proxy-id-mismatch": 2}
