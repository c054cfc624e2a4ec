"""Other projects' bytes end to end through :class:`KpmIngest` into the intake: a FlexRIC/OAI
node (FlexRIC dialect, OAI's PRB counts and volumes), a node labelled v2 that speaks v3
(srsRAN), dialect detection remembered per node and RAN function and re-checked on failure.

The E2AP envelope is the O-RAN SC simulator's golden RIC Indication with its E2SM payloads
replaced by the interop vectors (``../shared/data``; the tests skip without it).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import SHARED
from tests.xapp.adapters.e2.test_ingest import CELL, NODE, Sink, golden, subscription
from tests.xapp.adapters.e2.test_ingest import envelope as golden_envelope
from xapp.adapters.e2 import e2ap, kpm_encode
from xapp.adapters.e2.ingest import KpmIngest
from xapp.adapters.e2.registry import CpeRegistry
from xapp.adapters.e2.subscription_book import SubscriptionBook

INTEROP = Path(os.environ.get("E2_INTEROP_DIR", SHARED / "data" / "e2-interop"))
UE3, UE7 = "amf:00f110-2-1-1:3", "amf:00f110-2-1-1:7"


@pytest.fixture(scope="module")
def vec() -> dict[str, bytes]:
    files = [INTEROP / "captured.json", INTEROP / "flexric.json"]
    if not all(f.is_file() for f in files):
        pytest.skip(f"interop vectors not found in {INTEROP}")
    out: dict[str, bytes] = {}
    for f in files:
        for entry in json.loads(f.read_text(encoding="utf-8")):
            out[entry["id"]] = bytes.fromhex(entry["hex"])
    return out


def envelope(header: bytes, message: bytes) -> bytes:
    """The golden RIC Indication carrying ``header`` and ``message``."""
    return golden_envelope(message, header)


def rig(**kw: Any) -> tuple[KpmIngest, Sink, CpeRegistry, SubscriptionBook]:
    ind = e2ap.decode_ric_indication(golden())
    book = SubscriptionBook(ind.request.requestor)
    book.add(subscription(ind.request, ind.ran_function_id, **kw))
    reg = CpeRegistry()
    sink = Sink()
    return KpmIngest(book, reg, sink, clock=lambda: 1000.0), sink, reg, book


def _fn() -> int:
    return e2ap.decode_ric_indication(golden()).ran_function_id


def test_oai_format3_per_ue_rows_in_the_flexric_dialect(vec: dict[str, bytes]) -> None:
    ingest, sink, reg, book = rig(dialect="flexric-v3", family="oai", prb_total=106,
                                  report_style=4, cell=None, measurement_ids={},
                                  granularity_ms=1000)
    reg.add("cpe-a", [UE3], CELL)
    reg.add("cpe-b", [UE7], CELL)
    ingest.handle(envelope(vec["flexric_v03.00_oai_hdr"], vec["flexric_v03.00_oai_msg_f3"]),
                  NODE)
    c = ingest.counters
    assert (c["accepted"], c["decoded_flexric-v3"], c["dialect_checks"]) == (1, 1, 1)
    assert book.dialect(NODE, _fn()) == "flexric-v3"
    # UE 3: DRB.UEThpDl 23456.5 kbit/s (wins over the PDCP volume), PRB counts 106 and 12 of
    # the cell's 106 PRBs (not 106 % dropped as out of range, not 0.12).
    assert sink.value("cpe-a", "dl", "delivered_mbps") == pytest.approx(23.4565)
    assert sink.value("cpe-a", "ul", "delivered_mbps") == pytest.approx(0.81225)
    assert sink.value("cpe-a", "dl", "prb_util") == pytest.approx(1.0)
    assert sink.value("cpe-a", "ul", "prb_util") == pytest.approx(12 / 106)
    assert sink.value("cpe-b", "ul", "prb_util") == pytest.approx(1 / 106)
    assert c["values_out_of_range"] == 0 and c["unknown_names"] == 0


def test_flexric_v02_03_node_is_read_with_its_4_octet_header(vec: dict[str, bytes]) -> None:
    ingest, sink, reg, _book = rig(kpm_version=2, dialect="flexric-v2", family="oai",
                                  prb_total=106, cell=None, measurement_ids={})
    reg.add("cpe-a", [UE3])
    ingest.handle(envelope(vec["flexric_v02.03_oai_hdr"], vec["flexric_v02.03_oai_msg_f3"]),
                  NODE)
    assert ingest.counters["decoded_flexric-v2"] == 1
    assert sink.value("cpe-a", "dl", "delivered_mbps") == pytest.approx(23.4565)


def test_oai_cell_level_prb_counts_need_the_cells_prbs(vec: dict[str, bytes]) -> None:
    data = envelope(vec["flexric_v03.00_oai_hdr"], vec["flexric_v03.00_oai_msg_f1"])
    ingest, sink, reg, _ = rig(dialect="flexric-v3", family="oai", prb_total=106,
                               measurement_ids={})
    reg.add("cpe-1", ["crnti:1"], CELL)
    ingest.handle(data, NODE)
    assert sink.value("cpe-1", "dl", "prb_util") == pytest.approx(1.0)
    assert sink.value("cpe-1", "ul", "prb_util") == pytest.approx(12 / 106)
    assert math.isnan(sink.value("cpe-1", "dl", "delivered_mbps"))  # not cell-level
    # Without the cell's PRBs the counts cannot be converted: counted, nothing guessed.
    ingest, sink, reg, _ = rig(dialect="flexric-v3", family="oai", prb_total=None,
                               measurement_ids={})
    reg.add("cpe-1", ["crnti:1"], CELL)
    ingest.handle(data, NODE)
    assert ingest.counters["accepted_no_rows"] == 1 and not sink.frames
    assert ingest.counters["unknown_names"] == 2


def test_node_labelled_v2_speaking_v3_is_detected_and_remembered() -> None:
    # srsRAN's function says KPM v2 (OID) and sends v3-era bytes (8-octet TimeStamp): the
    # golden indication is v3.  Taken for v2 first, detected as v3 once, remembered.
    ingest, sink, reg, book = rig(kpm_version=2, dialect="v2")
    reg.add("cpe-1", ["crnti:1"], CELL)
    ingest.handle(golden(), NODE)
    ingest.handle(golden(), NODE)
    c = ingest.counters
    assert (c["accepted"], c["decoded_v3"], c["dialect_checks"], c["dialect_changes"]) == \
        (2, 2, 1, 0)
    assert book.dialect(NODE, _fn()) == "v3"
    assert sink.value("cpe-1", "dl", "prb_util") == pytest.approx(0.01)


def test_a_failure_under_the_remembered_dialect_rechecks(vec: dict[str, bytes]) -> None:
    ingest, _sink, reg, book = rig(family="oai", prb_total=106, cell=None, measurement_ids={})
    reg.add("cpe-a", [UE3])
    ingest.handle(golden(), NODE)
    assert book.dialect(NODE, _fn()) == "v3"
    ingest.handle(envelope(vec["flexric_v03.00_oai_hdr"], vec["flexric_v03.00_oai_msg_f3"]),
                  NODE)
    c = ingest.counters
    assert (c["dialect_checks"], c["dialect_changes"], c["decoded_flexric-v3"]) == (2, 1, 1)
    assert book.dialect(NODE, _fn()) == "flexric-v3"
    # Bytes no dialect reads are refused and change nothing.
    ingest.handle(envelope(vec["flexric_v03.00_oai_hdr"], vec["nsoran_v1_msg"]), NODE)
    assert c["refused_kpm"] == 1 and book.dialect(NODE, _fn()) == "flexric-v3"


def test_format1_without_meas_info_list_uses_the_subscriptions_names() -> None:
    from xapp.adapters.e2.asn1 import _kpm_v3

    m = _kpm_v3.E2SM_KPM_v3_IEs.E2SM_KPM_IndicationMessage
    m.set_val({"indicationMessage-formats": ("indicationMessage-Format1", {
        "measData": [{"measRecord": [("integer", 40), ("integer", 10)]}],
        "granulPeriod": 1000})})
    header = kpm_encode.encode_kpm_indication_header(1_700_000_000_000, 3)
    ingest, sink, reg, _ = rig(measurements=("RRU.PrbTotDl", "RRU.PrbTotUl"),
                               measurement_ids={})
    reg.add("cpe-1", ["crnti:1"], CELL)
    ingest.handle(envelope(header, bytes(m.to_aper())), NODE)
    assert sink.value("cpe-1", "dl", "prb_util") == pytest.approx(0.40)
    assert sink.value("cpe-1", "ul", "prb_util") == pytest.approx(0.10)


def test_a_failed_check_is_not_repeated_within_the_interval(vec: dict[str, bytes]) -> None:
    now = [100.0]
    ind = e2ap.decode_ric_indication(golden())
    book = SubscriptionBook(ind.request.requestor)
    book.add(subscription(ind.request, ind.ran_function_id, family="oai", prb_total=106,
                          cell=None, measurement_ids={}))
    reg = CpeRegistry()
    reg.add("cpe-a", [UE3])
    sink = Sink()
    ingest = KpmIngest(book, reg, sink, clock=lambda: 1000.0, recheck_interval_s=10.0,
                       monotonic=lambda: now[0])
    garbage = envelope(vec["flexric_v03.00_oai_hdr"], vec["nsoran_v1_msg"])
    oai = envelope(vec["flexric_v03.00_oai_hdr"], vec["flexric_v03.00_oai_msg_f3"])
    c = ingest.counters
    ingest.handle(garbage, NODE)  # every dialect tried once
    ingest.handle(garbage, NODE)  # within 10 s: only the assumed dialect
    assert (c["refused_kpm"], c["dialect_checks"], c["dialect_checks_skipped"]) == (2, 1, 1)
    ingest.handle(oai, NODE)  # FlexRIC bytes, still within 10 s: not re-checked, refused
    assert (c["refused_kpm"], c["dialect_checks"]) == (3, 1)
    now[0] += 10.0
    ingest.handle(oai, NODE)  # the interval is over: checked, read, remembered
    assert (c["accepted"], c["dialect_checks"], c["decoded_flexric-v3"]) == (1, 2, 1)
    assert book.dialect(NODE, _fn()) == "flexric-v3"
    ingest.handle(garbage, NODE)  # fails under flexric-v3: checked again (no recent failure)
    assert (c["dialect_checks"], c["refused_kpm"]) == (3, 4)


def test_a_dialect_detected_at_run_time_also_switches_the_measurement_table(
        vec: dict[str, bytes]) -> None:
    """Issue 33 item 6: subscribed as a 3GPP node (dialect v3 assumed, its table chosen then),
    the node sends OAI's FlexRIC bytes: read with OAI's table (PRB counts), not 3GPP's."""
    ingest, sink, reg, book = rig(dialect="v3", family="3gpp", prb_total=106,
                                  report_style=4, cell=None, measurement_ids={},
                                  granularity_ms=1000)
    reg.add("cpe-a", [UE3], CELL)
    reg.add("cpe-b", [UE7], CELL)
    ingest.handle(envelope(vec["flexric_v03.00_oai_hdr"], vec["flexric_v03.00_oai_msg_f3"]),
                  NODE)
    c = ingest.counters
    assert (c["accepted"], c["decoded_flexric-v3"]) == (1, 1)
    assert book.dialect(NODE, _fn()) == "flexric-v3"
    assert c["values_out_of_range"] == 0 and c["unknown_names"] == 0, dict(c)
    assert sink.value("cpe-a", "ul", "prb_util") == pytest.approx(12 / 106)
    assert sink.value("cpe-b", "ul", "prb_util") == pytest.approx(1 / 106)
