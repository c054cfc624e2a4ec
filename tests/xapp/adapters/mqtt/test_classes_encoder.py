"""Traffic classes on the channel (issue 35): ``classes`` in the weights, encoded byte-identically
to the reference encoder and valid against ``schemas/mqtt-weights.schema.json`` (refused when
the schema forbids them)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.xapp.adapters.mqtt.test_payloads import reference_valid
from xapp.adapters.mqtt.payloads import check, encode
from xapp.adapters.mqtt.weights_encoder import encode_weights_batch
from xapp.core.class_columns import ClassColumns, ClassSpec
from xapp.core.ports import DirectionBatch, WeightBatch
from xapp.core.traffic import TrafficMatch

NAN = math.nan
WATS = ("nr", "lte", "wifi", "lifi")
VOICE = ClassSpec("voice", TrafficMatch(protocols=(17,), ports=((5060, 5061),), dscp=(46,)),
                  "smallest_delay", True)
BULK = ClassSpec("bulk", TrafficMatch(prefixes=("2001:db8::/32",), cgroup="/backup.slice"),
                 "load_balancing", False)


def _batch(weights: list[list[int]], specs: list[tuple[ClassSpec, ...]],
           class_weights: list[list[list[int]]], class_caps: list[list[list[float]]] | None = None,
           mode: str = "priority") -> WeightBatch:
    w = np.array(weights, dtype=np.int64)
    n = len(w)
    present = np.ones_like(w, dtype=bool)
    classes = ClassColumns.empty(n, len(WATS))
    for i, (row_specs, row_w) in enumerate(zip(specs, class_weights, strict=True)):
        classes.specs[i] = row_specs
        for c, cw in enumerate(row_w):
            classes.weights[i, c] = cw
            classes.reasons[i, c] = f"why {c}"
            if class_caps is not None:
                classes.caps[i, c] = class_caps[i][c]
    ul = DirectionBatch(w, present, present.copy(), np.zeros(n), [mode] * n, ["test"] * n,
                        ["default"] * n, None, classes)
    dl = DirectionBatch(w, present, present.copy(), np.zeros(n), ["load_balancing"] * n,
                        ["test"] * n, ["default"] * n)
    return WeightBatch([f"cpe-{i}" for i in range(n)], dl, ul, 30.0, WATS)


def _encode(batch: WeightBatch):  # type: ignore[no-untyped-def]
    return encode_weights_batch(batch, 1000, lambda ids: list(range(1, len(ids) + 1)))


def test_classes_are_encoded_as_the_reference_encoder_does_and_validate() -> None:
    out = _encode(_batch(
        [[70, 0, 30, 0], [1, 1, 1, 1], [5, 0, 5, 0]],
        [(VOICE, BULK), (), (BULK,)],
        [[[0, 0, 100, 0], [70, 0, 30, 0]], [], [[1, 0, 0, 0]]],
        [[[NAN, NAN, 100000.0, NAN], [NAN] * 4], [], [[9.5, NAN, NAN, NAN]]]))
    assert out.refused == {}
    docs = [json.loads(p) for p in out.payloads]
    for payload, doc in zip(out.payloads, docs, strict=True):
        check("weights", doc)
        assert payload == encode(doc)
    voice, bulk = docs[0]["ul"]["classes"]
    assert voice == {"name": "voice", "mode": "smallest_delay", "urgent": True,
                     "reason": "why 0",
                     "match": {"protocols": [17], "remote_ports": [[5060, 5061]], "dscp": [46]},
                     "weights": {"nr": 0, "lte": 0, "wifi": 100, "lifi": 0},
                     "caps_mbps": {"wifi": 100000.0}}
    assert bulk["match"] == {"remote_prefixes": ["2001:db8::/32"], "cgroup": "/backup.slice"}
    assert "urgent" not in bulk and "caps_mbps" not in bulk
    assert "classes" not in docs[1]["ul"]  # a row without classes is as before
    assert docs[2]["ul"]["classes"][0]["caps_mbps"] == {"nr": 9.5}
    assert all("classes" not in d["dl"] for d in docs)


def test_no_classes_is_byte_identical_to_before() -> None:
    w = [[70, 30, 0, 0], [1, 2, 3, 4]]
    plain = _encode(_batch(w, [(), ()], [[], []]))
    b = _batch(w, [(), ()], [[], []])
    before = WeightBatch(b.cpe_ids, b.dl, DirectionBatch(
        b.ul.weights, b.ul.present, b.ul.usable, b.ul.aggregate_mbps, b.ul.modes,
        b.ul.reasons, b.ul.sources), b.lease_s, b.wats)
    assert plain.payloads == _encode(before).payloads


@pytest.mark.parametrize(("class_weights", "caps", "match"), [
    ([[0, 0, 0, 0]], None, "no WAT with a weight above 0"),
    ([[0, 0, 256, 0]], None, "within 0..255"),
    ([[0, 0, 5, 0]], [[3.0, NAN, NAN, NAN]], "weight 0"),
    ([[0, 0, 5, 0]], [[NAN, NAN, 0.01, NAN]], "within"),
])
def test_bad_classes_are_refused_and_take_no_version(class_weights: list[list[int]],
                                                     caps: list[list[float]] | None,
                                                     match: str) -> None:
    out = _encode(_batch([[1, 0, 1, 0], [1, 0, 1, 0]], [(VOICE,), ()],
                         [class_weights, []], None if caps is None else [caps, []]))
    assert list(out.refused) == [0] and match in str(out.refused[0])
    assert out.rows == [1] and out.versions == [1]


def test_a_name_twice_is_refused() -> None:
    out = _encode(_batch([[1, 0, 1, 0]], [(VOICE, VOICE)], [[[1, 0, 0, 0], [1, 0, 0, 0]]]))
    assert list(out.refused) == [0] and "name twice" in str(out.refused[0])


_CLASS = st.tuples(st.lists(st.integers(-1, 256), min_size=4, max_size=4),
                   st.lists(st.one_of(st.just(NAN), st.floats(0.001, 2e5, allow_nan=False)),
                            min_size=4, max_size=4),
                   st.booleans(), st.sampled_from(["priority", "smallest_delay", "active_standby"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_CLASS, min_size=0, max_size=8), st.lists(st.integers(0, 255), min_size=4,
                                                          max_size=4))
def test_classes_sent_exactly_when_the_schema_accepts_them(
        classes: list[tuple[list[int], list[float], bool, str]], weights: list[int]) -> None:
    specs = tuple(ClassSpec(f"c{i}", TrafficMatch(dscp=(i,)), mode, urgent)
                  for i, (_, _, urgent, mode) in enumerate(classes))
    batch = _batch([weights], [specs], [[c[0] for c in classes]], [[c[1] for c in classes]])
    out = _encode(batch)
    doc: dict[str, Any] = {
        "schema": "mcw.weights.v2", "cpe_id": "cpe-0", "version": 1, "issued_at_ms": 1000,
        "lease_s": 30.0,
        "dl": {"mode": "load_balancing", "reason": "test", "weights": dict(zip(WATS, weights,
                                                                             strict=True))},
        "ul": {"mode": "priority", "reason": "test",
               "weights": dict(zip(WATS, weights, strict=True))}}
    if specs:
        doc["ul"]["classes"] = [
            {"name": s.name, "match": {"dscp": list(s.match.dscp)}, "mode": s.mode,
             "reason": f"why {c}", "weights": dict(zip(WATS, cw, strict=True)),
             **({"caps_mbps": {w: v for w, v in zip(WATS, caps, strict=True)
                               if not math.isnan(v)}}
                if not all(math.isnan(v) for v in caps) else {}),
             **({"urgent": True} if s.urgent else {})}
            for c, (s, (cw, caps, _, _)) in enumerate(zip(specs, classes, strict=True))]
    # The schema, and the contract it states in words: a WAT at weight 0 is off, not capped.
    valid = reference_valid("weights", doc) and not any(
        not math.isnan(v) and w <= 0 for cw, caps, _, _ in classes
        for w, v in zip(cw, caps, strict=True))
    if out.payloads:
        assert valid, doc
        assert out.payloads[0] == encode(doc)
    else:
        assert not valid, (doc, out.refused)


def test_classes_that_could_exceed_the_channel_are_refused_before_a_version() -> None:
    # A policy this wide is refused when given; the encoder guards the broker connection anyway.
    wide = TrafficMatch(prefixes=tuple(f"2001:db8:{j:x}::/48" for j in range(16)),
                        ports=tuple((1000 + j, 2000 + j) for j in range(16)))
    specs = tuple(ClassSpec(f"c{i}", wide, "priority", False) for i in range(8))
    b = _batch([[1, 0, 1, 0], [1, 0, 1, 0]], [specs, (VOICE,)],
               [[[1, 0, 0, 0]] * 8, [[0, 0, 1, 0]]])
    # The same classes in both directions: twice what one direction's take.
    both = WeightBatch(b.cpe_ids, DirectionBatch(
        b.dl.weights, b.dl.present, b.dl.usable, b.dl.aggregate_mbps, b.dl.modes, b.dl.reasons,
        b.dl.sources, None, b.ul.classes), b.ul, b.lease_s, b.wats)
    out = _encode(both)
    assert list(out.refused) == [0] and out.refused[0].reason == "too-large"
    assert out.rows == [1] and out.versions == [1]
    assert _encode(b).refused == {}  # one direction's fits
