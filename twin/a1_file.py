"""An operator's A1 policy file, applied in the twin as the xApp applies an A1 instance.

The file holds what the operator would create under policy type 20101 (``mcw_steering``): the
payload of ``PUT /A1-P/v2/policytypes/20101/policies/{id}``, ``rules`` and all
(``docs/steering-modes.md``).  :func:`policy_book` hands it to the xApp's own A1 handler
(:class:`xapp.adapters.a1.A1Handler`: the type's schema, then the policy's rules), over the
twin's default policy, so a policy the xApp would refuse is refused here with the same reason,
and one it would take steers the twin's CPEs as it would steer the site's.  A ``scope`` is
left to the handler and means nothing here: the twin's CPEs are all in it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from xapp.adapters.a1 import A1Handler, Status
from xapp.adapters.a1_types import PolicyTypeError, load_policy_types
from xapp.core.policy_book import PolicyBook

#: The policy type of a file (the one with rules).
POLICY_TYPE_ID: Final = 20101
#: The instance id the twin gives it.
INSTANCE_ID: Final = "twin"
#: A policy file is an A1 payload: the handler's own bound on a request is 1 MiB.
MAX_BYTES: Final = 1024 * 1024


class PolicyFileError(ValueError):
    """A policy file that cannot be read, or that the xApp would refuse."""


def load(path: Path) -> dict[str, Any]:
    """The payload in ``path`` (a JSON object)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PolicyFileError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise PolicyFileError(f"{path}: larger than {MAX_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PolicyFileError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PolicyFileError(f"{path}: an A1 policy is a JSON object")
    return doc


def without_rules(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The same policy as one rule for all traffic: its own steering, no classes."""
    return {k: v for k, v in payload.items() if k != "rules"}


def policy_book(default: Mapping[str, Any], payload: Mapping[str, Any] | None) -> PolicyBook:
    """The twin's policies: ``default`` (the twin's options), and ``payload`` created over it
    as an A1 instance of type 20101 for every CPE."""
    book = PolicyBook(default)
    if payload is None:
        return book
    try:
        types = load_policy_types()
    except (PolicyTypeError, FileNotFoundError) as exc:
        raise PolicyFileError(str(exc)) from None
    handler = A1Handler(book, types, "twin", clock=lambda: 0.0)
    resp = handler.handle({"operation": "CREATE", "policy_type_id": POLICY_TYPE_ID,
                           "policy_instance_id": INSTANCE_ID, "payload": dict(payload)})
    if resp.status is not Status.OK:
        raise PolicyFileError(f"the xApp would refuse this policy (A1 ERROR): {resp.reason}")
    return book
