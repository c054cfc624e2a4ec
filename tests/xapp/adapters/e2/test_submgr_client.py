"""The Subscription Manager's client: URLs, answers, and submgr's notifications as it sends
them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.xapp.adapters.e2.submgr_stand_in import submgr_instance
from xapp.adapters.e2.submgr_client import SubmgrBusy, SubmgrClient, SubmgrError, parse_callback


def test_client_refuses_bad_urls_and_answers() -> None:
    with pytest.raises(ValueError):
        SubmgrClient("submgr:8088")
    client = SubmgrClient("http://127.0.0.1:1/ric/v1", timeout_s=1)
    assert client.base == "http://127.0.0.1:1"
    with pytest.raises(SubmgrError):
        client.subscribe({})


def test_the_client_takes_400_for_busy_and_204_or_404_for_gone() -> None:
    codes = iter([400, 204, 404, 500])

    class Api(SubmgrClient):
        def _request(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
            return next(codes), b""

    api = Api("http://submgr:8088")
    with pytest.raises(SubmgrBusy):
        api.unsubscribe("s")
    api.unsubscribe("s")
    api.unsubscribe("s")
    with pytest.raises(SubmgrError) as err:
        api.unsubscribe("s")
    assert not isinstance(err.value, SubmgrBusy)


@pytest.mark.parametrize(("inst", "want"), [
    (submgr_instance(1, 7), {"xapp": 1, "e2": 7, "error": "", "note": ""}),
    ({"XappEventInstanceId": 1, "E2EventInstanceId": 7, "ErrorSource": "E2Node",
      "ErrorCause": "RICSubscriptionResponse partially accepted: ActionNotAdmittedList: "
                    "[{\"ActionId\":2}]"},
     {"xapp": 1, "e2": 7, "error": "",
      "note": "RICSubscriptionResponse partially accepted: ActionNotAdmittedList: "
              "[{\"ActionId\":2}]"}),
    (submgr_instance(1, 7, "RICSubscriptionFailure"),
     {"xapp": 1, "e2": 0, "error": "RICSubscriptionFailure (E2Node)", "note": ""}),
    (submgr_instance(1, 7, timeout=True),
     {"xapp": 1, "e2": 0, "note": "",
      "error": "E2 RICSubscriptionResponse timeout (SUBMGR) [E2-Timeout]"}),
    ({"XappEventInstanceId": 1, "E2EventInstanceId": 0},
     {"xapp": 1, "e2": 0, "note": "",
      "error": "submgr answered E2 instance id 0 without a cause"}),
])
def test_callback_instances_classified_as_submgr_sends_them(inst: dict[str, Any],
                                                            want: dict[str, Any]) -> None:
    assert parse_callback({"SubscriptionId": "s", "SubscriptionInstances": [inst]}) == \
        ("s", [want])
