"""What a subscription asks a node for, as the stand-in Subscription Manager receives it: the
styles and measurements a node offers, its family's names, its cell and dialect in the action
definition; nodes from the R-NIB (the E2 manager's protobufs with the golden E2 Setup Request's
RAN function, in a real redis-server)."""

from __future__ import annotations

import pytest

from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from tests.xapp.adapters.e2.submgr_stand_in import (
    DATA,
    GOLDEN_FUNCTION,
    MEID,
    StandInSubmgr,
    Xapp,
    static,
)
from xapp.adapters.e2 import kpm_decode, kpm_encode
from xapp.adapters.e2.nodes import StaticNode, StaticNodes
from xapp.adapters.e2.records import E2Node


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


def test_a_node_without_a_cell_is_logged_once(submgr: StandInSubmgr,
                                              caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    submgr.notify = False  # never answered: each attempt times out and is made again
    nodes = StaticNodes([StaticNode(MEID, GOLDEN_FUNCTION, 3, (1,)),
                         StaticNode("gnb_with_cell", GOLDEN_FUNCTION, 3, (1,),
                                    cell="02f839-00000000a")])
    xapp = Xapp(submgr, nodes, clock=lambda: now[0])
    try:
        with caplog.at_level("WARNING", logger="xapp.adapters.e2.subscription_request"):
            for _ in range(6):  # requested, timed out, requested again...
                xapp.sub.step()
                now[0] += 130.0
        assert len(submgr.posts) == 6  # three attempts of each node
        warned = [r.getMessage() for r in caplog.records if "has no cell" in r.getMessage()]
        assert len(warned) == 1 and MEID in warned[0], warned
        assert "controls.e2.nodes[].cell" in warned[0] and "R-NIB" in warned[0]
    finally:
        xapp.close()
