"""The A1 policy types this xApp registers: their registration bodies and the validators of
their payloads.

Two versions of one type, ``mcw_steering``: 20100, the first, and 20101, which accepts every
20100 policy with the same meaning and adds rules (traffic classes), the priority and
smallest_delay modes and RTT and loss thresholds (issue 35).  Both stay registered, so the
instances an operator made of 20100 keep working; both build the same
:class:`~xapp.core.policy.Policy`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import jsonschema

from xapp.schemas import schemas_dir

#: The policy types this xApp owns, oldest first.
POLICY_TYPE_IDS: Final = (20100, 20101)
POLICY_TYPE_NAME: Final = "mcw_steering"


class PolicyTypeError(ValueError):
    """A policy type file that cannot be used."""


def policy_type_file(type_id: int) -> str:
    return f"a1-policy-type-{type_id}.json"


def load_policy_types(directory: str | os.PathLike[str] | None = None
                      ) -> tuple[PolicyType, ...]:
    """Every policy type of :data:`POLICY_TYPE_IDS`, in that order."""
    return tuple(PolicyType.load(directory, t) for t in POLICY_TYPE_IDS)


def excerpt(value: Any) -> str:
    """A log-safe, bounded rendering of a value taken from a request."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class PolicyType:
    """The registration body of the policy type (what ``PUT /A1-P/v2/policytypes/{id}`` takes)."""

    policy_type_id: int
    name: str
    description: str
    create_schema: Mapping[str, Any]

    @classmethod
    def load(cls, directory: str | os.PathLike[str] | None = None,
             type_id: int = POLICY_TYPE_IDS[-1]) -> PolicyType:
        """The type ``type_id`` from its file in ``directory`` (the installed schemas)."""
        path = schemas_dir(directory) / policy_type_file(type_id)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PolicyTypeError(f"cannot read the A1 policy type {path}: {exc}") from exc
        missing = {"policy_type_id", "name", "description", "create_schema"} - set(doc)
        if missing:
            raise PolicyTypeError(f"{path}: missing keys {sorted(missing)}")
        if doc["policy_type_id"] != type_id:
            raise PolicyTypeError(f"{path}: policy_type_id is {doc['policy_type_id']!r}, "
                                  f"not {type_id}")
        jsonschema.Draft7Validator.check_schema(doc["create_schema"])
        return cls(int(doc["policy_type_id"]), str(doc["name"]), str(doc["description"]),
                   doc["create_schema"])

    def validator(self) -> jsonschema.Draft7Validator:
        validator: jsonschema.Draft7Validator = _LinearValidator(self.create_schema)
        return validator


def _canonical(value: Any) -> Any:
    """A hashable key equal for exactly the values JSON Schema calls equal: ``1 == 1.0``, but
    ``true`` is not ``1``, and objects compare regardless of key order."""
    if isinstance(value, bool) or value is None:
        return ("c", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list | tuple):
        return ("a", tuple(_canonical(v) for v in value))
    if isinstance(value, Mapping):
        return ("o", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("?", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
    """``uniqueItems`` in linear time.  jsonschema's own falls back to comparing every pair
    when an array mixes types: 30,000 items took 50 s on the RMR dispatch thread (issue 22)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield jsonschema.ValidationError(
                f"has non-unique elements (first repeated: {excerpt(item)})")
            return
        seen.add(key)


_LinearValidator = jsonschema.validators.extend(jsonschema.Draft7Validator,
                                                {"uniqueItems": _unique_items})
