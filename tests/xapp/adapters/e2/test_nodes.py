"""E2 nodes from the E2 manager's R-NIB in a real redis-server, and from configuration.

The R-NIB is written as the E2 manager writes it (NbIdentity members of the ``GNB`` group,
``RAN:<name>`` NodebInfo protobufs, the RAN function definition as XER hex text) with the
golden E2 Setup Request's RAN function; broken entries are skipped and counted.
"""

from __future__ import annotations

import pytest

from tests.support.paths import SHARED
from tests.support.redis_server import RedisServer
from xapp.adapters.e2 import kpm_decode
from xapp.adapters.e2.nodes import (
    MAX_DEFINITION_CHARS,
    CombinedNodes,
    RnibNodes,
    StaticNode,
    StaticNodes,
    definition_bytes,
    ricsdl_rnib_backend,
)
from xapp.adapters.e2.records import E2DecodeError

DATA = SHARED / "data" / "e2sim-kpm"


@pytest.mark.parametrize(("text", "expected"), [
    ("", b""), ("00", b"\x00"), ("20 63 6F\n 6E", b" con"), ("  a0ff  ", b"\xa0\xff"),
])
def test_definition_hex_text(text: str, expected: bytes) -> None:
    assert definition_bytes(text) == expected


@pytest.mark.parametrize("text", ["0", "zz", "20 6", "é0", "0" * (MAX_DEFINITION_CHARS + 2)])
def test_definition_refused(text: str) -> None:
    with pytest.raises(E2DecodeError):
        definition_bytes(text)


def test_static_nodes_offer_the_configured_styles() -> None:
    [node] = StaticNodes([StaticNode("gnb_1", 2, 3, (1, 4))]).nodes()
    assert node.connected and node.kpm is not None
    assert node.kpm.ran_function_id == 2 and node.kpm.kpm_version == 3
    assert set(node.kpm.report_styles) == {1, 4}
    assert node.kpm.report_styles[4][3] == 3  # multi-UE style reports in format 3


def _golden_function() -> tuple[int, int, str, str]:
    """(id, revision, OID, XER hex text) of the golden E2 Setup Request's RAN function."""
    from pycrate_asn1dir import E2AP

    pdu = E2AP.E2AP_PDU_Descriptions.E2AP_PDU
    pdu.from_aper((DATA / "e2setup_req.bin").read_bytes())
    ies = pdu.get_val()[1]["value"][1]["protocolIEs"]
    [functions] = [ie["value"][1] for ie in ies if ie["id"] == 10]
    fn = functions[0]["value"][1]
    hexed = fn["ranFunctionDefinition"].hex().upper()
    text = "\n".join(" ".join(hexed[i:i + 2] for i in range(j, min(j + 32, len(hexed)), 2))
                     for j in range(0, len(hexed), 32))
    return fn["ranFunctionID"], fn["ranFunctionRevision"], fn["ranFunctionOID"], text


def _write(name: str, status: int, functions: list[tuple[int, int, str, str]],
           nodeb: bytes | None = None) -> None:
    from ricsdl.syncstorage import SyncStorage
    from ricxappframe.entities.rnib.nb_identity_pb2 import NbIdentity
    from ricxappframe.entities.rnib.nodeb_info_pb2 import NodebInfo

    info = NodebInfo(ran_name=name, connection_status=status, node_type=2)
    info.global_nb_id.plmn_id, info.global_nb_id.nb_id = "02f829", name[-4:]
    for fid, rev, oid, text in functions:
        rf = info.gnb.ran_functions.add()
        rf.ran_function_id, rf.ran_function_revision = fid, rev
        rf.ran_function_oid, rf.ran_function_definition = oid, text
    ident = NbIdentity(inventory_name=name, connection_status=status)
    sdl = SyncStorage()
    try:
        sdl.set("e2Manager", {f"RAN:{name}": nodeb if nodeb is not None
                              else info.SerializeToString()})
        sdl.add_member("e2Manager", "GNB", {ident.SerializeToString()})
    finally:
        sdl.close()


def test_rnib_nodes_with_the_golden_kpm_function(redis: RedisServer) -> None:
    golden = _golden_function()
    _write("gnb_0001", 1, [golden, (3, 1, "1.3.6.1.4.1.53148.1.1.2.3", "00 01")])
    _write("gnb_0002", 2, [golden])  # DISCONNECTED
    _write("gnb_0003", 1, [(2, 2, "OID123", "not hex")])
    _write("gnb_0004", 1, [], nodeb=b"\xff\xff\xff")  # not a NodebInfo
    source = RnibNodes(ricsdl_rnib_backend, kpm_decode.decode_ran_function_description)
    try:
        nodes = {n.inventory_name: n for n in source.nodes()}
        assert set(nodes) == {"gnb_0001", "gnb_0002", "gnb_0003"}
        first = nodes["gnb_0001"]
        assert first.connected and first.global_id == "02f829-0001"
        assert first.kpm is not None and first.kpm.ran_function_id == 2
        assert first.kpm.oid == "OID123" and first.kpm.revision == 2
        assert first.kpm.short_name == "ORAN-E2SM-KPM"
        assert not nodes["gnb_0002"].connected and nodes["gnb_0002"].kpm is not None
        assert nodes["gnb_0003"].kpm is None
        counts = source.counters.as_dict()
        assert counts["bad_nodeb"] == 1
        assert counts["not_kpm"] >= 2  # the undecodable definition and the short one
        # A second poll decodes no definition again (cache) and gives the same nodes; the
        # broken entry is counted on every poll while it is there.
        assert {n.inventory_name for n in source.nodes()} == set(nodes)
        again = source.counters.as_dict()
        assert again["not_kpm"] == counts["not_kpm"]
        assert again["bad_nodeb"] == counts["bad_nodeb"] + 1
    finally:
        source.close()


def test_rnib_outage_raises_and_reconnects(redis: RedisServer) -> None:
    _write("gnb_0001", 1, [_golden_function()])
    source = RnibNodes(ricsdl_rnib_backend, kpm_decode.decode_ran_function_description)
    try:
        assert len(source.nodes()) == 1
        redis.stop()
        with pytest.raises(Exception):  # noqa: B017 - ricsdl's and redis-py's own errors
            source.nodes()
        redis.start()
        _write("gnb_0001", 1, [_golden_function()])  # the restarted Redis came back empty
        assert len(source.nodes()) == 1
    finally:
        source.close()


def test_configured_nodes_win_over_the_rnib() -> None:
    static = StaticNodes([StaticNode("gnb_1", 5, 2)])
    other = StaticNodes([StaticNode("gnb_1", 9, 3), StaticNode("gnb_2", 2, 3)])
    nodes = {n.inventory_name: n for n in CombinedNodes([static, other]).nodes()}
    assert set(nodes) == {"gnb_1", "gnb_2"}
    kpm = nodes["gnb_1"].kpm
    assert kpm is not None and kpm.ran_function_id == 5


def test_served_cell_from_the_rnib_entry() -> None:
    from ricxappframe.entities.rnib.nodeb_info_pb2 import NodebInfo

    from xapp.adapters.e2.nodes import served_cell

    info = NodebInfo()
    assert served_cell(info) == (None, None)  # not a gNB
    cell = info.gnb.served_nr_cells.add().served_nr_cell_information
    cell.cell_id = "02F829:0007AB50"
    bw = cell.choice_nr_mode.tdd.transmission_bandwidth
    bw.ncnrb = bw.DESCRIPTOR.fields_by_name["ncnrb"].enum_type.values_by_name["NRB106"].number
    assert served_cell(info) == ("02f829-0007ab50", 106)
    cell.cell_id = "not a cell"
    assert served_cell(info) == (None, 106)
    info.gnb.served_nr_cells.add()  # two cells: the node has no one cell
    assert served_cell(info) == (None, None)


def test_configured_nodes_start_with_their_versions_definitions() -> None:
    from xapp.adapters.e2 import aper
    from xapp.adapters.e2.nodes import StaticNode

    for version in (2, 3, 4):
        kpm = StaticNode("gnb", 2, version).node().kpm
        assert kpm is not None and kpm.dialect == aper.default_dialect(version)
