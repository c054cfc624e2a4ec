"""The O-RAN SC Subscription Manager's REST API: the subscription requests, their answers and
the notifications submgr posts back.

The JSON contract, as found (not as ricxappframe serialises it)
---------------------------------------------------------------
Sources read: o-ran-sc/ric-plt-xapp-frame ``api/xapp_rest_api.yaml`` (swagger 2.0, basePath
``/ric/v1``) and ``pkg/clientmodel/*.go`` / ``pkg/models/*.go`` (the ``json:"..."`` tags the
Subscription Manager's go-swagger server decodes with); o-ran-sc/ric-plt-submgr
``pkg/control/control.go`` (``RESTSubscriptionHandler``, ``sendE2TSubscriptionRequest``),
``pkg/control/e2ap.go`` (``FillSubscriptionReqMsgs``), ``pkg/control/restendpoint.go``
(``ConstructEndpointAddresses``); xapp-frame ``pkg/xapp/subscription.go`` (``Notify``).

* ``POST /ric/v1/subscriptions`` with PascalCase keys::

    {"ClientEndpoint": {"Host": "service-ricxapp-mcw-xapp-http.ricxapp",
                        "HTTPPort": 8080, "RMRPort": 4560},
     "Meid": "gnb_208_092_0000000a", "RANFunctionID": 2,
     "SubscriptionDetails": [{"XappEventInstanceId": 1,
                              "EventTriggers": [bytes as integers 0..255],
                              "ActionToBeSetupList": [{"ActionID": 1, "ActionType": "report",
                                  "ActionDefinition": [integers],
                                  "SubsequentAction": {"SubsequentActionType": "continue",
                                                       "TimeToWait": "zero"}}]}]}

  answered ``201 {"SubscriptionId": "<id>", ...}``; ``503`` when the node's E2 link is down.
  ``HTTPPort`` and ``RMRPort`` are both sent: submgr dereferences both pointers.  submgr
  derives the RMR endpoint from Host by replacing "http" with "rmr" (the chart's service
  names follow that pattern).
* ricxappframe 3.2.2's ``xapp_subscribe.NewSubscriber.Subscribe`` sends
  ``subs_params.to_dict()`` (``ricxappframe/xapp_subscribe.py`` line 101), whose keys are the
  generated models' Python attribute names (``client_endpoint``, ``ran_function_id``,
  ``xapp_event_instance_id``, ``action_to_be_setup_list``...), not their ``attribute_map``
  (``subsclient/models/subscription_params.py``): submgr's required ``ClientEndpoint``,
  ``Meid``, ``RANFunctionID`` and ``SubscriptionDetails`` are then missing (Go's
  case-insensitive match does not bridge the underscores).  Hence plain JSON here.
* ``DELETE /ric/v1/subscriptions/{SubscriptionId}`` answered 204 when deleted and also for an
  id submgr does not know; 400 only while "Handling of the REST Subscription Request still
  ongoing" (the POST's notification has not been sent yet): not deleted, so retried with
  back-off until 204 (or 404), never taken for gone.  submgr then deletes at the node
  asynchronously: a POST for the same node meanwhile fails in its notification with
  "Tracker: Similar transaction ... is ongoing" (ErrorSource SUBMGR); that is retried at the
  shortest back-off, not counted towards a longer one.
* The callback: submgr POSTs ``http://Host:HTTPPort/ric/v1/subscriptions/response`` once per
  SubscriptionDetail with ``{"SubscriptionId": ..., "SubscriptionInstances":
  [{"XappEventInstanceId": n, "E2EventInstanceId": m, "ErrorCause": "...", "ErrorSource":
  "SUBMGR|RTMGR|DBAAS|ASN1|E2Node", "TimeoutType": "E2-Timeout|..."}]}`` and retries (10
  times, 5 s apart) until it gets 200.  ``E2EventInstanceId`` is the RIC Request ID's
  instance the E2 node sees.  Success and failure are told apart by it alone
  (``sendSuccesfullResponseNotification`` / ``sendUnsuccesfullResponseNotification``): a
  success carries the node's instance id, ``"ErrorSource": "E2Node"`` and ``"ErrorCause": " "``
  on every instance (``CheckActionNotAdmittedList`` formats two empty strings), or a
  "partially accepted" cause listing actions the node did not admit; a failure carries
  ``E2EventInstanceId`` 0, the cause, its source and, on time-outs, ``TimeoutType``.
  ``E2SubscriptionDirectives`` (time-out, retries) is optional and not sent: submgr's
  defaults apply.
* The RIC Request ID's requestor towards the node is submgr's constant ``ricRequestorId =
  123`` (control.go, ``sendE2TSubscriptionRequest``); nodes echo it in their indications (the
  O-RAN SC KPM simulator's golden indication carries 123; ``match_requestor`` off is for
  nodes that do not echo it).

:class:`SubmgrClient` sends the requests; :func:`parse_callback` reads a notification.  The
request's body is :func:`xapp.adapters.e2.subscription_request.subscription_params`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Protocol

from xapp import bounded_json

SUBSCRIPTIONS_PATH = "/ric/v1/subscriptions"
#: Where submgr posts its answers (xapp-frame ``Subscriber.clientUrl``).
CALLBACK_PATH = "/ric/v1/subscriptions/response"
#: submgr's ``ricRequestorId`` (ric-plt-submgr pkg/control/control.go).
SUBMGR_REQUESTOR_ID = 123
#: submgr answers with a few hundred bytes; more is refused.
MAX_RESPONSE_BYTES = 64 * 1024
CALLBACK_LIMITS = bounded_json.JsonLimits(max_bytes=64 * 1024, max_depth=8)
#: The instance ids the swagger allows (XappEventInstanceId, E2EventInstanceId 0..65535).
MAX_INSTANCE_ID = 65535


class SubmgrError(Exception):
    """The Subscription Manager refused or did not answer; ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SubmgrBusy(SubmgrError):
    """A DELETE answered 400: submgr is still handling the subscription's request.  The
    subscription is live; delete it again later."""


def submgr_busy(cause: str) -> bool:
    """submgr's cause for a request that collided with an ongoing transaction of the same
    node or subscription (its tracker: "Similar transaction ... is ongoing", "got already
    transaction ongoing"): worth retrying soon, not a refusal."""
    return "ongoing" in cause.lower()


class SubmgrApi(Protocol):
    def subscribe(self, params: Mapping[str, Any]) -> str: ...

    def unsubscribe(self, subscription_id: str) -> None: ...


class SubmgrClient:
    """``POST``/``DELETE`` on ``<base>/ric/v1/subscriptions`` with bounded bodies and timeouts."""

    def __init__(self, base_url: str, timeout_s: float = 5.0) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/ric/v1"):
            base = base[: -len("/ric/v1")]
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"submgr URL must be http(s)://host[:port], got {base_url!r}")
        self.base = base
        self.timeout_s = timeout_s

    def subscribe(self, params: Mapping[str, Any]) -> str:
        status, body = self._request("POST", SUBSCRIPTIONS_PATH,
                                     json.dumps(params, separators=(",", ":")).encode())
        if status not in (200, 201):
            raise SubmgrError(f"submgr refused the subscription: HTTP {status} "
                              f"{body[:200]!r}", status)
        try:
            doc = bounded_json.loads(body, CALLBACK_LIMITS)
        except bounded_json.BoundedJsonError as exc:
            raise SubmgrError(f"submgr's answer is not usable JSON: {exc}", status) from exc
        sid = doc.get("SubscriptionId") if isinstance(doc, dict) else None
        if not isinstance(sid, str) or not sid or len(sid) > 256:
            raise SubmgrError(f"submgr's answer has no SubscriptionId: {body[:200]!r}", status)
        return sid

    def unsubscribe(self, subscription_id: str) -> None:
        path = f"{SUBSCRIPTIONS_PATH}/{urllib.parse.quote(subscription_id, safe='')}"
        status, body = self._request("DELETE", path, None)
        # 204: deleted, or an id submgr does not know; 404 the same from other versions.
        if status == 400:
            raise SubmgrBusy(f"submgr still handles subscription {subscription_id}: HTTP 400 "
                             f"{body[:200]!r}", status)
        if status not in (200, 204, 404):
            raise SubmgrError(f"submgr refused to delete {subscription_id}: HTTP {status} "
                              f"{body[:200]!r}", status)

    def _request(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return int(resp.status), _read_bounded(resp)
        except urllib.error.HTTPError as exc:
            try:
                return int(exc.code), _read_bounded(exc)
            finally:
                exc.close()
        except (OSError, ValueError) as exc:  # refused, timeout, DNS, bad URL
            raise SubmgrError(f"submgr {method} {path} failed: {exc}") from exc


def _read_bounded(resp: Any) -> bytes:
    body = bytes(resp.read(MAX_RESPONSE_BYTES + 1))
    if len(body) > MAX_RESPONSE_BYTES:
        raise SubmgrError(f"submgr answered more than {MAX_RESPONSE_BYTES} bytes")
    return body


def parse_callback(doc: Any) -> tuple[str, list[dict[str, Any]]]:
    """(SubscriptionId, [{"xapp", "e2", "error"}]) of a submgr notification; ValueError."""
    if not isinstance(doc, dict):
        raise ValueError("the notification is not a JSON object")
    sid = doc.get("SubscriptionId")
    if not isinstance(sid, str) or not 0 < len(sid) <= 256:
        raise ValueError("SubscriptionId missing or not a string of 1..256 characters")
    raw = doc.get("SubscriptionInstances")
    if not isinstance(raw, list) or not 0 < len(raw) <= 256:
        raise ValueError("SubscriptionInstances missing, empty or longer than 256")
    out: list[dict[str, Any]] = []
    for inst in raw:
        if not isinstance(inst, dict):
            raise ValueError("a SubscriptionInstance is not an object")
        xid, eid = inst.get("XappEventInstanceId"), inst.get("E2EventInstanceId")
        for name, value in (("XappEventInstanceId", xid), ("E2EventInstanceId", eid)):
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not 0 <= value <= MAX_INSTANCE_ID:
                raise ValueError(f"{name} must be an integer in 0..{MAX_INSTANCE_ID}")
        cause, source, timeout = (inst.get(k) or "" for k in ("ErrorCause", "ErrorSource",
                                                               "TimeoutType"))
        for name, value in (("ErrorCause", cause), ("ErrorSource", source),
                            ("TimeoutType", timeout)):
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string")
        detail = " ".join(p[:200] for p in (cause.strip(), f"({source})" if source else "",
                                            f"[{timeout}]" if timeout else "") if p)
        # submgr tells success from failure by the E2 instance id alone: a success carries
        # the node's instance id and, always, ErrorSource "E2Node" with ErrorCause " " (two
        # empty strings formatted with a space), or "RICSubscriptionResponse partially
        # accepted: ActionNotAdmittedList: [...]"; a failure carries 0 with the cause (and
        # TimeoutType on time-outs).  So a cause on a non-zero id is a note, not an error.
        if eid == 0:
            out.append({"xapp": xid, "e2": 0,
                        "error": detail or "submgr answered E2 instance id 0 without a cause",
                        "note": ""})
        else:
            note = cause.strip()[:400]
            out.append({"xapp": xid, "e2": eid, "error": "", "note": note})
    return sid, out
