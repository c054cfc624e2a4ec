"""What InfluxDB's answer to a write means: which statuses are retried, the points a partial
write refused by reason, the error text of either InfluxDB version, Retry-After."""

from __future__ import annotations

import pytest
from influxdb_client.rest import ApiException

from xapp.adapters.influx import write_errors


@pytest.mark.parametrize("status", [400, 413, 422, 429, 500, 503, 401, 404])
def test_status_policy(status: int) -> None:
    """Which answers are retried: the batch's fault (400, 413, 422) is not, the server's or
    the destination's is."""
    assert write_errors.transient(status) is (status not in (400, 413, 422))


@pytest.mark.parametrize(("message", "sent", "counts"), [
    ("partial write: unable to parse 'a b': bad timestamp\nunable to parse 'c': missing "
     "fields", 10, {"parse": 2}),
    ('partial write: field type conflict: input field "rtt_ms" on measurement "wat_kpi" is '
     "type float, already exists as type integer dropped=3", 10, {"type_conflict": 3}),
    ("partial write: points beyond retention policy dropped=2", 10, {"other": 2}),
    ("partial write", 5, {"other": 1}),  # no number: at least one
    ("partial write: points beyond retention policy dropped=100", 4, {"other": 4}),
])
def test_rejections_by_reason_never_more_than_sent(message: str, sent: int,
                                                   counts: dict[str, int]) -> None:
    assert write_errors.rejections(message, sent) == counts


def test_error_message_of_either_version() -> None:
    exc = ApiException(status=400, reason="Bad Request")  # type: ignore[no-untyped-call]
    assert write_errors.error_message(exc) == "Bad Request"  # no body
    for body, text in ((b'{"error": "partial write: x"}', "partial write: x"),  # 1.8
                       ('{"code": "invalid", "message": "m"}', "m"),  # 2.x
                       (b"  not json \n", "not json"), ('["a"]', '["a"]')):
        exc.body = body
        assert write_errors.error_message(exc) == text


def test_retry_after_delta_seconds_only() -> None:
    assert write_errors.retry_after({"Retry-After": "7"}) == 7.0
    assert write_errors.retry_after({"Retry-After": "-3"}) == 0.0
    assert write_errors.retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert write_errors.retry_after({}) is None and write_errors.retry_after(None) is None
