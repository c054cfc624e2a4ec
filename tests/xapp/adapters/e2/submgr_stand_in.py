"""A stand-in Subscription Manager on loopback and the xApp's side of it, for the subscription
tests.

The stand-in is a real HTTP server that checks every request against the contract submgr
decodes (the PascalCase keys of xapp-frame's swagger, both endpoint ports, the RAN function)
and answers through the xApp's real callback endpoint (:class:`xapp.app.endpoints.HttpServer`),
as submgr does.  Its fixture, ``submgr``, is in this package's conftest.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.paths import SHARED
from tests.support.polling import wait_until
from xapp.adapters.e2.nodes import StaticNode, StaticNodes
from xapp.adapters.e2.submgr_client import CALLBACK_PATH
from xapp.adapters.e2.subscriber import E2Subscriber
from xapp.adapters.e2.subscription_book import SubscriptionBook
from xapp.adapters.e2.subscription_request import E2SubscribeSettings
from xapp.adapters.e2.subscription_store import MemoryIdStore, NodeRecords
from xapp.app.endpoints import Health, HttpServer
from xapp.app.metrics import Metrics

DATA = SHARED / "data" / "e2sim-kpm"
MEID = "gnb_208_092_0000000a"
#: The golden indication: requestor 123 (submgr's; the data README's "1" is what
#: ricxappframe's e2ap reports whatever it is), instance 7, RAN function 2.
GOLDEN_INSTANCE, GOLDEN_FUNCTION, GOLDEN_REQUESTOR = 7, 2, 123


def submgr_instance(xapp_id: int, e2_id: int, failure: str = "", *,
                    timeout: bool = False) -> dict[str, Any]:
    """One SubscriptionInstance exactly as submgr's control.go sends it.

    Success (``sendSuccesfullResponseNotification``): the node's instance id, ``ErrorCause``
    " " (``CheckActionNotAdmittedList`` formats two empty strings) and ``ErrorSource``
    "E2Node", always.  Failure (``sendUnsuccesfullResponseNotification``): instance id 0, the
    cause, the source ("E2Node" for the node's RICSubscriptionFailure, "SUBMGR" when none was
    set, as on the E2 time-out) and ``TimeoutType`` on time-outs.
    """
    if timeout:
        return {"XappEventInstanceId": xapp_id, "E2EventInstanceId": 0,
                "ErrorCause": "E2 RICSubscriptionResponse timeout", "ErrorSource": "SUBMGR",
                "TimeoutType": "E2-Timeout"}
    if failure:
        return {"XappEventInstanceId": xapp_id, "E2EventInstanceId": 0,
                "ErrorCause": failure, "ErrorSource": "E2Node"}
    return {"XappEventInstanceId": xapp_id, "E2EventInstanceId": e2_id,
            "ErrorCause": " ", "ErrorSource": "E2Node"}


#: submgr's tracker refusing a transaction while another of the same node is open
#: (ric-plt-submgr pkg/control/tracker.go), sent in a failure notification.
TRACKER_ONGOING = ("Tracker: Similar transaction with xappkey {{service-ricxapp-mcw-rmr 4560}"
                   " is ongoing, transaction not created ")


class StandInSubmgr:
    """``/ric/v1/subscriptions`` as submgr serves it: checks the body, answers 201, then posts
    one notification per SubscriptionDetail to the client endpoint (unless told not to).

    DELETE as the real one answers it: 400 while the subscription's POST is still being
    handled (its notification not sent yet: ``ongoing``), else 204, also for an id it does
    not know.  Deleting a live subscription starts submgr's asynchronous delete at the node:
    the next ``busy_after_delete`` POSTs for that node fail in their notification with the
    tracker's "is ongoing" cause."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.deletes: list[str] = []
        self.problems: list[str] = []
        #: What the next notifications say: E2 instance id per detail index, or an error.
        self.e2_instances: list[int] = [GOLDEN_INSTANCE, GOLDEN_INSTANCE + 1]
        self.error_cause = ""
        #: The failure is submgr's E2 time-out (no answer from the node), not a refusal.
        self.timeout = False
        self.status = 201
        self.notify = True
        #: How long a DELETE takes to answer (a slow or overloaded submgr).
        #: Runs in each DELETE: a test advances its fake clock here to make deletes slow.
        self.on_delete: Callable[[], None] = lambda: None
        #: Subscriptions whose POST is still being handled (no notification sent yet).
        self.ongoing: set[str] = set()
        #: Every DELETE's (id, status).
        self.delete_answers: list[tuple[str, int]] = []
        self.busy_after_delete = 0
        self._busy: dict[str, int] = {}
        self._live: dict[str, str] = {}
        self._n = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    doc = json.loads(body)
                    server.check(doc)
                except Exception as exc:
                    server.problems.append(f"bad request: {exc}")
                    self._answer(400, {})
                    return
                with server._lock:
                    server._n += 1
                    sid = f"sub-{server._n}"
                    server.posts.append(doc)
                    busy = server._busy.get(doc["Meid"], 0) > 0
                    if busy:
                        server._busy[doc["Meid"]] -= 1
                    if server.status == 201:
                        server.ongoing.add(sid)
                        server._live[sid] = doc["Meid"]
                if server.status != 201:
                    self._answer(server.status, {})
                    return
                self._answer(201, {"SubscriptionId": sid, "SubscriptionInstances": None})
                if server.notify:
                    threading.Thread(target=server.callback, args=(sid, doc, busy),
                                     daemon=True).start()

            def do_DELETE(self) -> None:
                prefix = "/ric/v1/subscriptions/"
                if not self.path.startswith(prefix):
                    server.problems.append(f"DELETE on {self.path}")
                server.on_delete()
                sid = self.path[len(prefix):]
                with server._lock:
                    server.deletes.append(sid)
                    code = 400 if sid in server.ongoing else 204
                    server.delete_answers.append((sid, code))
                    meid = server._live.pop(sid, None) if code == 204 else None
                    if meid is not None and server.busy_after_delete:
                        server._busy[meid] = server.busy_after_delete
                self._answer(code, None)

            def _answer(self, code: int, doc: Any) -> None:
                body = b"" if doc is None else json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def check(self, doc: dict[str, Any]) -> None:
        """What submgr's go-swagger model requires (api/xapp_rest_api.yaml)."""
        assert set(doc) <= {"SubscriptionId", "ClientEndpoint", "Meid", "RANFunctionID",
                            "E2SubscriptionDirectives", "SubscriptionDetails"}, sorted(doc)
        assert {"ClientEndpoint", "Meid", "RANFunctionID", "SubscriptionDetails"} <= set(doc)
        ep = doc["ClientEndpoint"]
        assert set(ep) == {"Host", "HTTPPort", "RMRPort"} and ep["Host"]
        assert 0 < ep["HTTPPort"] < 65536 and 0 < ep["RMRPort"] < 65536
        assert isinstance(doc["Meid"], str) and 0 <= doc["RANFunctionID"] <= 4095
        assert doc["SubscriptionDetails"]
        for d in doc["SubscriptionDetails"]:
            assert set(d) == {"XappEventInstanceId", "EventTriggers", "ActionToBeSetupList"}
            assert 0 <= d["XappEventInstanceId"] <= 65535
            assert all(isinstance(b, int) and 0 <= b <= 255 for b in d["EventTriggers"])
            for a in d["ActionToBeSetupList"]:
                assert set(a) <= {"ActionID", "ActionType", "ActionDefinition",
                                  "SubsequentAction"}
                assert a["ActionType"] in ("insert", "policy", "report")
                assert all(0 <= b <= 255 for b in a["ActionDefinition"])
                assert a["SubsequentAction"] == {"SubsequentActionType": "continue",
                                                 "TimeToWait": "zero"}

    def finish(self, sid: str) -> None:
        """The POST's handling ends (its notification is sent, or never will be)."""
        with self._lock:
            self.ongoing.discard(sid)

    def callback(self, sid: str, doc: dict[str, Any], busy: bool = False) -> None:
        ep = doc["ClientEndpoint"]
        url = f"http://{ep['Host']}:{ep['HTTPPort']}{CALLBACK_PATH}"
        failed = busy or bool(self.error_cause) or self.timeout
        if failed:  # submgr removes a subscription that failed: a DELETE then finds nothing
            with self._lock:
                self._live.pop(sid, None)
        self.finish(sid)
        for i, d in enumerate(doc["SubscriptionDetails"]):
            if busy:
                inst = {"XappEventInstanceId": d["XappEventInstanceId"],
                        "E2EventInstanceId": 0, "ErrorCause": TRACKER_ONGOING,
                        "ErrorSource": "SUBMGR"}
            else:
                inst = submgr_instance(d["XappEventInstanceId"], self.e2_instances[i],
                                       self.error_cause, timeout=self.timeout)
            body = json.dumps({"SubscriptionId": sid, "SubscriptionInstances": [inst]}).encode()
            req = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    if r.status != 200:
                        self.problems.append(f"callback answered {r.status}")
            except OSError as exc:
                self.problems.append(f"callback failed: {exc}")

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Xapp:
    """The xApp's part: book, subscriber and its real HTTP server with the callback."""

    def __init__(self, submgr: StandInSubmgr, nodes: Any, *, ids: Any = None,
                 requestor_id: int = GOLDEN_REQUESTOR, styles: tuple[int, ...] = (1,),
                 measurements: tuple[str, ...] = ("DRB.UEThpDl", "DRB.UEThpUl"),
                 clock: Callable[[], float] = time.monotonic,
                 records: NodeRecords | None = None, owner: str = "",
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.book = SubscriptionBook(requestor_id)
        self.http = HttpServer(Health(), lambda: {}, Metrics(), host="127.0.0.1", port=0)
        self.settings = E2SubscribeSettings(
            submgr_url=submgr.url, client_host="127.0.0.1", http_port=self.http.port,
            rmr_port=4560, requestor_id=requestor_id, report_styles=styles,
            measurements=measurements, retry_min_s=1.0,
            response_timeout_s=5.0)
        self.sub = E2Subscriber(self.settings, nodes, self.book,
                                ids=ids if ids is not None else MemoryIdStore(), clock=clock,
                                records=records, owner=owner, sleep=sleep)
        self.http.posts[CALLBACK_PATH] = self.sub.on_response
        self.http.start()

    def state(self, node: str = MEID) -> str:
        return str(self.sub.view()["nodes"][node]["subscription"]["state"])

    def close(self) -> None:
        self.http.stop()


def static(version: int = 3, styles: tuple[int, ...] = (1,)) -> StaticNodes:
    return StaticNodes([StaticNode(MEID, GOLDEN_FUNCTION, version, styles)])


def own(grants: Any, replica: Any, shard: int) -> None:
    """``replica`` is granted ``shard`` and subscribes the node in one step."""
    grants.grant(shard, float("inf"))
    replica.sub.step()
    assert wait_until(lambda: replica.state() == "active", timeout_s=5)


def sharded_pair(submgr: StandInSubmgr, records: NodeRecords) -> tuple[Any, Any, Any, Any]:
    """Replicas a and b over one set of node records; a holds MEID's shard."""
    from xapp.adapters.e2.nodes import OwnedNodes
    from xapp.core.ownership import ShardFence

    first, second = ShardFence(64), ShardFence(64)
    a = Xapp(submgr, OwnedNodes(static(), first.allows), records=records, owner="replica-a")
    b = Xapp(submgr, OwnedNodes(static(), second.allows), records=records, owner="replica-b")
    return first, second, a, b
