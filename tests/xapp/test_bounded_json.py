"""The bounded JSON parser: the same answers as ``json.loads`` inside the limits, one error type
outside them, and linear time on hostile text."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xapp.bounded_json import BoundedJsonError, JsonLimits, loads

LIMITS = JsonLimits(max_bytes=4096, max_depth=8, max_int_digits=20)

# JSON values within LIMITS: depth at most 4 (the recursion below), short numbers.
scalars = (st.none() | st.booleans() | st.integers(-(10**18), 10**18)
           | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e50, max_value=1e50)
           | st.text(max_size=20))
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_documents_within_limits_parse_as_the_standard_library_does(doc: object) -> None:
    text = json.dumps(doc)
    assert loads(text, LIMITS) == json.loads(text)
    assert loads(text.encode(), LIMITS) == json.loads(text)


# Keys and strings rich in colons, quotes and non-ASCII, written without escapes where JSON
# allows: the fast path's duplicate check counts colons.
colon_text = st.text(alphabet=': "é\\x{}[],', max_size=8)
colon_documents = st.recursive(
    scalars | colon_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(colon_text, inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(colon_documents, st.sampled_from([(",", ":"), (", ", ": "), (",", " : ")]))
def test_unescaped_documents_parse_as_the_standard_library_does(
        doc: object, separators: tuple[str, str]) -> None:
    # The fast path (no \\u escape): the same values and the same types (repr tells 1 from 1.0).
    text = json.dumps(doc, ensure_ascii=False, separators=separators)
    assert repr(loads(text, LIMITS)) == repr(json.loads(text))


@pytest.mark.parametrize("digits", [18, 19, 20])
def test_long_integers_stay_integers(digits: int) -> None:
    n = int("9" * digits)
    for text in (f"[{n}]", f"[-{n}]"):
        value = loads(text, LIMITS)[0]
        assert type(value) is int and abs(value) == n


JSONISH = '[]{}",:0123456789.eE+-\\ntrufalsN'


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=512) | st.text(alphabet=JSONISH, max_size=512))
def test_any_bytes_parse_or_raise_the_one_error(data: bytes | str) -> None:
    with contextlib.suppress(BoundedJsonError):
        loads(data, LIMITS)


@pytest.mark.parametrize("text, why", [
    ("[" * 2000 + "]" * 2000, "nested deeper"),
    ('{"a":' * 9 + "1" + "}" * 9, "nested deeper"),
    ("[" * 150 + "]" * 150, "nested deeper"),  # counted on the parsed document
    ("[" * 201 + "]" * 201, "nested deeper"),  # counted on the text first
    ("[1e+999]", "out of range"),
    ("[" + "9" * 500 + "]", "out of range"),
    ("-" + "1" * 21, "out of range"),
    ("1e999", "out of range"),
    ("[1E+400]", "out of range"),
    ("NaN", "not JSON"),
    ("[Infinity]", "not JSON"),
    (b"\xff\xfe[]", "not UTF-8"),
    (b" " * 5000, "exceeds"),
])
def test_hostile_documents_are_refused_with_a_reason(text: str | bytes, why: str) -> None:
    with pytest.raises(BoundedJsonError, match=why):
        loads(text, LIMITS)


@pytest.mark.parametrize("width", [3, 150, 300])
def test_wide_shallow_documents_parse(width: int) -> None:
    # Many brackets, depth 3: the bracket count alone must not refuse them, on either path.
    doc = {"wats": [{"dl": {"cpe": f"cpe-{i:04d}", "x": 1e-300}} for i in range(width)]}
    assert loads(json.dumps(doc), JsonLimits(max_depth=4)) == doc


def test_brackets_and_digits_inside_strings_do_not_count() -> None:
    doc = {"s": "[" * 100 + "1" * 100, "cpe": "cpe-000000000000000000000001"}
    assert loads(json.dumps(doc), LIMITS) == doc


@pytest.mark.parametrize("text", [
    '"' + '\\"' * 200_000 + "\\",      # a plain string regex retries from every quote
    '"' * 400_000,
    "[" * 400_000,
])
def test_hostile_text_is_refused_in_linear_time(text: str) -> None:
    # This thread's CPU time, which load elsewhere does not stretch; quadratic takes minutes.
    t0 = time.thread_time()
    with pytest.raises(BoundedJsonError):
        loads(text, JsonLimits(max_bytes=1 << 20))
    assert time.thread_time() - t0 < 1.0


@pytest.mark.parametrize("text", [
    '{"cpe_id": "cpe-0002", "cpe_id": "cpe-0001"}',
    '{"a": {"nr": 1, "wifi": 2, "nr": 3}}',
    '[{"x": 1}, {"y": 1, "y": 1}]',
    '{"k": 1, "k": 1}',
    '{"k":1,"k" :2}',
    '{"a":"x:y","a":"x:y"}',
    '{"a":{"b:":":"},"a":1,"c":"::"}',
    '{"a":1,"a":2,"x":"\\u003a"}',  # an escaped colon in place of the lost key's
    '{"a":1,"a":2,"x":"\\u003A"}',
])
def test_a_key_twice_in_one_object_is_refused(text: str) -> None:
    # json.loads keeps the last; a reader that keeps the first would see another document.
    assert isinstance(json.loads(text), dict | list)
    with pytest.raises(BoundedJsonError, match="duplicate key"):
        loads(text)
    with pytest.raises(BoundedJsonError, match="duplicate key"):
        loads(text.encode())


def test_keys_are_compared_exactly() -> None:
    # No case folding: "DL" and "dl" are two keys (the schema then refuses the unknown one).
    assert loads('{"dl": 1, "DL": 2, "a": {"x": 1}, "b": {"x": 2}}') == {
        "dl": 1, "DL": 2, "a": {"x": 1}, "b": {"x": 2}}
