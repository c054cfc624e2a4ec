"""What InfluxDB's answer to a write means for the batch: send it again later (transient), or
refused for good, with how many of its points and why.  Pure functions of the answer's status,
headers and message; :class:`~xapp.adapters.influx.store.InfluxStore` acts on them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from influxdb_client.rest import ApiException

#: Why InfluxDB may refuse points for good (suffixes of the ``rejected_points_`` counters).
REJECT_REASONS = ("parse", "type_conflict", "too_large", "other")


class TransientWriteError(Exception):
    """A write to send again later; ``retry_after_s`` from the server's Retry-After."""

    def __init__(self, message: str, retry_after_s: float | None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


_DROPPED = re.compile(r"dropped=(\d+)")


def transient(status: int) -> bool:
    """Whether a write answered with HTTP ``status`` may succeed later unchanged.

    401/403/404 are about the destination (credentials, a database not created yet), not the
    batch: every batch would fail alike, so they wait like an outage instead of emptying the
    buffer; the bounded buffer still drops (and counts) the oldest points if it lasts.
    """
    return status >= 500 or status in (0, 401, 403, 404, 408, 429) or status < 400


def error_message(exc: ApiException) -> str:
    """InfluxDB's error text: ``{"error": ...}`` (1.8) or ``{"message": ...}`` (2.x)."""
    body = exc.body
    text = (body.decode("utf-8", "replace") if isinstance(body, bytes)
            else str(body) if body is not None else str(exc.reason or ""))
    try:
        parsed = json.loads(text)
    except ValueError:
        return text.strip()
    if isinstance(parsed, dict):
        for key in ("error", "message"):
            if isinstance(parsed.get(key), str):
                return str(parsed[key])
    return text.strip()


def retry_after(headers: Any) -> float | None:
    """Seconds of a Retry-After header (the delta form), or None."""
    try:
        value = headers.get("Retry-After") if headers is not None else None
        return None if value is None else max(0.0, float(value))
    except (TypeError, ValueError, AttributeError):
        return None


def rejections(message: str, n: int) -> dict[str, int]:
    """Points a partial write refused, by reason, from its message (1.8: ``dropped=N`` for
    type conflicts and retention, one ``unable to parse`` per unparsable line)."""
    counts: dict[str, int] = {}
    unparsable = message.count("unable to parse")
    if unparsable:
        counts["parse"] = unparsable
    match = _DROPPED.search(message)
    dropped = int(match.group(1)) if match else 0
    if dropped:
        reason = "type_conflict" if "field type conflict" in message else "other"
        counts[reason] = counts.get(reason, 0) + dropped
    if not counts:  # the server did not say how many: at least one
        counts["other"] = 1
    total = sum(counts.values())
    if total > n:  # never count more than were sent
        counts = {k: v * n // total for k, v in counts.items()}
    return counts
