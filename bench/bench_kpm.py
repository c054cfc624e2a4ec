"""E2SM-KPM indications: decode and map, against the raw decode alone, on one core.

Indications are made with the project's encoder (pycrate, the shipped codec): format 1 (one
cell, four measurements) and format 3 (per UE, 10 and 100 UEs, four measurements each, UEs named
by gNB UEID: AMF-UE-NGAP-ID + GUAMI, F1AP id, RAN UE id), in the standard v3 text and, for 100
UEs, in the FlexRIC dialect; and, where ``../shared/data/e2-interop`` is there, the bytes
FlexRIC's own encoder made as OAI's gNB fills them (v03.00 and v02.03, format 3 with 2 UEs and
format 1, 7 measurements, PRB counts converted with the cell's 106 PRBs).  The full path's
subscription names the case's dialect, which the first (untimed) indication confirms; the
steady state decodes under the remembered dialect.  For each, three paths on the same bytes:

* raw decode (the baseline): ``decode_ric_indication`` + ``decode_kpm_indication``;
* full path in-process: ``KpmIngest.handle`` (decode, subscription match, UE -> CPE through an
  in-memory ``CpeRegistry`` holding every UE, measurement -> feature mapping, one KpiFrame to an
  in-memory sink that keeps the frame);
* shipped path: what ``mcw run`` does with an indication RMR hands over, the E2 decoder
  process (``DecoderProcess.offer``; E2AP + KPM decoded in the child process, the answer sent
  back as JSON, ``KpmIngest.apply`` mapping it into the sink on the ``mcw-e2-decoder``
  thread), with a few indications in flight so that the pipe is never empty; timed until the
  last one is in the sink.  The child inherits the CPU pinning: both processes share the one
  core.  Also timed alone: what the shipped path leaves on the xApp's interpreter per
  indication ("xApp ms/ind": reading the process's JSON answer and ``KpmIngest.apply``).

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
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from tqdm import tqdm

from xapp.adapters.e2 import aper, e2ap, kpm_decode, kpm_encode
from xapp.adapters.e2.decoded_wire import decode_decoded, encode_decoded
from xapp.adapters.e2.decoder_process import DecoderProcess
from xapp.adapters.e2.ingest import KpmIngest
from xapp.adapters.e2.records import (
    ActiveSubscription,
    KpmReport,
    RicIndication,
    RicRequestId,
    UeId,
)
from xapp.adapters.e2.registry import CpeRegistry
from xapp.adapters.e2.subscription_book import SubscriptionBook

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
    dialect: str = "v3"
    kpm_version: int = 3
    #: Measurement table family and PRBs of the subscription the full path matches.
    family: str = "3gpp"
    ue_keys: tuple[tuple[str, ...], ...] = ()


#: Where ``../shared/data/e2-interop`` is (other projects' bytes; optional).
INTEROP = Path(__file__).resolve().parents[2] / "shared" / "data" / "e2-interop"
#: FlexRIC's encoder filled as OAI's gNB fills it: 7 measurements, UEs AMF-UE-NGAP-ID 3 and 7.
OAI_UES = (("amf:00f110-2-1-1:3",), ("amf:00f110-2-1-1:7",))


def interop_cases(where: Path) -> list[Case]:
    """Cases made of the interop vectors (FlexRIC/OAI bytes), one per dialect and format."""
    files = [where / "captured.json", where / "flexric.json"]
    if not all(f.is_file() for f in files):
        print(f"interop vectors not found in {where}: their cases are left out", file=sys.stderr)
        return []
    vec = {e["id"]: bytes.fromhex(e["hex"]) for f in files
           for e in json.loads(f.read_text(encoding="utf-8"))}
    out = []
    for version, dialect, kpm in (("v03.00", "flexric-v3", 3), ("v02.03", "flexric-v2", 2)):
        header = vec[f"flexric_{version}_oai_hdr"]
        for fmt, ues in (("f3", 2), ("f1", 0)):
            payload = e2ap.encode_ric_indication(RicIndication(
                REQUEST, RAN_FUNCTION, 1, 1, "report", header,
                vec[f"flexric_{version}_oai_msg_{fmt}"]))
            what = f"{ues} UEs" if ues else "cell"
            out.append(Case(f"{dialect} OAI {fmt} {what}", ues, payload, max(1, ues) * 7,
                            dialect, kpm, "oai", OAI_UES))
    return out


def ue(i: int) -> UeId:
    return UeId(amf_ue_ngap_id=100_000 + i, guami="02f839-1-2-3", gnb_cu_ue_f1ap_id=i,
                ran_ue_id=f"{0xA000_0000 + i:016x}")


def make_case(ues: int, dialect: str = "v3") -> Case:
    if ues == 0:
        reports = [KpmReport({"DRB.UEThpDl": 812_345.0, "DRB.UEThpUl": 95_000.0,
                              "RRU.PrbUsedDl": 61.0, "RRU.PrbAvailDl": 273.0})]
    else:
        reports = [KpmReport({"DRB.UEThpDl": 10_000.0 + 37 * i, "DRB.UEThpUl": 1_500.5 + i,
                              "RRU.PrbUsedDl": float(i % 50), "RRU.PrbAvailDl": 273.0},
                             ue=ue(i)) for i in range(ues)]
    header = kpm_encode.encode_kpm_indication_header(1_700_000_000_000, 3, sender_name="gnb-bench")
    message = kpm_encode.encode_kpm_indication_message(reports, 3, granularity_ms=1000,
                                                       dialect=dialect)
    payload = e2ap.encode_ric_indication(RicIndication(
        REQUEST, RAN_FUNCTION, 1, 1, "report", header, message))
    name = "format 1, cell level" if ues == 0 else f"format 3, {ues} UEs"
    keys = tuple(ue(i).keys()[:2] for i in range(ues))
    return Case(f"{dialect} {name}", ues, payload, max(1, ues) * len(MEASUREMENTS), dialect,
                ue_keys=keys)


class FrameSink:
    """In-memory sink: keeps the last frame and counts rows (what the intake would be given)."""

    def __init__(self) -> None:
        self.frames = 0
        self.last: object = None

    def __call__(self, frame: object) -> None:
        self.frames += 1
        self.last = frame


def make_ingest(case: Case) -> tuple[KpmIngest, FrameSink]:
    """The full path for ``case``: its node's subscription (dialect, table family, PRBs), a
    registry holding every UE of it; the dialect is detected at the first (untimed) call."""
    book = SubscriptionBook(REQUEST.requestor)
    book.add(ActiveSubscription("bench-sub", NODE, REQUEST, RAN_FUNCTION, case.kpm_version, 4,
                                cell=CELL, dialect=case.dialect, family=case.family,
                                prb_total=106, granularity_ms=1000))
    registry = CpeRegistry()
    for i, keys in enumerate(case.ue_keys):
        registry.add(f"cpe-{i}", keys, CELL)
    if not case.ue_keys:
        registry.add("cpe-cell", ("crnti:1",), CELL)
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


def process_rate(case: Case, seconds: float, quiet: bool, in_flight: int = 4) -> float:
    """Indications per second through the decoder process into the sink (the shipped path),
    over about ``seconds`` of wall time, the drain at the end included."""
    ingest, sink = make_ingest(case)
    decoder = DecoderProcess(ingest)
    decoder.start()
    try:
        deadline = time.monotonic() + 60
        while not decoder.healthy() and time.monotonic() < deadline:
            time.sleep(0.01)
        decoder.offer((case.payload, NODE))  # dialect detection, outside the clock
        while sink.frames < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        offered = 0
        start = time.perf_counter()
        end = start + seconds
        with tqdm(desc=f"{case.name}: process", unit="ind", disable=quiet, leave=False) as bar:
            while time.perf_counter() < end:
                while decoder.pending() < in_flight:
                    decoder.offer((case.payload, NODE))
                    offered += 1
                time.sleep(0.001)
                bar.n = sink.frames - 1
                bar.refresh()
            while sink.frames < offered + 1 and time.monotonic() < deadline + seconds + 60:
                time.sleep(0.001)
        took = time.perf_counter() - start
        assert sink.frames == offered + 1 and decoder.dropped == 0, (sink.frames, offered,
                                                                      decoder.drops)
        return offered / took
    finally:
        decoder.stop(timeout_s=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="wall time per measurement")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--interop", default=str(INTEROP),
                        help="directory of the e2-interop vectors (FlexRIC/OAI cases)")
    parser.add_argument("--no-interop", action="store_true", help="leave those cases out")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    quiet = args.json or not sys.stderr.isatty()

    t0 = time.perf_counter()
    aper.warm_up()
    startup_s = time.perf_counter() - t0

    cases = [make_case(n) for n in (0, 10, 100)] + [make_case(100, "flexric-v3")]
    if not args.no_interop:
        cases += interop_cases(Path(args.interop))
    figures: dict[str, object] = {
        "startup_s": round(startup_s, 3),
        "ue_measurement": "one UE's value of one measurement (format 1: the cell's values)",
        "measurements_per_report": len(MEASUREMENTS),
        "cases": [],
    }
    refused: dict[str, int] = {}
    frames = 0
    for case in cases:
        ingest, sink = make_ingest(case)

        def raw(case: Case = case) -> None:
            ind = e2ap.decode_ric_indication(case.payload)
            kpm_decode.decode_kpm_indication(ind.header, ind.message, case.kpm_version,
                                             dialect=case.dialect)

        def full(case: Case = case, ingest: KpmIngest = ingest) -> None:
            ingest.handle(case.payload, NODE)

        before = ingest.counters["accepted"]
        raw_rate = rate(raw, args.seconds, f"{case.name}: decode", quiet)
        full_rate = rate(full, args.seconds, f"{case.name}: decode+map", quiet)
        proc_rate = process_rate(case, args.seconds, quiet)
        answer = encode_decoded(ingest.decoder.decode(case.payload, NODE))

        def apply(answer: bytes = answer, ingest: KpmIngest = ingest) -> None:
            ingest.apply(decode_decoded(answer))

        apply_rate = rate(apply, min(1.0, args.seconds), f"{case.name}: apply", quiet)
        assert ingest.counters["accepted"] > before, ingest.counters
        assert ingest.counters[f"decoded_{case.dialect}"] > 0, ingest.counters
        for k, v in ingest.counters.items():
            if k.startswith("refused") and v:
                refused[k] = refused.get(k, 0) + v
        frames += sink.frames
        figures["cases"].append({  # type: ignore[attr-defined]
            "case": case.name,
            "dialect": case.dialect,
            "bytes": len(case.payload),
            "ues": case.ues,
            "decode_indications_per_s": round(raw_rate, 1),
            "decode_ue_measurements_per_s": round(raw_rate * case.values_per_indication),
            "full_indications_per_s": round(full_rate, 1),
            "full_ue_measurements_per_s": round(full_rate * case.values_per_indication),
            "full_ms_per_indication": round(1e3 / full_rate, 3),
            "process_indications_per_s": round(proc_rate, 1),
            "process_ue_measurements_per_s": round(proc_rate * case.values_per_indication),
            "xapp_ms_per_indication": round(1e3 / apply_rate, 3),
        })
    figures["refused"] = refused
    figures["frames"] = frames
    if args.json:
        print(json.dumps(figures))
        return
    print(f"codec start-up (E2AP + KPM modules loaded): {startup_s * 1e3:.0f} ms")
    print(f"UE measurement = {figures['ue_measurement']}; {len(MEASUREMENTS)} measurements "
          "per report (the OAI cases: 7); one core, wall time")
    print(f"{'case':30} {'bytes':>6} {'decode ind/s':>13} {'UE meas/s':>10} "
          f"{'decode+map ind/s':>17} {'UE meas/s':>10} {'ms/ind':>8} "
          f"{'process ind/s':>14} {'UE meas/s':>10} {'xApp ms/ind':>12}")
    for c in figures["cases"]:  # type: ignore[attr-defined]
        print(f"{c['case']:30} {c['bytes']:>6} {c['decode_indications_per_s']:>13} "
              f"{c['decode_ue_measurements_per_s']:>10} {c['full_indications_per_s']:>17} "
              f"{c['full_ue_measurements_per_s']:>10} {c['full_ms_per_indication']:>8} "
              f"{c['process_indications_per_s']:>14} {c['process_ue_measurements_per_s']:>10} "
              f"{c['xapp_ms_per_indication']:>12}")
    print("process: the shipped path (decoder process + KpmIngest.apply), both processes on "
          "the one core")
    print(f"target: 10,000 UE measurements/s through decode+map; refusals: {refused or 'none'}")


if __name__ == "__main__":
    main()
