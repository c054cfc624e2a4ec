"""The CPE registry: validation, bounds, reverse lookups, and its SDL copy in a real Redis."""

from __future__ import annotations

import json

import pytest

from tests.support.redis_server import RedisServer
from xapp.adapters.e2.records import UeId
from xapp.adapters.e2.registry import (
    CpeEntry,
    CpeRegistry,
    RegistryError,
    RegistryLimits,
    canonical_cell,
    canonical_ue_key,
    parse_import,
)
from xapp.adapters.sdl import ricsdl_backend

GUAMI = "00f110-2-1-3"
UE1 = UeId(amf_ue_ngap_id=17, guami=GUAMI, ran_ue_id="00000000000000a1", c_rnti=4660)
CELL = "00f110-00000000a"


@pytest.mark.parametrize(("key", "canonical"), [
    ("amf:00F110-2-1-3:17", "amf:00f110-2-1-3:17"),
    ("ranue:00000000000000A1", "ranue:00000000000000a1"),
    ("f1ap:4294967295", "f1ap:4294967295"),
    ("crnti:65535", "crnti:65535"),
    (" crnti:1 ", "crnti:1"),
])
def test_ue_keys_are_canonical(key: str, canonical: str) -> None:
    assert canonical_ue_key(key) == canonical


@pytest.mark.parametrize("key", [
    "", "imsi:001010000000001", "crnti:65536", "f1ap:4294967296", "ranue:0", "ranue:" + "0" * 58,
    "amf:00f110-2-1-3:1099511627776", "amf:00f110:17", "crnti:1\n2", "crnti:" + "1" * 70,
    "crnti:-1",
])
def test_bad_ue_keys_are_refused(key: str) -> None:
    with pytest.raises(RegistryError):
        canonical_ue_key(key)


def test_ue_id_keys_are_accepted_as_they_come() -> None:
    """What the codec's UeId.keys() gives is what the registry stores, unchanged."""
    assert [canonical_ue_key(k) for k in UE1.keys()] == list(UE1.keys())  # noqa: SIM118


@pytest.mark.parametrize(("cell", "ok"), [
    (CELL, True), ("00F110-ABC", True), ("00f110", False), ("00f110-0123456789", False),
    ("x-1", False), ("00f110-1\n", True),
])
def test_cells(cell: str, ok: bool) -> None:
    if ok:
        assert canonical_cell(cell) == cell.strip().lower()
    else:
        with pytest.raises(RegistryError):
            canonical_cell(cell)


def test_lookups_in_memory() -> None:
    reg = CpeRegistry()
    reg.add("cpe-1", UE1.keys(), CELL)
    reg.add("cpe-2", ["crnti:1"], CELL)
    reg.add("cpe-3", ["crnti:2"], "00f110-00000000b")
    assert reg.cpe_for_keys(UE1.keys()) == "cpe-1"
    assert reg.cpe_for_keys(["crnti:9", "crnti:4660"]) == "cpe-1"  # any of the ids
    assert reg.cpe_for_keys(["crnti:9"]) is None
    assert reg.cpes_in_cell(CELL) == ("cpe-1", "cpe-2")
    assert reg.cpes_in_cell("00f110-00000000c") == ()
    assert reg.cell_of("cpe-3") == "00f110-00000000b"


def test_add_merges_and_replace_replaces() -> None:
    reg = CpeRegistry()
    reg.add("cpe-1", ["crnti:1"], CELL)
    e = reg.add("cpe-1", ["crnti:2", "crnti:1"])
    assert e == CpeEntry("cpe-1", ("crnti:1", "crnti:2"), CELL)
    e = reg.add("cpe-1", ["f1ap:7"], None, replace=True)
    assert e == CpeEntry("cpe-1", ("f1ap:7",), None)
    assert reg.cpe_for_keys(["crnti:1"]) is None and reg.cpes_in_cell(CELL) == ()


def test_an_id_belongs_to_one_cpe_and_a_refused_change_changes_nothing() -> None:
    reg = CpeRegistry()
    reg.add("cpe-1", ["crnti:1"])
    with pytest.raises(RegistryError, match="both cpe-1 and cpe-2"):
        reg.add("cpe-2", ["crnti:5", "crnti:1"], CELL)
    assert reg.entry("cpe-2") is None and reg.cpe_for_keys(["crnti:5"]) is None


@pytest.mark.parametrize(("args", "message"), [
    (("bad id!", []), "CPE id"),
    (("-lead", []), "CPE id"),
    (("cpe-1", ["crnti:1"] * 1 + [f"crnti:{i}" for i in range(2, 5)]), "more than 3"),
    (("cpe-1", "crnti:1"), "must be a list"),
    (("cpe-1", ["crnti:1"], "nowhere"), "cell"),
])
def test_invalid_entries(args: tuple[object, ...], message: str) -> None:
    reg = CpeRegistry(limits=RegistryLimits(max_ids_per_cpe=3))
    with pytest.raises(RegistryError, match=message):
        reg.add(*args)  # type: ignore[arg-type]
    assert len(reg) == 0


def test_bounded_number_of_cpes() -> None:
    reg = CpeRegistry(limits=RegistryLimits(max_cpes=2))
    reg.add("a", ["crnti:1"])
    reg.add("b", ["crnti:2"])
    with pytest.raises(RegistryError, match="at most 2"):
        reg.add("c", ["crnti:3"])
    reg.add("b", ["crnti:4"])  # an existing CPE can still change
    assert [e.cpe_id for e in reg.entries()] == ["a", "b"]


def test_remove_ids_or_the_cpe() -> None:
    reg = CpeRegistry()
    reg.add("cpe-1", ["crnti:1", "crnti:2"], CELL)
    assert reg.remove("cpe-1", ["CRNTI:1"])
    assert reg.entry("cpe-1") == CpeEntry("cpe-1", ("crnti:2",), CELL)
    assert reg.remove("cpe-1")
    assert not reg.remove("cpe-1")
    assert reg.cpes_in_cell(CELL) == () and reg.cpe_for_keys(["crnti:2"]) is None


def test_parse_import_json_and_csv() -> None:
    doc = {"cpes": [{"cpe_id": "cpe-1", "ue_ids": list(UE1.keys()), "cell": CELL},
                    {"cpe_id": "cpe-2", "ue_ids": ["f1ap:3"]}]}
    from_json = parse_import(json.dumps(doc).encode())
    csv_text = ("cpe_id,ue_ids,cell\n"
                f"cpe-1,{';'.join(UE1.keys())},{CELL}\n"
                "cpe-2,f1ap:3,\n")
    assert parse_import(csv_text.encode()) == from_json
    assert from_json[1] == CpeEntry("cpe-2", ("f1ap:3",), None)
    assert parse_import(json.dumps(doc["cpes"]).encode(), "json") == from_json


@pytest.mark.parametrize(("data", "message"), [
    (b"cpe,ids\nx,y\n", "header"),
    (b"cpe_id,ue_ids,cell\ncpe-1,crnti:1,\ncpe 2,crnti:2,\n", "line 3"),
    (b'{"cpes": [{"cpe_id": "cpe-1", "ue_ids": ["imsi:1"]}]}', "entry 0"),
    (b'{"cpes": 3}', "expected"),
    (b"[" * 50 + b"]" * 50, "import file"),
    (b"\xff\xfe", "UTF-8"),
])
def test_parse_import_refuses_with_the_place(data: bytes, message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        parse_import(data)


def test_parse_import_bounded() -> None:
    limits = RegistryLimits(max_cpes=2, max_import_bytes=1000)
    rows = "".join(f"c{i},crnti:{i},\n" for i in range(3))
    with pytest.raises(RegistryError, match="more than 2"):
        parse_import(("cpe_id,ue_ids,cell\n" + rows).encode(), limits=limits)
    with pytest.raises(RegistryError, match="larger than 1000"):
        parse_import(b" " * 1001, limits=limits)


def test_import_is_all_or_nothing() -> None:
    reg = CpeRegistry()
    reg.add("old", ["crnti:1"])
    with pytest.raises(RegistryError, match="both"):
        reg.import_entries([CpeEntry("a", ("crnti:2",)), CpeEntry("b", ("crnti:1",))])
    assert [e.cpe_id for e in reg.entries()] == ["old"]
    assert reg.import_entries([CpeEntry("a", ("crnti:2",))]) == 1
    assert [e.cpe_id for e in reg.entries()] == ["a", "old"]
    reg.import_entries([CpeEntry("b", ("crnti:1",))], replace_all=True)
    assert [e.cpe_id for e in reg.entries()] == ["b"]


# --- SDL (a real Redis) ------------------------------------------------------------------------

def test_sdl_copy_is_seen_by_another_registry(redis: RedisServer) -> None:
    writer = CpeRegistry("reg-test", ricsdl_backend)
    reader = CpeRegistry("reg-test", ricsdl_backend)
    assert reader.refresh() and len(reader) == 0
    writer.add("cpe-1", UE1.keys(), CELL)
    writer.add("cpe-2", ["crnti:1"], CELL)
    assert reader.refresh()
    assert reader.cpe_for_keys(["crnti:4660"]) == "cpe-1"
    assert reader.cpes_in_cell(CELL) == ("cpe-1", "cpe-2")
    # The reader changes too, starting from what SDL holds (not its own stale view).
    writer.remove("cpe-2")
    reader.add("cpe-3", ["crnti:2"])
    assert writer.refresh()
    assert [e.cpe_id for e in writer.entries()] == ["cpe-1", "cpe-3"]
    writer.stop()
    reader.stop()


def test_sdl_invalid_stored_entries_are_skipped(redis: RedisServer) -> None:
    backend = ricsdl_backend()
    backend.set("reg-bad", {"cpe/good": b'{"ue_ids":["crnti:1"],"cell":null}',
                            "cpe/bad id": b'{"ue_ids":[]}',
                            "cpe/junk": b"[[[",
                            "cpe/thief": b'{"ue_ids":["crnti:1","crnti:2"]}'})
    reg = CpeRegistry("reg-bad", ricsdl_backend)
    assert reg.refresh()
    assert [e.cpe_id for e in reg.entries()] == ["good", "thief"]
    assert reg.entry("thief") == CpeEntry("thief", ("crnti:2",), None)
    assert reg.invalid_stored == 3
    backend.close()
    reg.stop()


def test_sdl_outage_keeps_the_view_and_refuses_changes(redis: RedisServer) -> None:
    reg = CpeRegistry("reg-out", ricsdl_backend)
    reg.add("cpe-1", ["crnti:1"], CELL)
    redis.stop()
    assert not reg.refresh()
    assert reg.refresh_errors == 1
    assert reg.cpe_for_keys(["crnti:1"]) == "cpe-1"  # the indication path goes on
    with pytest.raises(Exception):  # noqa: B017 (ricsdl raises its own types)
        reg.add("cpe-2", ["crnti:2"])
    assert reg.entry("cpe-2") is None
    redis.start()
    assert reg.refresh()
    # Redis came back empty (no persistence): the registry writes back what it holds.
    assert reg.cpe_for_keys(["crnti:1"]) == "cpe-1"
    other = CpeRegistry("reg-out", ricsdl_backend)
    assert other.refresh() and other.entry("cpe-1") == CpeEntry("cpe-1", ("crnti:1",), CELL)
    # An operator's removal is not a loss: it writes a generation, and the view follows it.
    other.remove("cpe-1")
    assert reg.refresh() and len(reg) == 0
    reg.stop()
    other.stop()
