"""E2SM-KPM indications: decode and map, against the raw decode alone, on one core.

Indications are made with the project's encoder (pycrate, the shipped codec): format 1 (one
cell, four measurements) and format 3 (per UE, 10 and 100 UEs, four measurements each, UEs named
by gNB UEID: AMF-UE-NGAP-ID + GUAMI, F1AP id, RAN UE id).  For each, two paths on the same bytes:

* raw decode (the baseline): ``decode_ric_indication`` + ``decode_kpm_indication``;
* full path: ``KpmIngest.handle`` (decode, subscription match, UE -> CPE through an in-memory
  ``CpeRegistry`` holding every UE, measurement -> feature mapping, one KpiFrame to an in-memory
  sink that keeps the frame).

A "UE measurement" is one UE's value of one measurement (100 UEs x 4 measurements = 400 per
indication); for format 1, the cell's values are counted the same way.  Wall time, one process
pinned to one CPU (pure Python: OMP_NUM_THREADS=1 changes nothing, set anyway).  Also: the
codec's start-up cost (loading the E2AP and the generated KPM modules), measured first.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_kpm.py [--seconds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("OMP_NUM_THREADS", "1")

from tqdm import tqdm

from xapp.adapters.e2 import codec
from xapp.adapters.e2.ingest import KpmIngest
from xapp.adapters.e2.records import (
    ActiveSubscription,
    KpmReport,
    RicIndication,
    RicRequestId,
    UeId,
)
from xapp.adapters.e2.registry import CpeRegistry
from xapp.adapters.e2.subscriptions import SubscriptionBook

NODE = "gnb_208_092_0000000a"
CELL = "02f839-00000000a"
REQUEST = RicRequestId(1234, 7)
RAN_FUNCTION = 2
MEASUREMENTS = ("DRB.UEThpDl", "DRB.UEThpUl", "RRU.PrbUsedDl", "RRU.PrbAvailDl")


@dataclass
class Case:
    name: str
    ues: int  # 0: format 1, cell level
    payload: bytes
    values_per_indication: int


def ue(i: int) -> UeId:
    return UeId(amf_ue_ngap_id=100_000 + i, guami="02f839-1-2-3", gnb_cu_ue_f1ap_id=i,
                ran_ue_id=f"{0xA000_0000 + i:016x}")


def make_case(ues: int) -> Case:
    if ues == 0:
        reports = [KpmReport({"DRB.UEThpDl": 812_345.0, "DRB.UEThpUl": 95_000.0,
                              "RRU.PrbUsedDl": 61.0, "RRU.PrbAvailDl": 273.0})]
    else:
        reports = [KpmReport({"DRB.UEThpDl": 10_000.0 + 37 * i, "DRB.UEThpUl": 1_500.5 + i,
                              "RRU.PrbUsedDl": float(i % 50), "RRU.PrbAvailDl": 273.0},
                             ue=ue(i)) for i in range(ues)]
    header = codec.encode_kpm_indication_header(1_700_000_000_000, 3, sender_name="gnb-bench")
    message = codec.encode_kpm_indication_message(reports, 3, granularity_ms=1000)
    payload = codec.encode_ric_indication(RicIndication(
        REQUEST, RAN_FUNCTION, 1, 1, "report", header, message))
    name = "format 1, cell level" if ues == 0 else f"format 3, {ues} UEs"
    return Case(name, ues, payload, max(1, ues) * len(MEASUREMENTS))


class FrameSink:
    """In-memory sink: keeps the last frame and counts rows (what the intake would be given)."""

    def __init__(self) -> None:
        self.frames = 0
        self.last: object = None

    def __call__(self, frame: object) -> None:
        self.frames += 1
        self.last = frame


def make_ingest(max_ues: int) -> tuple[KpmIngest, FrameSink]:
    book = SubscriptionBook(REQUEST.requestor)
    book.add(ActiveSubscription("bench-sub", NODE, REQUEST, RAN_FUNCTION, 3, 4, cell=CELL))
    registry = CpeRegistry()
    for i in range(max_ues):
        registry.add(f"cpe-{i}", ue(i).keys()[:2], CELL)
    sink = FrameSink()
    return KpmIngest(book, registry, sink), sink


def rate(fn: Callable[[], None], seconds: float, label: str, quiet: bool) -> float:
    """Calls of ``fn`` per second over about ``seconds`` of wall time."""
    fn()  # first call outside the clock (caches)
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    with tqdm(desc=label, unit="ind", disable=quiet, leave=False) as bar:
        while True:
            fn()
            calls += 1
            bar.update()
            now = time.perf_counter()
            if now >= deadline:
                return calls / (now - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="wall time per measurement")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    quiet = args.json or not sys.stderr.isatty()

    t0 = time.perf_counter()
    codec.warm_up()
    startup_s = time.perf_counter() - t0

    cases = [make_case(n) for n in (0, 10, 100)]
    ingest, sink = make_ingest(100)
    figures: dict[str, object] = {
        "startup_s": round(startup_s, 3),
        "ue_measurement": "one UE's value of one measurement (format 1: the cell's values)",
        "measurements_per_report": len(MEASUREMENTS),
        "cases": [],
    }
    for case in cases:
        def raw(case: Case = case) -> None:
            ind = codec.decode_ric_indication(case.payload)
            codec.decode_kpm_indication(ind.header, ind.message, 3)

        def full(case: Case = case) -> None:
            ingest.handle(case.payload, NODE)

        before = ingest.counters["accepted"]
        raw_rate = rate(raw, args.seconds, f"{case.name}: decode", quiet)
        full_rate = rate(full, args.seconds, f"{case.name}: decode+map", quiet)
        assert ingest.counters["accepted"] > before, ingest.counters
        figures["cases"].append({  # type: ignore[attr-defined]
            "case": case.name,
            "bytes": len(case.payload),
            "ues": case.ues,
            "decode_indications_per_s": round(raw_rate, 1),
            "decode_ue_measurements_per_s": round(raw_rate * case.values_per_indication),
            "full_indications_per_s": round(full_rate, 1),
            "full_ue_measurements_per_s": round(full_rate * case.values_per_indication),
            "full_ms_per_indication": round(1e3 / full_rate, 3),
        })
    refused = {k: v for k, v in ingest.counters.items() if k.startswith("refused") and v}
    figures["refused"] = refused
    figures["frames"] = sink.frames
    if args.json:
        print(json.dumps(figures))
        return
    print(f"codec start-up (E2AP + KPM modules loaded): {startup_s * 1e3:.0f} ms")
    print(f"UE measurement = {figures['ue_measurement']}; {len(MEASUREMENTS)} measurements "
          "per report; one core, wall time")
    print(f"{'case':24} {'bytes':>6} {'decode ind/s':>13} {'UE meas/s':>10} "
          f"{'decode+map ind/s':>17} {'UE meas/s':>10} {'ms/ind':>8}")
    for c in figures["cases"]:  # type: ignore[attr-defined]
        print(f"{c['case']:24} {c['bytes']:>6} {c['decode_indications_per_s']:>13} "
              f"{c['decode_ue_measurements_per_s']:>10} {c['full_indications_per_s']:>17} "
              f"{c['full_ue_measurements_per_s']:>10} {c['full_ms_per_indication']:>8}")
    print(f"target: 10,000 UE measurements/s through decode+map; refusals: {refused or 'none'}")


if __name__ == "__main__":
    main()
