"""Identifiers are checked whole: a trailing newline, a space or a non-ASCII digit is not an id."""

from __future__ import annotations

import pytest

from xapp.core.ids import TYPE_ID_RE, is_cpe_id, is_instance_id


@pytest.mark.parametrize(("value", "ok"), [
    ("cpe-0001", True), ("A.b_c-9", True), ("x" * 64, True),
    ("x" * 65, False), ("-cpe", False), (".cpe", False), ("cpe\n", False), ("cpe 1", False),
    ("cpe/1", False), ("", False), ("cpé", False), (1, False), (None, False),
])
def test_cpe_ids(value: object, ok: bool) -> None:
    assert is_cpe_id(value) is ok


@pytest.mark.parametrize(("value", "ok"), [
    ("3fa85f64-5717-4562-b3fc-2c963f66afa6", True), ("site:a~1", True), ("i" * 128, True),
    ("i" * 129, False), ("a b", False), ("a/b", False), ("a\n", False), ("", False),
    (b"abc", False),
])
def test_instance_ids(value: object, ok: bool) -> None:
    assert is_instance_id(value) is ok


@pytest.mark.parametrize(("value", "ok"), [
    ("20100", True), ("123456789", True), ("1234567890", False), ("²", False), ("٣", False),
    ("1\n", False), ("", False),
])
def test_type_ids_are_ascii_digits_that_fit_an_int32(value: str, ok: bool) -> None:
    assert (TYPE_ID_RE.fullmatch(value) is not None) is ok
