"""The channel's topics: building them, and parsing a received topic name.

Topics::

    mcw/v1/cpe/{cpe_id}/weights                                  the xApp to an agent
    mcw/v1/s/{shard}/cpe/{cpe_id}/state|telemetry                a CPE agent
    mcw/v1/s/{shard}/proxy/{proxy_id}/cpe/{cpe_id}/state|telemetry   a proxy agent, per CPE
    mcw/v1/proxy/{proxy_id}/state                                a proxy agent's own state

``{shard}`` is :func:`xapp.core.shards.shard_of` of the CPE id (decimal, no padding), so an
xApp replica subscribes to the shards it holds only. The agents of earlier releases publish
on the legacy topics ``mcw/v1/cpe/{cpe_id}/state|telemetry`` and
``mcw/v1/proxy/{proxy_id}/cpe/{cpe_id}/state|telemetry``, still parsed here (deprecated; the
subscriber accepts them while its ``legacy_topics`` is on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

from xapp.adapters.mqtt.payloads import CPE_KINDS, Kind, PayloadError
from xapp.core.shards import DEFAULT_SHARDS, MAX_SHARDS, shard_of

TOPIC_PREFIX: Final = "mcw/v1/cpe"
PROXY_PREFIX: Final = "mcw/v1/proxy"
#: Agents' state and telemetry, one subtree per shard: ``mcw/v1/s/{shard}/...``.
SHARD_PREFIX: Final = "mcw/v1/s"
#: A shard segment: decimal without padding, so each shard has one topic (a "07" would be a
#: second name for shard 7 that a one-shard subscription never sees).
_SHARD_RE: Final = re.compile(r"\A(?:0|[1-9][0-9]{0,3})\Z")
#: The schema's cpe_id pattern with ECMA-262 anchors: Python's ``$`` also matches before a
#: final newline, which would let "cpe-1\n" through (and the Go agent refuses it).
CPE_ID_RE: Final = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def topic(cpe_id: str, kind: Kind) -> str:
    """``mcw/v1/cpe/{cpe_id}/{kind}``; refuses ids that would escape their topic level."""
    if not CPE_ID_RE.match(cpe_id):
        raise PayloadError("bad-cpe-id", f"{cpe_id!r} is not a valid cpe_id")
    return f"{TOPIC_PREFIX}/{cpe_id}/{kind}"


def parse_topic(name: str) -> tuple[str, Kind] | None:
    """(cpe_id, kind) of a CPE topic (``mcw/v1/cpe/{cpe_id}/{kind}``), or None."""
    parts = name.split("/")
    if len(parts) != 5 or "/".join(parts[:3]) != TOPIC_PREFIX:
        return None
    cpe_id, kind = parts[3], parts[4]
    if kind not in CPE_KINDS or not CPE_ID_RE.match(cpe_id):
        return None
    return cpe_id, kind


@dataclass(frozen=True)
class ChannelTopic:
    """A topic of the channel: its kind, the CPE it is about (None for a proxy's own state),
    the proxy that speaks on it (None on the CPE topics) and the shard segment of a sharded
    topic (None on the others)."""

    kind: Kind
    cpe_id: str | None
    proxy_id: str | None = None
    shard: int | None = None

    @property
    def legacy(self) -> bool:
        """An agent's state or telemetry on the unsharded topic of earlier releases."""
        return self.shard is None and self.cpe_id is not None and self.kind != "weights"


def parse_channel_topic(name: str) -> ChannelTopic | None:
    """The CPE topics as :func:`parse_topic`, the sharded topics
    ``mcw/v1/s/{shard}/cpe/{cpe_id}/state|telemetry`` and
    ``mcw/v1/s/{shard}/proxy/{proxy_id}/cpe/{cpe_id}/state|telemetry`` (``shard`` set; whether
    it is the CPE's shard depends on the fleet's shard count, which the caller checks), and
    the proxy topics ``mcw/v1/proxy/{proxy_id}/state`` (kind ``proxy-state``) and
    ``mcw/v1/proxy/{proxy_id}/cpe/{cpe_id}/state|telemetry``; None for anything else."""
    cpe = parse_topic(name)
    if cpe is not None:
        return ChannelTopic(cpe[1], cpe[0])
    parts = name.split("/")
    if len(parts) >= 7 and parts[0] == "mcw" and parts[1] == "v1" and parts[2] == "s":
        return _parse_sharded(parts)
    if len(parts) < 5 or "/".join(parts[:3]) != PROXY_PREFIX or not CPE_ID_RE.match(parts[3]):
        return None
    if len(parts) == 5 and parts[4] == "state":
        return ChannelTopic("proxy-state", None, parts[3])
    if (len(parts) == 7 and parts[4] == "cpe" and CPE_ID_RE.match(parts[5])
            and parts[6] in ("state", "telemetry")):
        return ChannelTopic(parts[6], parts[5], parts[3])  # type: ignore[arg-type]
    return None


def _parse_sharded(parts: list[str]) -> ChannelTopic | None:
    if not _SHARD_RE.match(parts[3]) or int(parts[3]) >= MAX_SHARDS:
        return None
    shard = int(parts[3])
    kind = parts[-1]
    if kind not in ("state", "telemetry"):
        return None
    if len(parts) == 7 and parts[4] == "cpe" and CPE_ID_RE.match(parts[5]):
        return ChannelTopic(kind, parts[5], None, shard)  # type: ignore[arg-type]
    if (len(parts) == 9 and parts[4] == "proxy" and CPE_ID_RE.match(parts[5])
            and parts[6] == "cpe" and CPE_ID_RE.match(parts[7])):
        return ChannelTopic(kind, parts[7], parts[5], shard)  # type: ignore[arg-type]
    return None


def shard_topic(cpe_id: str, kind: Literal["state", "telemetry"], *,
                proxy_id: str | None = None, shards: int = DEFAULT_SHARDS) -> str:
    """Where an agent publishes a CPE's state or telemetry: the CPE agent
    ``mcw/v1/s/{shard}/cpe/{cpe_id}/{kind}``, a proxy (``proxy_id``) serving it
    ``mcw/v1/s/{shard}/proxy/{proxy_id}/cpe/{cpe_id}/{kind}``, ``shard`` being
    ``shard_of(cpe_id, shards)``; refuses ids that would escape their level."""
    for what, value in (("cpe_id", cpe_id), ("proxy_id", proxy_id)):
        if value is not None and not CPE_ID_RE.match(value):
            raise PayloadError(f"bad-{what.replace('_', '-')}", f"{value!r} is not a valid {what}")
    if kind not in ("state", "telemetry"):
        raise ValueError(f"agents publish state and telemetry, not {kind!r}")
    head = f"{SHARD_PREFIX}/{shard_of(cpe_id, shards)}"
    if proxy_id is None:
        return f"{head}/cpe/{cpe_id}/{kind}"
    return f"{head}/proxy/{proxy_id}/cpe/{cpe_id}/{kind}"


def shard_filter(shard: int | None, kind: Literal["state", "telemetry"], *,
                 proxy: bool = False) -> str:
    """The subscription to one shard's (None: every shard's) CPE agents' (``proxy``: proxy
    agents') ``kind`` messages."""
    if shard is not None and not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"shard must be in [0, {MAX_SHARDS}), got {shard}")
    seg = "+" if shard is None else str(shard)
    return f"{SHARD_PREFIX}/{seg}/proxy/+/cpe/+/{kind}" if proxy \
        else f"{SHARD_PREFIX}/{seg}/cpe/+/{kind}"


def proxy_topic(proxy_id: str, cpe_id: str | None, kind: Literal["state", "telemetry"]) -> str:
    """``mcw/v1/proxy/{proxy_id}/state`` (``cpe_id`` None) or
    ``mcw/v1/proxy/{proxy_id}/cpe/{cpe_id}/{kind}``; refuses ids that would escape their
    level."""
    for what, value in (("proxy_id", proxy_id), ("cpe_id", cpe_id)):
        if value is not None and not CPE_ID_RE.match(value):
            raise PayloadError(f"bad-{what.replace('_', '-')}", f"{value!r} is not a valid {what}")
    if cpe_id is None:
        return f"{PROXY_PREFIX}/{proxy_id}/state"
    return f"{PROXY_PREFIX}/{proxy_id}/cpe/{cpe_id}/{kind}"


@lru_cache(maxsize=1 << 17)
def weights_topic(cpe_id: str) -> str:
    """:func:`topic` of the weights, cached: a fleet's ids are checked once, not every tick."""
    return topic(cpe_id, "weights")
