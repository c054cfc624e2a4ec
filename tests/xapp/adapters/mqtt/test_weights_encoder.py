"""The weights messages, one at a time and a batch at a time, against the schema and JSON."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.xapp.adapters.mqtt.conftest import decision
from tests.xapp.adapters.mqtt.test_payloads import reference_valid
from xapp.adapters.mqtt import PayloadError, build_weights
from xapp.adapters.mqtt.payloads import encode
from xapp.adapters.mqtt.weights_encoder import encode_weights_batch
from xapp.core.ports import WeightBatch


def test_build_weights_from_a_decision() -> None:
    doc = build_weights("cpe-0007", 3, decision({"nr": 30, "wifi": 100, "lifi": 0}),
                        mode="fixed_split", lease_s=30, issued_at_ms=5)
    assert doc["schema"] == "mcw.weights.v2"
    assert doc["dl"]["weights"] == doc["ul"]["weights"] == {"nr": 30, "wifi": 100, "lifi": 0}
    assert (doc["version"], doc["dl"]["mode"], doc["cpe_id"]) == (3, "fixed_split", "cpe-0007")
    both = build_weights("cpe-0007", 4, decision({"nr": 30, "wifi": 100}), mode="fixed_split",
                         lease_s=30, issued_at_ms=5,
                         ul=(decision({"nr": 0, "lte": 7}, "up"), "active_standby"))
    assert both["dl"] == {"mode": "fixed_split", "reason": "test",
                          "weights": {"nr": 30, "wifi": 100}}
    assert both["ul"] == {"mode": "active_standby", "reason": "up",
                          "weights": {"nr": 0, "lte": 7}}
    for dl, ul in [({"nr": 0, "wifi": 0}, None), ({"nr": 1}, {"nr": 0}),
                   ({"nr": 1}, {"nr": 256})]:
        with pytest.raises(PayloadError):
            build_weights("cpe-0007", 3, decision(dl), mode="fixed_split", lease_s=30,
                          issued_at_ms=5,
                          ul=None if ul is None else (decision(ul), "fixed_split"))


_ROW = st.fixed_dictionaries({
    "weights": st.dictionaries(st.sampled_from(["nr", "lte", "wifi", "lifi"]),
                               st.integers(-2, 258), max_size=4),
    "mode": st.sampled_from(["load_balancing", "fixed_split", "active_standby",
                             "latency_bound", "sideways"]),
    "cpe_id": st.one_of(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"),
                        st.sampled_from(["", "a/b", "+", "x" * 65, "cpe\n"])),
    "reason": st.text(max_size=300),
})


_UL = st.fixed_dictionaries({
    "weights": st.dictionaries(st.sampled_from(["nr", "lte", "wifi", "lifi"]),
                               st.integers(-2, 258), max_size=4),
    "mode": st.sampled_from(["load_balancing", "fixed_split", "sideways"]),
    "reason": st.text(max_size=300),
})


@given(rows=st.lists(st.tuples(_ROW, _UL), min_size=1, max_size=6,
                     unique_by=lambda r: str(r[0]["cpe_id"])),
       lease=st.one_of(st.floats(-1, 4000, allow_nan=False), st.integers(-1, 4000)),
       first_version=st.integers(1, 2**53 + 3), issued=st.integers(-1, 2**53))
@settings(max_examples=400, deadline=None)
def test_batch_encoding_matches_the_schema_and_json(
        rows: list[tuple[dict[str, Any], dict[str, Any]]], lease: float, first_version: int,
        issued: int) -> None:
    """Every row is refused exactly when its document fails the reference validator, and a
    row that is sent is byte-identical to the sorted-keys JSON of that document."""
    batch = WeightBatch.of([(r["cpe_id"], (decision(r["weights"], r["reason"]), r["mode"]),
                             (decision(u["weights"], u["reason"]), u["mode"]))
                            for r, u in rows], lease)
    taken: list[str] = []

    def take(ids: list[str]) -> list[int]:
        taken.extend(ids)
        return list(range(first_version, first_version + len(ids)))

    out = encode_weights_batch(batch, issued, take)
    versions = dict(zip(taken, range(first_version, first_version + len(taken)), strict=False))
    sent = dict(zip(out.rows, out.payloads, strict=True))
    assert set(sent) | set(out.refused) == set(range(len(rows)))
    assert not set(sent) & set(out.refused)
    for i, (r, u) in enumerate(rows):
        version = versions.get(r["cpe_id"], first_version)
        doc = {"schema": "mcw.weights.v2", "cpe_id": r["cpe_id"], "version": version,
               "issued_at_ms": issued, "lease_s": lease,
               "dl": {"mode": r["mode"], "reason": r["reason"][:256], "weights": r["weights"]},
               "ul": {"mode": u["mode"], "reason": u["reason"][:256], "weights": u["weights"]}}
        # Python's ``re`` lets "$" match before a final newline; ECMA-262 (the schema's
        # dialect, and Go's regexp) does not: such an id is invalid.
        valid = reference_valid("weights", doc) and not r["cpe_id"].endswith("\n")
        if i in sent:
            assert valid, doc
            assert sent[i] == encode(doc)
        elif r["cpe_id"] in taken and "version" in str(out.refused[i]):
            assert not 1 <= version <= 2**53 - 1  # refused after a version was taken
        else:
            assert not valid, (doc, out.refused[i])
