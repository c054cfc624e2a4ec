"""JSON from outside the process, bounded before it is parsed.

Every document the xApp takes from another party (A1 requests, agent messages, the config
file) goes through :func:`loads`.  The standard library's parser is correct but unbounded in
three ways that matter to a long-running process:

* **Depth.** A document nested a few thousand levels deep makes ``json.loads`` raise
  ``RecursionError`` (not ``ValueError``), and anything that walks the result recursively
  (``jsonschema``) overflows the stack further down.  A document with few brackets cannot be
  deep: its depth is counted on the parsed result (a walk of its containers, a few µs).  One
  with more brackets than the parser's recursion could take has its depth counted on the raw
  text first, with strings blanked out, before the parser sees it.
* **Number size.** ``int`` parsing is quadratic in the number of digits and an integer of
  hundreds of digits overflows ``float()`` later (``OverflowError``, not ``ValueError``);
  ``1e999`` parses as ``inf``.  Digit runs are limited, positive exponents have at most two
  digits (every float is finite, below 1e100), and ``NaN``/``Infinity`` (not JSON) are refused.
* **Size.** Bytes are counted before decoding.
* **Duplicate keys.** ``json.loads`` keeps the last of a key given twice in one object, Go's
  ``encoding/json`` too, other readers the first: a document read differently by two parties
  (``{"cpe_id": "victim", "cpe_id": "me"}``) is refused instead, as the agent refuses it
  (``kernel-agent/payload/strict.go``).  Keys are compared exactly: ``"DL"`` is not ``"dl"``.

Agents send ten thousand documents a second, so the common document takes a fast path: orjson
parses it (a few µs; the standard parser takes about 11 µs for a 0.5 KiB telemetry message and
its duplicate-key hook as much again), and duplicate keys are found by counting colons.  Every
key has exactly one colon after it and a colon inside a string survives a round trip unchanged,
so a document whose colons are as many as those of its parsed copy written out again lost no
key; one that lost a key (a duplicate) has more.  Only a ``\\u`` escape can make a colon that
the text does not show (``\\u003a``), so documents with one, and documents with integers of
more than 18 digits (orjson reads them as floats where the standard parser keeps ints), take
the standard parser with its hook, as does anything orjson refuses: every error, and every
value, is the standard parser's.

Every failure is a :class:`BoundedJsonError` (a ``ValueError``), so a caller catches one type.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson


class BoundedJsonError(ValueError):
    """The document is not JSON, or is JSON outside the limits; the message says which."""


@dataclass(frozen=True)
class JsonLimits:
    """What one document may hold.  The defaults fit every message of the product's channels
    (the largest, a telemetry message of a CPE with many subflows, is a few KiB)."""

    max_bytes: int = 256 * 1024
    max_depth: int = 32
    #: Digits of an integer literal; 2^63 has 19, a millisecond timestamp 13.
    max_int_digits: int = 20


DEFAULT_LIMITS = JsonLimits()

# A JSON string, escapes included, blanked out so brackets inside strings are not counted.  The
# possessive loop and the unterminated alternatives make every match succeed from any quote, so
# the scan is linear even for hostile runs of escaped quotes (a plain ``"(...)*"`` retries from
# each quote of an unterminated string: quadratic).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
#: Brackets up to which the document goes to the parser before its depth is known: far below
#: the interpreter's recursion limit (1000), which the C parser counts its nesting against.
_PARSER_SAFE_DEPTH = 200
# Digits to 0, exponent markers to one spelling and "+" dropped: long digit runs and three-digit
# exponents become plain substrings.
_FOLD = str.maketrans({**{str(d): "0" for d in range(10)}, "E": "e", "+": None})


def loads(data: bytes | bytearray | str, limits: JsonLimits = DEFAULT_LIMITS) -> Any:
    """Parse one JSON document within ``limits``; raises :class:`BoundedJsonError`."""
    if isinstance(data, bytes | bytearray):
        if len(data) > limits.max_bytes:
            raise BoundedJsonError(f"document of {len(data)} bytes exceeds {limits.max_bytes}")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BoundedJsonError(f"not UTF-8: {exc}") from exc
    elif isinstance(data, str):
        # Characters, not bytes: a cheap upper bound is enough to refuse early.
        if len(data) > limits.max_bytes:
            raise BoundedJsonError(f"document of {len(data)} characters exceeds "
                                   f"{limits.max_bytes}")
        text = data
    else:
        raise BoundedJsonError(f"expected bytes or str, got {type(data).__name__}")
    # Fast checks on the raw text first (C-speed counting); only a document that might break a
    # limit pays for the exact check, on a skeleton with the strings blanked out, so brackets
    # and digits inside strings (``"cpe-000001"``) are not counted.
    skeleton: str | None = None
    openers = text.count("[") + text.count("{")
    if openers > _PARSER_SAFE_DEPTH:
        skeleton = _STRING.sub('""', text)
        _check_depth(skeleton, limits.max_depth)
    folded = text.translate(_FOLD)
    # (only positive exponents: 1e-999 is 0.0; and "cpe-0001" must not look like one)
    if "0" * (limits.max_int_digits + 1) in folded or "e000" in folded:
        _check_numbers(_STRING.sub('""', text) if skeleton is None else skeleton,
                       limits.max_int_digits)
    doc = _fast(text, folded)
    if doc is _NOT_FAST:
        try:
            doc = json.loads(text, parse_constant=_refuse_constant,
                             object_pairs_hook=_unique_keys)
        except BoundedJsonError:
            raise
        except (ValueError, RecursionError) as exc:
            raise BoundedJsonError(f"not JSON: {exc}") from exc
    if limits.max_depth < openers <= _PARSER_SAFE_DEPTH:
        _check_parsed_depth(doc, limits.max_depth)
    return doc


_NOT_FAST: Any = object()
#: The longest integer orjson and the standard parser read alike (an int64 has 19 digits).
_FAST_INT_DIGITS = 18


def _fast(text: str, folded: str) -> Any:
    """The document by orjson, or :data:`_NOT_FAST` when the standard parser must decide
    (see the module's docstring)."""
    if "\\u" in text or "0" * (_FAST_INT_DIGITS + 1) in folded:
        return _NOT_FAST
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _NOT_FAST  # the standard parser says why
    if text.count(":") != orjson.dumps(doc).count(b":"):
        return _NOT_FAST  # a key given twice: the hook names it
    return doc


def _check_parsed_depth(doc: Any, max_depth: int) -> None:
    # Level by level (json.loads makes only dicts and lists as containers): it stops at the
    # first level past the limit.
    level = [doc] if type(doc) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            raise BoundedJsonError(f"nested deeper than {max_depth} levels")
        level = [child for node in level
                 for child in (node.values() if type(node) is dict else node)
                 if type(child) in _CONTAINERS]


_CONTAINERS = frozenset({dict, list})


def _check_depth(skeleton: str, max_depth: int) -> None:
    depth = 0
    # Stops at the first bracket past the limit: the work is bounded by max_depth for a
    # hostile document, and by its brackets for a normal one.
    for match in _BRACKET.finditer(skeleton):
        if match.group() in "[{":
            depth += 1
            if depth > max_depth:
                raise BoundedJsonError(f"nested deeper than {max_depth} levels")
        else:
            depth -= 1


def _check_numbers(skeleton: str, max_digits: int) -> None:
    # One regex pass instead of a Python callback per number (parse_int/parse_float cost
    # 6x the parse itself).  A run of more than max_digits digits is an integer (or mantissa)
    # too long to be a measurement; a positive exponent of three digits is beyond any
    # quantity here and is how 1e999 (parsed as inf) would get in (1e-999 is only 0.0).
    found = re.search(rf"\d{{{max_digits + 1},}}|[eE]\+?\d{{3,}}", skeleton)
    if found is not None:
        raise BoundedJsonError(f"number {found.group()[:24]}... is out of range")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BoundedJsonError(f"duplicate key {key[:40]!r} in one object")
            seen.add(key)
    return obj


def _refuse_constant(name: str) -> Any:
    raise BoundedJsonError(f"{name} is not JSON")
