"""The MQTT payloads of the channel: topics, building, and validation.

Contracts: ``schemas/mqtt-{weights,state,telemetry,proxy-state}.schema.json`` (JSON Schema
2020-12); the Go agent validates against the same files.  Topics::

    mcw/v1/cpe/{cpe_id}/weights                                  the xApp to an agent
    mcw/v1/s/{shard}/cpe/{cpe_id}/state|telemetry                a CPE agent
    mcw/v1/s/{shard}/proxy/{proxy_id}/cpe/{cpe_id}/state|telemetry   a proxy agent, per CPE
    mcw/v1/proxy/{proxy_id}/state                                a proxy agent's own state

``{shard}`` is :func:`xapp.core.shards.shard_of` of the CPE id (decimal, no padding), so an
xApp replica subscribes to the shards it holds only. The agents of earlier releases publish
on the legacy topics ``mcw/v1/cpe/{cpe_id}/state|telemetry`` and
``mcw/v1/proxy/{proxy_id}/cpe/{cpe_id}/state|telemetry``, still parsed here (deprecated; the
subscriber accepts them while its ``legacy_topics`` is on).

What does not validate is dropped, and the reason is
counted (``DropCounter``) and logged, so a misbehaving agent shows up in metrics and logs
instead of in the model's training data.

Validation engine: the schema files are checked against the 2020-12 meta-schema with
``jsonschema`` when loaded, and documents are validated with ``jsonschema-rs`` (compiled Rust).
The reason is the fleet: ``jsonschema`` takes about 200 µs per document here, so one tick of
10,000 weights plus 10,000 telemetry messages a second would cost four seconds of CPU per
second; ``jsonschema-rs`` takes about 1 µs. ``tests/xapp/adapters/mqtt/test_payloads.py`` runs
every case through both engines and requires them to agree.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any, Final, Literal

import jsonschema_rs
import numpy as np
from jsonschema import Draft202012Validator
from numpy.typing import NDArray

from xapp.bounded_json import BoundedJsonError, JsonLimits, loads
from xapp.core.caps import CAP_MIN_MBPS
from xapp.core.forecast import DIRECTIONS
from xapp.core.ports import Choice, DirectionBatch, PublishResult, WeightBatch
from xapp.core.shards import DEFAULT_SHARDS, MAX_SHARDS, shard_of
from xapp.core.weights import WeightDecision
from xapp.schemas import schemas_dir

log = logging.getLogger(__name__)

TOPIC_PREFIX: Final = "mcw/v1/cpe"
PROXY_PREFIX: Final = "mcw/v1/proxy"
#: Agents' state and telemetry, one subtree per shard: ``mcw/v1/s/{shard}/...``.
SHARD_PREFIX: Final = "mcw/v1/s"
#: A shard segment: decimal without padding, so each shard has one topic (a "07" would be a
#: second name for shard 7 that a one-shard subscription never sees).
_SHARD_RE: Final = re.compile(r"\A(?:0|[1-9][0-9]{0,3})\Z")
WATS: Final = ("nr", "lte", "wifi", "lifi")
MODES: Final = ("load_balancing", "fixed_split", "active_standby", "latency_bound")
MAX_WEIGHT: Final = 255
#: ``$defs/cap`` of the weights schema: a rate cap is in [CAP_MIN_MBPS, CAP_MAX_MBPS] Mbit/s
#: (the floor is the shares backend's, to which :mod:`xapp.core.caps` clips).
CAP_MAX_MBPS: Final = 100_000.0
#: The schema's cpe_id pattern with ECMA-262 anchors: Python's ``$`` also matches before a
#: final newline, which would let "cpe-1\n" through (and the Go agent refuses it).
CPE_ID_RE: Final = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")

Kind = Literal["weights", "state", "telemetry", "proxy-state"]
KINDS: Final[tuple[Kind, ...]] = ("weights", "state", "telemetry", "proxy-state")
#: Kinds of the per-CPE topics (``mcw/v1/cpe/{cpe_id}/{kind}``).
CPE_KINDS: Final[tuple[Kind, ...]] = ("weights", "state", "telemetry")
SCHEMA_IDS: Final[dict[Kind, str]] = {
    "weights": "mcw.weights.v2", "state": "mcw.state.v2", "telemetry": "mcw.telemetry.v2",
    "proxy-state": "mcw.proxy-state.v1",
}

#: What a received document may hold before it is parsed (:mod:`xapp.bounded_json`).
#: Sizes cover the largest valid message of each kind, with room to spare:
#:
#: * state: a ``last_error`` of 1024 characters, each escaped as a surrogate pair
#:   (``\ud83d\ude00``, 12 bytes), plus every other field at its longest: about 12.8 KiB;
#:   the limit is the broker's ``max_packet_size`` (16 KiB), so no valid state is refused
#:   however it is escaped.
#: * telemetry: four WATs of eight numeric fields: about 1.5 KiB (the Go agent's golden
#:   sample is 0.6 KiB); 8 KiB leaves room for indentation. It is not larger than state:
#:   the schema has no free text and no per-subflow list.
#: * weights: two ``reason`` of 256 characters escaped as above: about 6.5 KiB.
#: * telemetry v2: four WATs of three fields and two directions of six: about 2.5 KiB.
#: * proxy-state: a ``last_error`` as state's: the same limit.
#:
#: Depth: the schemas nest three levels (telemetry -> wats -> wat); 8 leaves room for a
#: schema that grows a level without letting a nesting attack near the parser or validator.
#: Integers: ``bytes_acked`` is a uint64 on the agent, 20 digits at most.
RECEIVE_LIMITS: Final[dict[Kind, JsonLimits]] = {
    "state": JsonLimits(max_bytes=16 * 1024, max_depth=8, max_int_digits=20),
    "telemetry": JsonLimits(max_bytes=8 * 1024, max_depth=8, max_int_digits=20),
    "weights": JsonLimits(max_bytes=8 * 1024, max_depth=8, max_int_digits=20),
    "proxy-state": JsonLimits(max_bytes=16 * 1024, max_depth=8, max_int_digits=20),
}


class PayloadError(ValueError):
    """A payload that does not satisfy its schema; ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@cache
def load_schema(kind: Kind) -> dict[str, Any]:
    """The JSON Schema of one payload kind, checked against the 2020-12 meta-schema."""
    path = schemas_dir() / f"mqtt-{kind}.schema.json"
    schema: dict[str, Any] = json.loads(path.read_text())
    Draft202012Validator.check_schema(schema)
    return schema


@cache
def validator(kind: Kind) -> Any:
    """The compiled (jsonschema-rs) validator of one payload kind, built once per process."""
    return jsonschema_rs.validator_for(load_schema(kind))


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


def _first_error(kind: Kind, doc: object) -> str | None:
    v = validator(kind)
    if v.is_valid(doc):
        return None
    for err in v.iter_errors(doc):
        where = "/".join(str(p) for p in err.instance_path) or "(root)"
        return f"{where}: {err.message}"
    return "(root): invalid"


def check(kind: Kind, doc: object) -> None:
    """Raise :class:`PayloadError` (reason ``schema``) unless ``doc`` validates."""
    problem = _first_error(kind, doc)
    if problem is not None:
        raise PayloadError("schema", f"{kind} {problem}")


@dataclass
class EncodedWeights:
    """The weights messages of a batch: ``payloads[n]`` is row ``rows[n]``'s message, with
    version ``versions[n]``; ``refused`` maps the other rows to why they may not be sent."""

    rows: list[int]
    versions: list[int]
    payloads: list[bytes]
    refused: dict[int, PayloadError]

    def result(self, batch: WeightBatch) -> PublishResult:
        """The publisher's answer for ``batch``: versions of the rows sent, errors of the rest."""
        ids = batch.cpe_ids
        return PublishResult(
            versions=dict(zip([ids[i] for i in self.rows], self.versions, strict=True)),
            errors={ids[i]: exc for i, exc in self.refused.items()})


_MAX_SAFE_INT: Final = 2**53 - 1
_ENCODE_FLOAT: Final = float.__repr__  # what json.dumps writes for a finite float


@lru_cache(maxsize=1 << 17)
def weights_topic(cpe_id: str) -> str:
    """:func:`topic` of the weights, cached: a fleet's ids are checked once, not every tick."""
    return topic(cpe_id, "weights")


def encode_weights_batch(batch: WeightBatch, issued_at_ms: int,
                         take_versions: Callable[[list[str]], list[int]]) -> EncodedWeights:
    """Validate and encode the ``mcw.weights.v2`` message of every row of ``batch``: one per
    CPE, its ``dl`` and ``ul`` sets under one version and one lease.

    The one way weights messages are made (the MQTT and in-memory publishers, and
    :func:`build_weights`).  The schema's constraints are checked over the whole batch at once
    (per direction: weights 0..255 with one above 0, known WATs and mode; lease 1..3600 s, the
    cpe_id pattern, versions and times below 2^53), and each message is written from a fixed
    template in sorted key order: byte-identical to :func:`encode` of the document, which
    validates against the schema (``tests/xapp/adapters/mqtt/test_payloads.py`` checks both,
    property-based, against the reference validator).  Rows that may not be sent (either
    direction invalid) are refused and take no version; ``take_versions`` is called once with
    the cpe_ids of the others, in order.
    """
    n = len(batch)
    refused: dict[int, PayloadError] = {}
    lease = batch.lease_s
    unknown = sorted(set(batch.wats) - set(WATS))
    problem = (f"weights: unknown WAT {unknown}" if unknown
               else None if isinstance(lease, (int, float)) and not isinstance(lease, bool)
               and 1 <= lease <= 3600 else f"lease_s: {lease!r} is not within 1..3600")
    if problem is None and not 0 <= issued_at_ms <= _MAX_SAFE_INT:
        problem = f"issued_at_ms: {issued_at_ms} is out of range"
    if problem is not None:
        return EncodedWeights([], [], [], {i: PayloadError("schema", problem) for i in range(n)})
    for name in DIRECTIONS:
        _check_direction(batch.direction(name), name, refused)
    ids = batch.cpe_ids
    for i, cpe_id in enumerate(ids):
        try:
            weights_topic(cpe_id)
        except PayloadError as exc:
            refused[i] = exc
        except TypeError:
            refused[i] = PayloadError("bad-cpe-id", f"{cpe_id!r} is not a valid cpe_id")
    rows = [i for i in range(n) if i not in refused] if refused else list(range(n))
    versions = take_versions([ids[i] for i in rows])
    # A version store corrupted or at its end (looked for row by row only when min or max
    # says a version is out of range).
    if versions and (min(versions) < 1 or max(versions) > _MAX_SAFE_INT):
        for i, v in zip(rows, versions, strict=True):
            if not 1 <= v <= _MAX_SAFE_INT:
                refused[i] = PayloadError("schema", f"version: {v} is out of range")
    if len(refused) > n - len(rows):
        keep = [(i, v) for i, v in zip(rows, versions, strict=True) if i not in refused]
        rows, versions = [i for i, _ in keep], [v for _, v in keep]
    lease_text = _ENCODE_FLOAT(lease) if isinstance(lease, float) else str(int(lease))
    head = (f'"issued_at_ms":{int(issued_at_ms)},"lease_s":{lease_text},'
            f'"schema":"{SCHEMA_IDS["weights"]}"')
    payloads = _messages(batch, np.array(rows, dtype=np.intp), versions, head)
    return EncodedWeights(rows, versions, payloads, refused)


def _messages(batch: WeightBatch, sel: NDArray[np.intp], versions: list[int], head: str
              ) -> list[bytes]:
    """The messages of rows ``sel`` (``versions`` in the same order), in that order.

    A tick's messages differ in few ways: which WATs each set names, its mode and reason.
    Rows alike in all of these in both directions share one format string of the whole
    message (one ``format`` call per message, with the cpe_id, the weights and the version);
    a row with rate caps in either direction is written from its two direction objects.
    """
    n = len(sel)
    out: list[bytes] = [b""] * n
    if n == 0:
        return out
    wats = batch.wats
    order = sorted(range(len(wats)), key=lambda j: wats[j])
    ids = batch.cpe_ids
    version = np.array(versions, dtype=np.int64)
    capped = np.zeros(n, dtype=bool)
    for d in (batch.dl, batch.ul):
        if d.caps_mbps is not None:
            capped |= ~np.isnan(np.asarray(d.caps_mbps, dtype=np.float64)[sel]).all(axis=1)
    at_caps = np.flatnonzero(capped)
    if len(at_caps):
        some = sel[at_caps]
        dl = _direction_objects(batch.dl, wats, some)
        ul = _direction_objects(batch.ul, wats, some)
        for b, a in enumerate(at_caps.tolist()):
            out[a] = (f'{{"cpe_id":"{ids[int(sel[a])]}","dl":{dl[b]},{head},"ul":{ul[b]},'
                      f'"version":{versions[a]}}}').encode()
        if len(at_caps) == n:
            return out
    plain = np.flatnonzero(~capped)
    rows = sel[plain]
    pick = rows.tolist()
    # Per direction: a code of the WATs named (bit b: the b-th WAT in sorted order) and of
    # the (mode, reason) pair, numbered in C (dict.fromkeys, map) rather than row by row.
    bits = 1 << np.arange(len(order))
    pairs = []
    for d in (batch.dl, batch.ul):
        modes, reasons = np.asarray(d.modes, dtype=object), np.asarray(d.reasons, dtype=object)
        pairs.append(list(zip(modes[rows].tolist(), reasons[rows].tolist(), strict=True)))
    heads = {pair: code for code, pair in
             enumerate(dict.fromkeys(pairs[0]) | dict.fromkeys(pairs[1]))}
    codes = []
    for d, pair in zip((batch.dl, batch.ul), pairs, strict=True):
        codes += [d.present[rows][:, order] @ bits,
                  np.fromiter(map(heads.__getitem__, pair), dtype=np.int64, count=len(pair))]
    p, h = 1 << len(order), len(heads)
    key = ((codes[0] * p + codes[2]) * h + codes[1]) * h + codes[3]
    by_group = np.argsort(key, kind="stable")
    ordered = key[by_group]
    ends = [*(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(key)]
    head_of = list(heads)
    # Bytes formatting with %: a third of str.format and encode (ids are ASCII by the
    # cpe_id pattern, reasons ASCII as json.dumps escapes them, names and modes known).
    ids_b = np.array("\0".join([ids[i] for i in pick]).encode().split(b"\0"), dtype=object)
    literal = head.encode().replace(b"%", b"%%")
    start = 0
    for end in ends:
        at = by_group[start:end]
        start = end
        first = int(at[0])
        parts, columns = [], []
        for name, d, pat, txt in (("dl", batch.dl, codes[0], codes[1]),
                                  ("ul", batch.ul, codes[2], codes[3])):
            cols = [order[b] for b in range(len(order)) if int(pat[first]) >> b & 1]
            mode, reason = head_of[int(txt[first])]
            fixed = (f'"{name}":{{"mode":"{mode}","reason":{json.dumps(reason[:256])},'
                     '"weights":{')
            parts.append(fixed.encode().replace(b"%", b"%%")
                         + ",".join(f'"{wats[j]}":%d' for j in cols).encode() + b"}}")
            columns += d.weights[rows[at]][:, cols].T.tolist()
        fmt = b'{"cpe_id":"%s",' + parts[0] + b"," + literal + b"," + parts[1] + b',"version":%d}'
        texts = map(fmt.__mod__, zip(ids_b[at].tolist(), *columns,
                                     version[plain[at]].tolist(), strict=True))
        for a, t in zip(plain[at].tolist(), texts, strict=True):
            out[a] = t
    return out


def _check_direction(d: DirectionBatch, name: str, refused: dict[int, PayloadError]) -> None:
    """Refuse the rows whose set of direction ``name`` may not be sent (first reason wins)."""
    w, present = d.weights, d.present
    for i in np.flatnonzero(~(present & (w > 0)).any(axis=1)).tolist():
        refused.setdefault(i, PayloadError("schema", f"{name}.weights: no WAT has a weight "
                                           "above 0"))
    for i in np.flatnonzero((present & ((w < 0) | (w > MAX_WEIGHT))).any(axis=1)).tolist():
        refused.setdefault(i, PayloadError("schema", f"{name}.weights: "
                                           f"{w[i][present[i]].tolist()} are not all within "
                                           f"0..{MAX_WEIGHT}"))
    for i, mode in enumerate(d.modes):
        if mode not in MODES:
            refused.setdefault(i, PayloadError("schema", f"{name}.mode: {mode!r} is not one "
                                               f"of {list(MODES)}"))
    if d.caps_mbps is None:
        return
    caps = np.asarray(d.caps_mbps, dtype=np.float64)
    has = ~np.isnan(caps)
    # The schema's bounds, and the contract that only a WAT with a weight above 0 is capped
    # (weight 0 is off, not capped: a cap there would contradict the set).
    with np.errstate(invalid="ignore"):
        bad = has & ~((caps >= CAP_MIN_MBPS) & (caps <= CAP_MAX_MBPS))
    for i in np.flatnonzero(bad.any(axis=1)).tolist():
        refused.setdefault(i, PayloadError("schema", f"{name}.caps_mbps: "
                                           f"{caps[i][has[i]].tolist()} are not all within "
                                           f"[{CAP_MIN_MBPS:g}, {CAP_MAX_MBPS:g}]"))
    for i in np.flatnonzero((has & ~(present & (w > 0))).any(axis=1)).tolist():
        refused.setdefault(i, PayloadError("schema", f"{name}.caps_mbps: a cap on a WAT "
                                           "that is not in the set or has weight 0"))


def _direction_objects(d: DirectionBatch, wats: tuple[str, ...], sel: NDArray[np.intp]
                       ) -> list[str]:
    """The ``{"mode":..,"reason":..,"weights":{..}}`` object of rows ``sel`` of one direction,
    in sorted key order; one format string per presence pattern (few)."""
    order = sorted(range(len(wats)), key=lambda j: wats[j])
    pattern = d.present[sel][:, order] @ (1 << np.arange(len(order)))
    inner: list[str] = [""] * len(sel)
    for code in np.unique(pattern).tolist():
        cols = [order[b] for b in range(len(order)) if code >> b & 1]
        fmt = ",".join(f'"{wats[j]}":{{}}' for j in cols)
        at = np.flatnonzero(pattern == code)
        for a, vals in zip(at.tolist(), d.weights[sel[at]][:, cols].tolist(), strict=True):
            inner[a] = fmt.format(*vals)
    # One head per (mode, reason): a tick has few of either.
    heads: dict[tuple[str, str], str] = {}
    modes, texts = d.modes, d.reasons
    caps = _caps_objects(d, wats, sel, order)
    out = []
    for a, i in enumerate(sel.tolist()):
        key = (modes[i], texts[i])
        head = heads.get(key)
        if head is None:
            head = heads[key] = (f'"mode":"{key[0]}","reason":{json.dumps(key[1][:256])},'
                                 '"weights":{')
        out.append("{" + caps[a] + head + inner[a] + "}}" if caps else
                   "{" + head + inner[a] + "}}")
    return out


def _caps_objects(d: DirectionBatch, wats: tuple[str, ...], sel: NDArray[np.intp],
                  order: list[int]) -> list[str]:
    """Per row of ``sel``: ``"caps_mbps":{..},`` (sorted keys; the first key of the direction
    object) or "" for a row without caps; an empty list when no row has any."""
    if d.caps_mbps is None:
        return []
    caps = np.asarray(d.caps_mbps, dtype=np.float64)[sel][:, order]
    has = ~np.isnan(caps)
    if not has.any():
        return []
    out = [""] * len(sel)
    names = [wats[j] for j in order]
    for a in np.flatnonzero(has.any(axis=1)).tolist():
        # float.__repr__ is what json.dumps writes for a finite float.
        out[a] = '"caps_mbps":{' + ",".join(
            f'"{names[b]}":{_ENCODE_FLOAT(float(v))}'
            for b, (v, h) in enumerate(zip(caps[a].tolist(), has[a].tolist(), strict=True))
            if h) + "},"
    return out


def single_batch(cpe_id: str, dl: Choice, ul: Choice | None, lease_s: float) -> WeightBatch:
    """A batch of one CPE (``ul`` None: the same as ``dl``); a WAT no message may name raises
    :class:`PayloadError`."""
    try:
        return WeightBatch.of([(cpe_id, dl, ul if ul is not None else dl)], lease_s)
    except ValueError as exc:
        raise PayloadError("schema", f"weights: {exc}") from None


def build_weights(cpe_id: str, version: int, decision: WeightDecision, *, mode: str,
                  lease_s: float, issued_at_ms: int, ul: Choice | None = None
                  ) -> dict[str, Any]:
    """The ``mcw.weights.v2`` document of one CPE (the batch path with one row, checked
    against the schema again): ``dl`` is ``decision`` under ``mode``, ``ul`` the same unless
    given as ``(decision, mode)``.

    Raises :class:`PayloadError` for weights that may never be sent (all zero, out of range,
    unknown WAT) so nothing invalid leaves the xApp.
    """
    out = encode_weights_batch(single_batch(cpe_id, (decision, mode), ul, lease_s),
                               issued_at_ms, lambda ids: [version] * len(ids))
    if out.refused:
        raise out.refused[0]
    doc: dict[str, Any] = json.loads(out.payloads[0])
    check("weights", doc)
    return doc


def encode(doc: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, the wire form of every payload."""
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class DropCounter:
    """Counts (and logs) payloads dropped per (kind, reason); safe for concurrent use.

    Every drop is counted; the log is rate-limited per (kind, reason): the first drop at once,
    then at most one line per ``log_interval_s`` saying how many were not logged in between,
    so a CPE flooding garbage costs a line every few seconds, not one per message.
    """

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    log_interval_s: float = 10.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _logged_at: dict[tuple[str, str], float] = field(default_factory=dict, repr=False)
    _unlogged: Counter[tuple[str, str]] = field(default_factory=Counter, repr=False)

    def drop(self, kind: str, reason: str, detail: str, topic_name: str = "", *,
             exc_info: BaseException | None = None) -> None:
        key = (kind, reason)
        now = self.clock()
        with self._lock:
            self.counts[key] += 1
            last = self._logged_at.get(key)
            if last is not None and now - last < self.log_interval_s:
                self._unlogged[key] += 1
                return
            self._logged_at[key] = now
            skipped = self._unlogged.pop(key, 0)
        # Outside bytes end up in the detail (a schema message quotes the value): bounded.
        log.warning("dropped %s payload on %r: %s: %s%s", kind, topic_name[:_LOG_CHARS], reason,
                    detail[:_LOG_CHARS],
                    f" (and {skipped} more since the last report)" if skipped else "",
                    exc_info=exc_info)

    def total(self, kind: str | None = None) -> int:
        with self._lock:
            return sum(n for (k, _), n in self.counts.items() if kind is None or k == kind)

    def snapshot(self) -> dict[str, int]:
        """``{"kind/reason": count}`` for metrics and ``--json`` output."""
        with self._lock:
            return {f"{k}/{r}": n for (k, r), n in sorted(self.counts.items())}


_LOG_CHARS: Final = 300


def decode(topic_name: str, payload: bytes, drops: DropCounter,
           topic: ChannelTopic | None = None) -> tuple[Kind, dict[str, Any]] | None:
    """Parse and validate a received message; None (counted, logged) when it must be dropped.
    ``topic`` is ``parse_channel_topic(topic_name)`` when the caller has parsed it already.

    Never raises: any agent can publish any bytes on its own topics with its own certificate,
    and this runs on the thread that receives every agent's messages.

    Reasons: ``bad-topic``, ``too-large`` (over :data:`RECEIVE_LIMITS`), ``bad-json`` (not
    UTF-8, not JSON, nested too deep, a number out of range, ``NaN``/``Infinity``, a lone
    surrogate escape), ``schema``, ``cpe-id-mismatch`` (the topic's cpe_id differs from the
    payload's: an agent may only speak for its CPE), ``proxy-id-mismatch`` (the same for the
    proxy id: a proxy may only speak for itself), ``role-mismatch`` (a state of role proxy on a
    CPE topic, or of role cpe on a proxy topic), ``bad-address`` (a WAT address no CPE can own:
    :func:`wat_address_problem`), ``internal`` (a bug here: counted, not
    raised).  The kind of a proxy's own state is ``proxy-state``; a proxy's per-CPE state and
    telemetry are ``state`` and ``telemetry`` with the ``proxy_id`` in the document.
    """
    kind: str = "unknown"
    try:
        parsed = parse_channel_topic(topic_name) if topic is None else topic
        if parsed is None:
            drops.drop(kind, "bad-topic", "not a channel topic", topic_name)
            return None
        kind = parsed.kind
        return _decode(parsed, topic_name, payload, drops)
    except Exception as exc:
        drops.drop(kind, "internal", f"{type(exc).__name__}: {exc}", topic_name, exc_info=exc)
        return None


def _decode(t: ChannelTopic, topic_name: str, payload: bytes, drops: DropCounter
            ) -> tuple[Kind, dict[str, Any]] | None:
    kind = t.kind
    limits = RECEIVE_LIMITS[kind]
    if len(payload) > limits.max_bytes:
        drops.drop(kind, "too-large", f"{len(payload)} bytes, at most {limits.max_bytes}",
                   topic_name)
        return None
    try:
        doc = loads(payload, limits)
        # "\ud800" is valid JSON but no Unicode string: it would fail later, when a string of
        # the document is encoded for Redis or InfluxDB, far from here. Only escapes make one.
        if b"\\u" in payload:
            json.dumps(doc, ensure_ascii=False).encode()
    except (BoundedJsonError, UnicodeEncodeError) as exc:
        drops.drop(kind, "bad-json", str(exc), topic_name)
        return None
    problem = _first_error(kind, doc)
    if problem is not None:
        drops.drop(kind, "schema", problem, topic_name)
        return None
    if t.cpe_id is not None and doc["cpe_id"] != t.cpe_id:
        drops.drop(kind, "cpe-id-mismatch", f"payload cpe_id {doc['cpe_id']!r}", topic_name)
        return None
    if t.proxy_id is not None and doc.get("proxy_id") != t.proxy_id:
        drops.drop(kind, "proxy-id-mismatch", f"payload proxy_id {doc.get('proxy_id')!r}",
                   topic_name)
        return None
    if t.proxy_id is None and "proxy_id" in doc:
        drops.drop(kind, "proxy-id-mismatch", "a proxy_id on a CPE topic", topic_name)
        return None
    if kind == "state" and doc.get("role", "proxy" if t.proxy_id else "cpe") != (
            "proxy" if t.proxy_id else "cpe"):
        drops.drop(kind, "role-mismatch", f"role {doc.get('role')!r}", topic_name)
        return None
    if kind == "state":
        for wat, text in doc.get("addresses", {}).items():
            problem = wat_address_problem(text)
            if problem is not None:
                drops.drop(kind, "bad-address", f"{wat}: {problem}", topic_name)
                return None
    return kind, doc


def wat_address_problem(text: str) -> str | None:
    """Why ``text`` cannot be one CPE's own WAT address (None: it can), as the proxy agent
    decides it (kernel-agent ``payload.CheckWATAddr``): a proxy writes a rule matching the
    address, so a form matching other hosts' traffic (unspecified = the WRR kernel's wildcard,
    multicast, broadcast), the proxy itself (loopback) or a second spelling of an IPv4 address
    (IPv4-mapped IPv6) would let a CPE steer traffic that is not its own."""
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return f"{text!r} is not an IP address"
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return f"{text} is IPv4-mapped"
    if addr.is_unspecified or addr.is_loopback or addr.is_multicast:
        return f"{text} is unspecified, loopback or multicast"
    if addr == ipaddress.IPv4Address("255.255.255.255"):
        return f"{text} is the broadcast address"
    return None
