"""The subscriber against the stand-in Subscription Manager on loopback
(:mod:`tests.xapp.adapters.e2.submgr_stand_in`): subscribing, submgr's answers, failures and
back-off, deleting at stop and at restart, replicas handing nodes over.  The golden RIC
Indication of the O-RAN SC KPM simulator (instance 7, RAN function 2) goes through E3's ingest:
accepted for the subscription, refused without it."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.support.polling import wait_until
from tests.xapp.adapters.e2.submgr_stand_in import (
    DATA,
    GOLDEN_FUNCTION,
    GOLDEN_INSTANCE,
    GOLDEN_REQUESTOR,
    MEID,
    StandInSubmgr,
    Xapp,
    own,
    sharded_pair,
    static,
)
from xapp.adapters.e2 import kpm_encode
from xapp.adapters.e2.nodes import StaticNode, StaticNodes
from xapp.adapters.e2.records import E2Node, RicRequestId
from xapp.adapters.e2.submgr_client import CALLBACK_PATH
from xapp.adapters.e2.subscriber import MAX_REQUESTS_PER_STEP
from xapp.adapters.e2.subscription_book import SubscriptionBook
from xapp.adapters.e2.subscription_store import MemoryIdStore, MemoryNodeRecords, NodeSubscription


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


def test_a_step_makes_a_bounded_number_of_requests(submgr: StandInSubmgr) -> None:
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


def test_a_clean_handover_deletes_once(submgr: StandInSubmgr) -> None:
    """The old owner deleted and cleared its record first: the new one has nothing to take
    over; a record that cannot be deleted at submgr holds the new subscription back."""
    from xapp.core.shards import shard_of

    records = MemoryNodeRecords()
    first, second, a, b = sharded_pair(submgr, records)
    shard = shard_of(MEID)
    try:
        own(first, a, shard)
        first.revoke(shard)
        a.sub.step()
        assert submgr.deletes == ["sub-1"] and records.get(MEID) is None
        own(second, b, shard)
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
