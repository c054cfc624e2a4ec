"""KPM subscriptions against a stand-in Subscription Manager on loopback.

The stand-in is a real HTTP server that checks every request against the contract submgr
decodes (the PascalCase keys of xapp-frame's swagger, both endpoint ports, the RAN function)
and answers through the xApp's real callback endpoint (:class:`xapp.app.endpoints.HttpServer`),
as submgr does.  Then the golden RIC Indication of the O-RAN SC KPM simulator (instance 7, RAN
function 2) goes through E3's ingest: accepted for the subscription, refused without it.
Restart (stale ids deleted, fresh subscriptions) runs against a real redis-server; the R-NIB
case writes the E2 manager's protobufs with the golden E2 Setup Request's RAN function.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.paths import SHARED
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from xapp.adapters.e2 import kpm_decode, kpm_encode
from xapp.adapters.e2.nodes import StaticNode, StaticNodes
from xapp.adapters.e2.records import E2Node, RicRequestId
from xapp.adapters.e2.subscriptions import (
    CALLBACK_PATH,
    E2Subscriber,
    E2SubscribeSettings,
    MemoryIdStore,
    MemoryNodeRecords,
    NodeRecords,
    NodeSubscription,
    SdlIdStore,
    SdlNodeRecords,
    SubmgrClient,
    SubmgrError,
    SubscriptionBook,
)
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


@pytest.fixture
def submgr() -> Iterator[StandInSubmgr]:
    s = StandInSubmgr()
    yield s
    s.close()
    assert not s.problems


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


def test_subscription_contract_and_golden_indication(submgr: StandInSubmgr) -> None:
    from xapp.adapters.e2.ingest import KpmIngest
    from xapp.adapters.e2.registry import CpeRegistry

    xapp = Xapp(submgr, static())
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        [doc] = submgr.posts
        assert doc["Meid"] == MEID and doc["RANFunctionID"] == GOLDEN_FUNCTION
        assert doc["ClientEndpoint"] == {"Host": "127.0.0.1", "HTTPPort": xapp.http.port,
                                         "RMRPort": 4560}
        [detail] = doc["SubscriptionDetails"]
        # The bytes are the codec's encoding of what the settings ask for.
        assert bytes(detail["EventTriggers"]) == kpm_encode.encode_event_trigger(1000, 3)
        [action] = detail["ActionToBeSetupList"]
        assert action["ActionID"] == 1 and action["ActionType"] == "report"
        assert bytes(action["ActionDefinition"]) == kpm_encode.encode_action_definition(
            ["DRB.UEThpDl", "DRB.UEThpUl"], 1000, 3, style=1)
        [active] = xapp.book.active()
        assert active.subscription_id == "sub-1" and active.node == MEID
        assert active.request == RicRequestId(GOLDEN_REQUESTOR, GOLDEN_INSTANCE)
        assert active.ran_function_id == GOLDEN_FUNCTION and active.kpm_version == 3
        assert active.report_style == 1

        frames: list[Any] = []
        ingest = KpmIngest(xapp.book, CpeRegistry(), frames.append)
        golden = (DATA / "ind0.bin").read_bytes()
        ingest.handle(golden, MEID)
        assert xapp.book.indications(GOLDEN_INSTANCE, GOLDEN_FUNCTION) == 1
        assert xapp.book.misses == 0
        view = xapp.sub.view()["nodes"][MEID]
        assert view["subscription"]["instances"][0]["indications"] == 1
        assert view["subscription"]["instances"][0]["e2_instance_id"] == GOLDEN_INSTANCE

        # Without a subscription for instance 7 the same bytes are refused, and counted.
        other = SubscriptionBook(GOLDEN_REQUESTOR)
        refused = KpmIngest(other, CpeRegistry(), frames.append)
        n_frames = len(frames)
        refused.handle(golden, MEID)
        assert other.misses == 1 and len(frames) == n_frames
        assert sum(refused.counters.values()) > 0

        xapp.sub.stop()
        assert submgr.deletes == ["sub-1"]
        assert xapp.book.active() == []
    finally:
        xapp.close()


def test_requestor_must_match_unless_told_not_to() -> None:
    from xapp.adapters.e2.records import ActiveSubscription

    sub = ActiveSubscription("s", MEID, RicRequestId(123, 7), 2, 3, 1)
    strict, lax = SubscriptionBook(123), SubscriptionBook(123, match_requestor=False)
    for book in (strict, lax):
        book.add(sub)
    assert strict.lookup(RicRequestId(123, 7), 2) == sub
    assert strict.lookup(RicRequestId(1, 7), 2) is None  # the simulator's requestor
    assert lax.lookup(RicRequestId(1, 7), 2) == sub
    assert strict.lookup(RicRequestId(123, 7), 3) is None  # other RAN function
    assert strict.lookup(RicRequestId(123, 8), 2) is None  # other instance
    assert strict.misses == 3


def test_per_ue_style_where_offered(submgr: StandInSubmgr) -> None:
    xapp = Xapp(submgr, static(styles=(1, 4)), styles=(1, 4, 5))
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        [doc] = submgr.posts
        details = doc["SubscriptionDetails"]
        assert len(details) == 2  # style 5 is not offered
        assert bytes(details[1]["ActionToBeSetupList"][0]["ActionDefinition"]) == \
            kpm_encode.encode_action_definition(["DRB.UEThpDl", "DRB.UEThpUl"], 1000, 3, style=4)
        assert {s.report_style for s in xapp.book.active()} == {1, 4}
        assert {s.request.instance for s in xapp.book.active()} == {7, 8}
    finally:
        xapp.close()


def test_error_cause_fails_and_retries_with_back_off(submgr: StandInSubmgr) -> None:
    now = [1000.0]
    submgr.error_cause = "RICSubscriptionFailure. E2NodeCause: (Cause:1, Value 0)"
    xapp = Xapp(submgr, static(), clock=lambda: now[0])
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "failed", timeout_s=5)
        view = xapp.sub.view()["nodes"][MEID]["subscription"]
        assert "RICSubscriptionFailure" in view["last_error"]
        assert wait_until(lambda: submgr.deletes == ["sub-1"], timeout_s=5)  # cleaned up at submgr
        assert xapp.book.active() == []
        xapp.sub.step()  # within the back-off: no new request
        assert len(submgr.posts) == 1
        submgr.error_cause = ""
        now[0] += 1.5
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        assert len(submgr.posts) == 2 and len(xapp.book.active()) == 1
        assert xapp.sub.counters["instances_failed"] == 1
    finally:
        xapp.close()


def test_submgr_success_with_its_blank_cause_is_active(submgr: StandInSubmgr) -> None:
    # What the real submgr sends on success: ErrorCause " " and ErrorSource "E2Node".
    xapp = Xapp(submgr, static())
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        view = xapp.sub.view()["nodes"][MEID]["subscription"]
        assert all(i["state"] == "active" and i["error"] == "" for i in view["instances"])
        assert xapp.sub.counters.get("instances_failed", 0) == 0
    finally:
        xapp.close()


def test_e2_timeout_is_a_failure_with_its_type(submgr: StandInSubmgr) -> None:
    submgr.timeout = True
    xapp = Xapp(submgr, static())
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "failed", timeout_s=5)
        err = xapp.sub.view()["nodes"][MEID]["subscription"]["last_error"]
        assert "E2 RICSubscriptionResponse timeout" in err and "E2-Timeout" in err
        assert "SUBMGR" in err and xapp.book.active() == []
    finally:
        xapp.close()


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
    from xapp.adapters.e2.subscriptions import _parse_callback
    assert _parse_callback({"SubscriptionId": "s", "SubscriptionInstances": [inst]}) == \
        ("s", [want])


def test_submgr_refusal_and_silence_are_retried(submgr: StandInSubmgr) -> None:
    now = [0.0]
    submgr.status = 503  # E2 link down at submgr
    xapp = Xapp(submgr, static(), clock=lambda: now[0])
    try:
        xapp.sub.step()
        assert xapp.state() == "failed" and "503" in xapp.sub.view()["nodes"][MEID][
            "subscription"]["last_error"]
        submgr.status, submgr.notify = 201, False  # accepted, never answered
        now[0] += 1.0
        xapp.sub.step()
        assert xapp.state() == "pending"
        now[0] += 6.0  # past response_timeout_s
        xapp.sub.step()
        assert xapp.sub.counters["response_timeouts"] == 1 and submgr.deletes == ["sub-2"]
        submgr.notify = True
        now[0] += 10.0
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
    finally:
        xapp.close()


class Toggle:
    """A node source whose node can go away and come back (an E2 link reset)."""

    def __init__(self) -> None:
        self.node = static().nodes()[0]
        self.connected = True

    def nodes(self) -> list[E2Node]:
        return [E2Node(self.node.inventory_name, self.node.global_id, self.node.kpm,
                       self.connected)]


def test_node_reconnect_resubscribes(submgr: StandInSubmgr) -> None:
    source = Toggle()
    xapp = Xapp(submgr, source)
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        source.connected = False
        xapp.sub.step()
        assert xapp.state() == "disconnected" and xapp.book.active() == []
        assert submgr.deletes == ["sub-1"]
        source.connected = True
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        assert [s.subscription_id for s in xapp.book.active()] == ["sub-2"]
    finally:
        xapp.close()


@pytest.mark.parametrize("body", [
    b"", b"[]", b"{", b'{"SubscriptionId": 5, "SubscriptionInstances": []}',
    b'{"SubscriptionId": "sub-1"}',
    b'{"SubscriptionId": "sub-1", "SubscriptionInstances": [{"XappEventInstanceId": 1}]}',
    b'{"SubscriptionId": "sub-1", "SubscriptionInstances": '
    b'[{"XappEventInstanceId": 1, "E2EventInstanceId": 70000}]}',
    b'{"SubscriptionId": "sub-1", "SubscriptionInstances": '
    b'[{"XappEventInstanceId": true, "E2EventInstanceId": 7}]}',
    b"[" * 100_000,
])
def test_malformed_callbacks_are_refused_and_change_nothing(submgr: StandInSubmgr,
                                                            body: bytes) -> None:
    submgr.notify = False
    xapp = Xapp(submgr, static())
    try:
        xapp.sub.step()
        before = xapp.sub.view()
        req = urllib.request.Request(f"http://127.0.0.1:{xapp.http.port}{CALLBACK_PATH}",
                                     data=body, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                code = r.status
        except urllib.error.HTTPError as exc:
            code = exc.code
        assert code in (400, 413)
        after = xapp.sub.view()
        assert after["nodes"] == before["nodes"] and xapp.book.active() == []
    finally:
        xapp.close()


def test_client_refuses_bad_urls_and_answers() -> None:
    with pytest.raises(ValueError):
        SubmgrClient("submgr:8088")
    client = SubmgrClient("http://127.0.0.1:1/ric/v1", timeout_s=1)
    assert client.base == "http://127.0.0.1:1"
    with pytest.raises(SubmgrError):
        client.subscribe({})


def test_restart_deletes_stale_and_subscribes_again(submgr: StandInSubmgr,
                                                     redis: RedisServer) -> None:
    from xapp.adapters.sdl import ricsdl_backend

    first = Xapp(submgr, static(), ids=SdlIdStore("mcw-e2-test", ricsdl_backend))
    try:
        first.sub.step()
        assert wait_until(lambda: first.state() == "active", timeout_s=5)
    finally:
        first.close()  # killed: no stop(), sub-1 stays live at submgr
    assert SdlIdStore("mcw-e2-test", ricsdl_backend).load() == {"sub-1"}
    second = Xapp(submgr, static(), ids=SdlIdStore("mcw-e2-test", ricsdl_backend))
    try:
        second.sub.step()
        assert submgr.deletes == ["sub-1"]
        assert second.sub.counters["stale_deleted"] == 1
        assert wait_until(lambda: second.state() == "active", timeout_s=5)
        assert [s.subscription_id for s in second.book.active()] == ["sub-2"]
        assert SdlIdStore("mcw-e2-test", ricsdl_backend).load() == {"sub-2"}
        second.sub.stop()
        assert submgr.deletes == ["sub-1", "sub-2"]
        assert SdlIdStore("mcw-e2-test", ricsdl_backend).load() == set()
    finally:
        second.close()


def write_rnib(setup_request: bytes, name: str, status: int) -> None:
    """The E2 manager's R-NIB entries for one gNB, as rNibWriter.go writes them."""
    from pycrate_asn1dir import E2AP
    from ricsdl.syncstorage import SyncStorage
    from ricxappframe.entities.rnib.nb_identity_pb2 import NbIdentity
    from ricxappframe.entities.rnib.nodeb_info_pb2 import NodebInfo

    pdu = E2AP.E2AP_PDU_Descriptions.E2AP_PDU
    pdu.from_aper(setup_request)
    ies = pdu.get_val()[1]["value"][1]["protocolIEs"]
    [functions] = [ie["value"][1] for ie in ies if ie["id"] == 10]  # RANfunctionsAdded
    info = NodebInfo(ran_name=name, connection_status=status, node_type=2)
    info.global_nb_id.plmn_id, info.global_nb_id.nb_id = "02f829", "0000000a"
    for item in functions:
        fn = item["value"][1]
        rf = info.gnb.ran_functions.add()
        rf.ran_function_id, rf.ran_function_revision = fn["ranFunctionID"], \
            fn["ranFunctionRevision"]
        rf.ran_function_oid = fn["ranFunctionOID"]
        hexed = fn["ranFunctionDefinition"].hex().upper()
        # XER: hex pairs separated by spaces, in lines, as in the E2 manager's test data.
        rf.ran_function_definition = "\n".join(
            " ".join(hexed[i:i + 2] for i in range(j, min(j + 32, len(hexed)), 2))
            for j in range(0, len(hexed), 32))
    ident = NbIdentity(inventory_name=name, connection_status=status)
    ident.global_nb_id.plmn_id, ident.global_nb_id.nb_id = "02f829", "0000000a"
    sdl = SyncStorage()
    try:
        sdl.set("e2Manager", {f"RAN:{name}": info.SerializeToString()})
        sdl.add_member("e2Manager", "GNB", {ident.SerializeToString()})
    finally:
        sdl.close()


def test_rnib_node_is_discovered_and_subscribed(submgr: StandInSubmgr,
                                                redis: RedisServer) -> None:
    from xapp.adapters.e2.nodes import RnibNodes, ricsdl_rnib_backend

    write_rnib((DATA / "e2setup_req.bin").read_bytes(), MEID, status=1)
    source = RnibNodes(ricsdl_rnib_backend, kpm_decode.decode_ran_function_description)
    # The simulator offers RLC volumes and L1 measurements, not DRB.UEThp*: only the offered
    # ones of the list are asked for.
    wanted = ("DRB.UEThpDl", "DRB.RlcSduTransmittedVolumeDL", "L1M.DL-SS-RSRP.SSB")
    xapp = Xapp(submgr, source, styles=(1, 4), measurements=wanted)
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        [doc] = submgr.posts
        assert doc["Meid"] == MEID and doc["RANFunctionID"] == GOLDEN_FUNCTION
        node = xapp.sub.view()["nodes"][MEID]
        assert node["kpm"]["oid"] == "OID123" and node["kpm"]["revision"] == 2
        assert node["global_id"] == "02f829-0000000a"
        version = node["kpm"]["version"]
        details = doc["SubscriptionDetails"]
        assert len(details) == 2  # style 1 and the per-UE style 4, both offered
        assert bytes(details[0]["EventTriggers"]) == kpm_encode.encode_event_trigger(1000, version)
        for detail, style in zip(details, (1, 4), strict=True):
            assert bytes(detail["ActionToBeSetupList"][0]["ActionDefinition"]) == \
                kpm_encode.encode_action_definition(list(wanted[1:]), 1000, version, style=style)
        [active, *_] = xapp.book.active()
        assert active.measurement_ids[1] == "DRB.RlcSduTransmittedVolumeDL"
    finally:
        xapp.close()
        source.close()


def test_rnib_node_without_wanted_measurements_gets_what_it_offers_that_maps(
        submgr: StandInSubmgr, redis: RedisServer) -> None:
    # The simulator offers none of the configured names; it is subscribed for what it offers
    # that the table maps (its RLC SDU volumes), not left unusable.
    from xapp.adapters.e2.nodes import RnibNodes, ricsdl_rnib_backend

    write_rnib((DATA / "e2setup_req.bin").read_bytes(), MEID, status=1)
    source = RnibNodes(ricsdl_rnib_backend, kpm_decode.decode_ran_function_description)
    xapp = Xapp(submgr, source)
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        [doc] = submgr.posts
        [action] = doc["SubscriptionDetails"][0]["ActionToBeSetupList"]
        style, _kind, names, _period = kpm_decode.decode_action_definition(
            bytes(action["ActionDefinition"]), "v3")
        assert style == 1
        assert names == ("DRB.RlcSduTransmittedVolumeDL", "DRB.RlcSduTransmittedVolumeUL")
    finally:
        xapp.close()
        source.close()


class Offering:
    """A node source with one node offering exactly ``names`` in style 1."""

    def __init__(self, names: tuple[str, ...], *, dialect: str = "v3",
                 cell: str | None = None) -> None:
        from xapp.adapters.e2.records import KpmRanFunction

        kpm = KpmRanFunction(GOLDEN_FUNCTION, "", 0, "ORAN-E2SM-KPM", 3,
                             {1: ("E2 Node Measurement", 1, 1, 1),
                              4: ("per UE", 4, 1, 3)},
                             measurements={1: names, 4: names}, dialect=dialect)
        self.node = E2Node(MEID, MEID, kpm, cell=cell, prb_total=106)

    def nodes(self) -> list[E2Node]:
        return [self.node]


def test_node_offering_nothing_that_maps_is_unusable(submgr: StandInSubmgr) -> None:
    xapp = Xapp(submgr, Offering(("L1M.UL-SRS-RSRP", "DRB.PacketLossRateULDist")))
    try:
        xapp.sub.step()
        assert xapp.state() == "unusable" and submgr.posts == []
        assert "measurements" in xapp.sub.view()["nodes"][MEID]["subscription"]["last_error"]
    finally:
        xapp.close()


def test_family_names_are_added_and_the_cell_goes_into_the_action_definition(
        submgr: StandInSubmgr) -> None:
    # srsRAN's DU offers CQI/RSRP/RSRQ beside the 28.552 names: both are asked for; the
    # node's cell (R-NIB or configuration) is in the style 1 action definition and in the
    # active subscription, so cell-level reports have a cell.
    cell = "00f110-00000000a"
    xapp = Xapp(submgr, Offering(("DRB.UEThpDl", "CQI", "RSRP", "Other"), cell=cell))
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        [action] = submgr.posts[0]["SubscriptionDetails"][0]["ActionToBeSetupList"]
        raw = bytes(action["ActionDefinition"])
        assert kpm_decode.decode_action_definition(raw, "v3")[2] == ("DRB.UEThpDl", "CQI", "RSRP")
        _, value = kpm_decode.decode_kpm_value("action_definition", raw)
        assert value["actionDefinition-formats"][1]["cellGlobalID"] == (
            "nR-CGI", {"pLMNIdentity": bytes.fromhex("00f110"), "nRCellIdentity": (0xa, 36)})
        [active] = xapp.book.active()
        assert (active.cell, active.family, active.prb_total) == (cell, "srsran", 106)
        assert active.measurements == ("DRB.UEThpDl", "CQI", "RSRP")
        node = xapp.sub.view()["nodes"][MEID]
        assert node["cell"] == cell and node["dialect"] == {"assumed": "v3", "detected": None}
    finally:
        xapp.close()


def test_flexric_node_gets_style_4_in_its_own_dialect(submgr: StandInSubmgr) -> None:
    names = ("DRB.UEThpDl", "RRU.PrbTotDl", "DRB.PdcpSduVolumeDL")
    xapp = Xapp(submgr, Offering(names, dialect="flexric-v3"), styles=(4,))
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        [action] = submgr.posts[0]["SubscriptionDetails"][0]["ActionToBeSetupList"]
        raw = bytes(action["ActionDefinition"])
        # FlexRIC's CHOICE has format 4 in its root: the bytes read under flexric-v3 only.
        assert kpm_decode.decode_kpm_value("action_definition", raw)[0] == "flexric-v3"
        assert kpm_decode.decode_action_definition(raw, "flexric-v3")[:3] == (
            4, "actionDefinition-Format4", ("DRB.UEThpDl", "RRU.PrbTotDl", "DRB.PdcpSduVolumeDL"))
        [active] = xapp.book.active()
        assert (active.dialect, active.family) == ("flexric-v3", "oai")
    finally:
        xapp.close()


def test_a_step_makes_a_bounded_number_of_requests(submgr: StandInSubmgr) -> None:
    from xapp.adapters.e2.subscriptions import MAX_REQUESTS_PER_STEP

    submgr.notify = False
    names = [f"gnb_{i:04d}" for i in range(MAX_REQUESTS_PER_STEP + 3)]
    xapp = Xapp(submgr, StaticNodes([StaticNode(n, 2, 3) for n in names]))
    try:
        xapp.sub.step()
        assert len(submgr.posts) == MAX_REQUESTS_PER_STEP
        assert xapp.sub.counts()["requests_deferred"] == 3
        xapp.sub.step()
        assert sorted(p["Meid"] for p in submgr.posts) == names
        assert set(xapp.sub.states()) == {"pending"}
    finally:
        xapp.close()


def test_stop_fits_its_time_and_leaves_the_rest_to_the_next_run(submgr: StandInSubmgr) -> None:
    names = [f"gnb_{i:04d}" for i in range(6)]
    nodes = StaticNodes([StaticNode(n, GOLDEN_FUNCTION, 3) for n in names])
    ids = MemoryIdStore()
    now = [0.0]
    xapp = Xapp(submgr, nodes, ids=ids, clock=lambda: now[0])
    try:
        xapp.sub.step()
        assert wait_until(lambda: set(xapp.sub.states()) == {"active"}, timeout_s=5)
        made = {n["subscription"]["id"] for n in xapp.sub.view()["nodes"].values()}
        assert len(made) == 6

        def slow_delete() -> None:  # each delete takes 0.3 s of the subscriber's clock
            now[0] += 0.3

        submgr.on_delete = slow_delete
        xapp.sub.stop(timeout_s=0.7)
        # Requests start only before the deadline: at 0, 0.3 and 0.6 s, none at 0.9 s.
        assert len(submgr.deletes) == 3, submgr.deletes
        assert now[0] == pytest.approx(0.9)
        left = made - set(submgr.deletes)
        assert xapp.sub.counts()["delete_deferred"] == len(left) == 3
        assert ids.load() == left  # still listed, for the next start to delete
    finally:
        xapp.close()
    submgr.on_delete = lambda: None
    again = Xapp(submgr, StaticNodes([]), ids=ids)
    try:
        again.sub.step()
        assert set(submgr.deletes) == made and ids.load() == set()
    finally:
        again.close()


def test_a_detected_dialect_is_what_the_next_subscription_is_encoded_in(
        submgr: StandInSubmgr) -> None:
    # The description's guess was v3; the node's indications decoded as FlexRIC's: a
    # (re)subscription encodes its action definitions the way the node reads them.
    names = ("DRB.UEThpDl", "RRU.PrbTotDl")
    xapp = Xapp(submgr, Offering(names, dialect="v3"), styles=(4,))
    xapp.book.remember_dialect(MEID, GOLDEN_FUNCTION, "flexric-v3")
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        [action] = submgr.posts[0]["SubscriptionDetails"][0]["ActionToBeSetupList"]
        assert kpm_decode.decode_kpm_value("action_definition",
                                           bytes(action["ActionDefinition"]))[0] == "flexric-v3"
        [active] = xapp.book.active()
        assert (active.dialect, active.family) == ("flexric-v3", "oai")
        assert xapp.sub.view()["nodes"][MEID]["dialect"] == {"assumed": "v3",
                                                             "detected": "flexric-v3"}
    finally:
        xapp.close()


def test_a_style_that_cannot_be_encoded_is_left_out_not_the_node(
        submgr: StandInSubmgr) -> None:
    # Style 5 names UEs the xApp does not know: left out (counted); style 1 still goes.
    names = ("DRB.UEThpDl",)
    offering = Offering(names)
    offering.node.kpm.report_styles[5] = ("multiple UEs", 5, 1, 3)  # type: ignore[union-attr]
    xapp = Xapp(submgr, offering, styles=(1, 5))
    try:
        xapp.sub.step()
        assert wait_until(lambda: xapp.state() == "active", timeout_s=5)
        assert [d["XappEventInstanceId"] > 0 for d in
                submgr.posts[0]["SubscriptionDetails"]] == [True]
        assert xapp.sub.counters["encode_errors"] == 1
    finally:
        xapp.close()
    # Only styles that cannot be encoded: the node is unusable, with the reasons.
    xapp = Xapp(submgr, Offering(names, dialect="onf-v2"), styles=(4,))
    try:
        xapp.sub.step()
        assert xapp.state() == "unusable"
        assert "style 4" in xapp.sub.view()["nodes"][MEID]["subscription"]["last_error"]
    finally:
        xapp.close()


def test_replicas_subscribe_only_the_nodes_of_their_shards(submgr: StandInSubmgr) -> None:
    """Several replicas: a node belongs to the holder of its name's shard (OwnedNodes); when
    the shard moves, the old owner deletes the subscription and the new one subscribes."""
    from xapp.adapters.e2.nodes import OwnedNodes
    from xapp.core.ownership import ShardFence
    from xapp.core.shards import shard_of

    first, second = ShardFence(64), ShardFence(64)
    shard = shard_of(MEID)
    first.grant(shard, float("inf"))
    a = Xapp(submgr, OwnedNodes(static(), first.allows))
    b = Xapp(submgr, OwnedNodes(static(), second.allows))
    try:
        a.sub.step()
        b.sub.step()
        assert wait_until(lambda: a.state() == "active", timeout_s=5)
        assert MEID not in b.sub.view()["nodes"] and len(submgr.posts) == 1
        first.revoke(shard)
        second.grant(shard, float("inf"))
        a.sub.step()
        b.sub.step()
        assert submgr.deletes == ["sub-1"] and a.book.active() == []
        assert wait_until(lambda: b.state() == "active", timeout_s=5)
        assert len(submgr.posts) == 2
    finally:
        a.close()
        b.close()


def _own(grants: Any, replica: Any, shard: int) -> None:
    """``replica`` is granted ``shard`` and subscribes the node in one step."""
    grants.grant(shard, float("inf"))
    replica.sub.step()
    assert wait_until(lambda: replica.state() == "active", timeout_s=5)


def _sharded_pair(submgr: StandInSubmgr, records: NodeRecords) -> tuple[Any, Any, Any, Any]:
    """Replicas a and b over one set of node records; a holds MEID's shard."""
    from xapp.adapters.e2.nodes import OwnedNodes
    from xapp.core.ownership import ShardFence

    first, second = ShardFence(64), ShardFence(64)
    a = Xapp(submgr, OwnedNodes(static(), first.allows), records=records, owner="replica-a")
    b = Xapp(submgr, OwnedNodes(static(), second.allows), records=records, owner="replica-b")
    return first, second, a, b


def test_the_new_owner_deletes_what_a_dead_replica_left(submgr: StandInSubmgr,
                                                        redis: RedisServer) -> None:
    """Replica a dies with its subscription live at submgr; b takes the node's shard over,
    finds a's subscription in the node's SDL record and deletes it before subscribing, and
    the record then names b's."""
    from xapp.adapters.dbaas import redis_from_env
    from xapp.adapters.sdl import ricsdl_backend
    from xapp.core.shards import shard_of

    records = SdlNodeRecords("mcw-e2-test", lambda: redis_from_env("mcw-e2-test"))
    first, second, a, b = _sharded_pair(submgr, records)
    shard = shard_of(MEID)
    posts_at_delete: list[int] = []
    submgr.on_delete = lambda: posts_at_delete.append(len(submgr.posts))
    try:
        _own(first, a, shard)
        # A key of the xApp's SDL namespace, as ricsdl (the rest of SDL) reads it.
        sdl = ricsdl_backend()
        try:
            stored = sdl.find_and_get("mcw-e2-test", "e2/node/*")
        finally:
            sdl.close()
        assert {k: json.loads(v) for k, v in stored.items()} == {
            f"e2/node/{MEID}": {"id": "sub-1", "owner": "replica-a"}}
        a.close()  # killed: no stop(), no step; sub-1 stays live at submgr
        second.grant(shard, float("inf"))
        b.sub.step()
        assert submgr.deletes == ["sub-1"] and posts_at_delete == [1]  # before b's POST
        assert b.sub.counters["taken_over"] == 1
        assert wait_until(lambda: b.state() == "active", timeout_s=5)
        assert [s.subscription_id for s in b.book.active()] == ["sub-2"]
        assert records.get(MEID) == NodeSubscription("sub-2", "replica-b")
        b.sub.stop()
        assert submgr.deletes == ["sub-1", "sub-2"] and records.get(MEID) is None
    finally:
        b.close()


def test_a_late_old_owner_does_not_clear_the_new_owners_record(submgr: StandInSubmgr,
                                                               redis: RedisServer) -> None:
    """A partitioned replica learns it lost the shard after the new owner took the node over:
    its own delete is a no-op at submgr, and it leaves the new owner's record alone."""
    from xapp.adapters.dbaas import redis_from_env
    from xapp.core.shards import shard_of

    records = SdlNodeRecords("mcw-e2-test", lambda: redis_from_env("mcw-e2-test"))
    first, second, a, b = _sharded_pair(submgr, records)
    shard = shard_of(MEID)
    try:
        _own(first, a, shard)
        first.revoke(shard)
        _own(second, b, shard)  # takes over: deletes sub-1, subscribes sub-2
        a.sub.step()  # a sees the node gone only now and deletes sub-1 again
        assert submgr.deletes == ["sub-1", "sub-1"] and a.book.active() == []
        assert records.get(MEID) == NodeSubscription("sub-2", "replica-b")
    finally:
        a.close()
        b.close()


def test_a_clean_handover_deletes_once(submgr: StandInSubmgr) -> None:
    """The old owner deleted and cleared its record first: the new one has nothing to take
    over; a record that cannot be deleted at submgr holds the new subscription back."""
    from xapp.core.shards import shard_of

    records = MemoryNodeRecords()
    first, second, a, b = _sharded_pair(submgr, records)
    shard = shard_of(MEID)
    try:
        _own(first, a, shard)
        first.revoke(shard)
        a.sub.step()
        assert submgr.deletes == ["sub-1"] and records.get(MEID) is None
        _own(second, b, shard)
        assert submgr.deletes == ["sub-1"] and "taken_over" not in b.sub.counters
        # b dies; a gets the node back while submgr refuses deletes: a does not subscribe.
        second.revoke(shard)
        first.grant(shard, float("inf"))

        def refuse() -> None:
            raise ConnectionError("submgr down")
        submgr.on_delete = refuse
        posts = len(submgr.posts)
        a.sub.step()
        assert len(submgr.posts) == posts and a.state() == "failed"
        assert "sub-2" in a.sub.view()["nodes"][MEID]["subscription"]["last_error"]
        assert records.get(MEID) == NodeSubscription("sub-2", "replica-b")
    finally:
        a.close()
        b.close()


# --- issue 33, item 6: submgr as the real one answers ------------------------------------------


def test_a_delete_answered_400_is_retried_until_submgr_deletes_it(
        submgr: StandInSubmgr) -> None:
    """Stopped while submgr still handles the POST: its DELETE is answered 400, which is not
    "gone"; the stop tries again with doubling waits until 204, within its time."""
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    submgr.notify = False  # the POST's handling goes on: no notification yet
    ids = MemoryIdStore()
    xapp = Xapp(submgr, static(), ids=ids, clock=lambda: now[0], sleep=sleep)
    attempts: list[float] = []

    def on_delete() -> None:
        attempts.append(now[0])
        if len(attempts) == 3:
            submgr.finish("sub-1")  # submgr's handling ends meanwhile

    try:
        xapp.sub.step()
        assert xapp.state() == "pending" and submgr.ongoing == {"sub-1"}
        submgr.on_delete = on_delete
        xapp.sub.stop(timeout_s=10)
        assert submgr.delete_answers == [("sub-1", 400), ("sub-1", 400), ("sub-1", 204)]
        assert attempts == [0.0, 0.25, 0.75]
        assert ids.load() == set() and xapp.sub.counts()["delete_busy"] == 2
    finally:
        xapp.close()


def test_a_delete_still_answered_400_at_the_end_of_stop_is_left_for_the_next_run(
        submgr: StandInSubmgr) -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    submgr.notify = False
    ids = MemoryIdStore()
    xapp = Xapp(submgr, static(), ids=ids, clock=lambda: now[0], sleep=sleep)
    try:
        xapp.sub.step()
        xapp.sub.stop(timeout_s=1.0)
        # 0, 0.25 and 0.75 s; the next wait (1 s) would end past the stop's time.
        assert submgr.delete_answers == [("sub-1", 400)] * 3
        assert ids.load() == {"sub-1"}  # not "already gone": the next run deletes it
    finally:
        xapp.close()
    submgr.finish("sub-1")
    again = Xapp(submgr, StaticNodes([]), ids=ids)
    try:
        again.sub.step()
        assert submgr.delete_answers[-1] == ("sub-1", 204) and ids.load() == set()
    finally:
        again.close()


def test_a_delete_answered_400_in_a_step_is_retried_by_later_steps(
        submgr: StandInSubmgr) -> None:
    now = [0.0]
    submgr.notify = False
    ids = MemoryIdStore()
    xapp = Xapp(submgr, static(), ids=ids, clock=lambda: now[0])
    try:
        xapp.sub.step()
        now[0] += 6.0  # past response_timeout_s: the attempt is dropped, sub-1 deleted
        xapp.sub.step()
        assert submgr.delete_answers == [("sub-1", 400)] and "sub-1" in ids.load()
        assert xapp.sub.view()["stale"] == ["sub-1"]
        xapp.sub.step()  # within its back-off (1 s): not asked again yet
        assert len(submgr.delete_answers) == 1
        submgr.finish("sub-1")
        now[0] += 1.0
        xapp.sub.step()
        assert submgr.delete_answers[-1] == ("sub-1", 204) and "sub-1" not in ids.load()
        assert xapp.sub.view()["stale"] == [] and len(submgr.posts) == 2  # asked again
    finally:
        xapp.close()


def test_a_restart_deletes_each_id_once_and_resubscribes_past_submgrs_ongoing_delete(
        submgr: StandInSubmgr) -> None:
    """The id store and the node's record both name the previous run's subscription: it is
    deleted once; submgr's asynchronous delete then refuses the next POSTs ("Tracker ... is
    ongoing"), which are asked again at the shortest back-off until the node is active."""
    now = [0.0]
    ids, records = MemoryIdStore(), MemoryNodeRecords()
    first = Xapp(submgr, static(), ids=ids, records=records, owner="r", clock=lambda: now[0])
    try:
        first.sub.step()
        assert wait_until(lambda: first.state() == "active", timeout_s=5)
    finally:
        first.close()  # killed: sub-1 stays live, in the id store and in the node's record
    assert ids.load() == {"sub-1"} and records.get(MEID) == NodeSubscription("sub-1", "r")
    submgr.busy_after_delete = 3
    second = Xapp(submgr, static(), ids=ids, records=records, owner="r", clock=lambda: now[0])
    try:
        second.sub.step()
        for busy in range(1, 4):
            assert wait_until(lambda: second.state() == "failed", timeout_s=5)
            view = second.sub.view()["nodes"][MEID]["subscription"]
            assert "is ongoing" in view["last_error"]
            assert second.sub.counts()["submgr_busy"] == busy
            now[0] += second.settings.retry_min_s  # not doubled: asked again at once
            second.sub.step()
        assert wait_until(lambda: second.state() == "active", timeout_s=5)
        assert submgr.deletes.count("sub-1") == 1, submgr.deletes
        assert len(submgr.posts) == 5  # first's, three refused, the one that worked
        assert records.get(MEID) == NodeSubscription("sub-5", "r")
    finally:
        second.close()


def test_a_node_without_a_cell_is_logged_once(submgr: StandInSubmgr,
                                              caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    submgr.notify = False  # never answered: each attempt times out and is made again
    nodes = StaticNodes([StaticNode(MEID, GOLDEN_FUNCTION, 3, (1,)),
                         StaticNode("gnb_with_cell", GOLDEN_FUNCTION, 3, (1,),
                                    cell="02f839-00000000a")])
    xapp = Xapp(submgr, nodes, clock=lambda: now[0])
    try:
        with caplog.at_level("WARNING", logger="xapp.adapters.e2.subscriptions"):
            for _ in range(6):  # requested, timed out, requested again...
                xapp.sub.step()
                now[0] += 130.0
        assert len(submgr.posts) == 6  # three attempts of each node
        warned = [r.getMessage() for r in caplog.records if "has no cell" in r.getMessage()]
        assert len(warned) == 1 and MEID in warned[0], warned
        assert "controls.e2.nodes[].cell" in warned[0] and "R-NIB" in warned[0]
    finally:
        xapp.close()


def test_the_client_takes_400_for_busy_and_204_or_404_for_gone() -> None:
    from xapp.adapters.e2.subscriptions import SubmgrBusy

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
