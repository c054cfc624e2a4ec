"""Identifiers that cross the product's boundaries, checked whole.

Every check is a ``fullmatch``: Python's ``$`` also matches before a final newline, so
``re.match(r"^cpe$", "cpe\\n")`` succeeds, and an id with a trailing newline would be
accepted and then silently match nothing.
"""

from __future__ import annotations

import re
from typing import Final, TypeGuard

#: A CPE id: what an agent's certificate, its MQTT topics and the A1 scope name it by.
CPE_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: An A1 policy instance id: UUIDs and simple names; no spaces, slashes or control
#: characters, because it becomes part of SDL keys, log lines and the mediator's URLs.
INSTANCE_ID_RE: Final = re.compile(r"[A-Za-z0-9_.:~-]{1,128}")
#: An A1 policy type id as the Go mediator sends it: ASCII digits only (``str.isdigit`` also
#: accepts "²" and "٣"), at most 9 of them so it fits an int32.
TYPE_ID_RE: Final = re.compile(r"[0-9]{1,9}")


def is_cpe_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and CPE_ID_RE.fullmatch(value) is not None


def is_instance_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and INSTANCE_ID_RE.fullmatch(value) is not None
