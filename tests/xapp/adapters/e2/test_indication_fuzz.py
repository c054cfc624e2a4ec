"""Hypothesis over the indication decoders: truncations, bit flips, spliced and random bytes,
wrong KPM versions, every dialect (detection tries them all).  Only E2DecodeError may come
out, and every call returns quickly."""

from __future__ import annotations

import time
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.paths import SHARED
from xapp.adapters.e2 import aper, e2ap, kpm_decode, kpm_encode
from xapp.adapters.e2.records import E2DecodeError, KpmReport, RicIndication, RicRequestId, UeId

GOLDEN = SHARED / "data" / "e2sim-kpm" / "ind0.bin"

#: A slow decode is a hang in the decoder; the largest seed decodes in ~2 ms of CPU.  The
#: thread's own CPU time is measured, not wall time: on a loaded machine a decode may wait for
#: a core for longer than it works.
MAX_CPU_SECONDS = 2.0


@cache
def _seeds() -> list[tuple[bytes, int]]:
    """Well-formed RIC indications (E2AP bytes, KPM version) to mutate."""
    out = []
    if GOLDEN.exists():
        out.append((GOLDEN.read_bytes(), 3))
    ues = [UeId(amf_ue_ngap_id=i, guami="02f839-1-2-3", gnb_cu_ue_f1ap_id=i) for i in range(3)]
    for version in (2, 3, 4):
        reports = [KpmReport({"DRB.UEThpDl": 1.5, "RRU.PrbUsedDl": 3.0})] if version == 2 else \
            [KpmReport({"DRB.UEThpDl": 1.5 + i, "RRU.PrbUsedDl": 3.0}, ue=u)
             for i, u in enumerate(ues)]
        out.append((e2ap.encode_ric_indication(RicIndication(
            RicRequestId(123, 7), 2, 1, 9, "report",
            kpm_encode.encode_kpm_indication_header(1_700_000_000_000, version, sender_name="gnb"),
            kpm_encode.encode_kpm_indication_message(reports, version, granularity_ms=1000))),
            version))
    out.append((e2ap.encode_ric_indication(RicIndication(
        RicRequestId(123, 7), 2, 1, 9, "report",
        kpm_encode.encode_kpm_indication_header(1_700_000_000_000, 3),
        kpm_encode.encode_kpm_indication_message(
            [KpmReport({"DRB.UEThpDl": 1.5 + i}, ue=u) for i, u in enumerate(ues)], 3,
            dialect="flexric-v3"))), 3))
    return out


# deferred: the golden capture is read and the seeds encoded when a test runs.
SEEDS = st.deferred(lambda: st.sampled_from(_seeds()))


def _decode_all(data: bytes, version: int) -> None:
    start = time.thread_time()
    try:
        ind = e2ap.decode_ric_indication(data)
        try:
            kpm_decode.decode_kpm_indication(ind.header, ind.message, version)
        finally:
            kpm_decode.detect_kpm_indication(ind.header, ind.message, version)
    except E2DecodeError:
        pass
    assert time.thread_time() - start < MAX_CPU_SECONDS


def _decode_kpm(header: bytes, message: bytes, version: int) -> None:
    start = time.thread_time()
    try:
        kpm = kpm_decode.detect_kpm_indication(header, message, version)
    except E2DecodeError:
        return
    finally:
        assert time.thread_time() - start < MAX_CPU_SECONDS
    assert len(kpm.reports) <= aper.MAX_REPORTS
    for report in kpm.reports:
        assert len(report.values) <= aper.MAX_MEASUREMENTS
        assert all(isinstance(v, float) for v in report.values.values())


FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(seed=SEEDS, data=st.data())
def test_truncations(seed: tuple[bytes, int], data: st.DataObject) -> None:
    raw, version = seed
    cut = data.draw(st.integers(0, len(raw) - 1))
    _decode_all(raw[:cut], version)


@FUZZ
@given(seed=SEEDS, flips=st.lists(st.integers(0, 10**6), min_size=1,
                                                   max_size=8))
def test_bit_flips(seed: tuple[bytes, int], flips: list[int]) -> None:
    raw, version = bytearray(seed[0]), seed[1]
    for flip in flips:
        bit = flip % (len(raw) * 8)
        raw[bit // 8] ^= 1 << (bit % 8)
    _decode_all(bytes(raw), version)


@FUZZ
@given(seed=SEEDS, version=st.integers(-2, 7))
def test_wrong_versions(seed: tuple[bytes, int], version: int) -> None:
    ind = e2ap.decode_ric_indication(seed[0])
    _decode_kpm(ind.header, ind.message, version)


@FUZZ
@given(seed=SEEDS, data=st.data())
def test_mutated_e2sm_payloads(seed: tuple[bytes, int], data: st.DataObject) -> None:
    ind = e2ap.decode_ric_indication(seed[0])
    message = bytearray(ind.message)
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(message) - 1))
        message[at] = data.draw(st.integers(0, 255))
    tail = data.draw(st.binary(max_size=16))
    header = data.draw(st.sampled_from([ind.header, ind.header[:-1], ind.header + b"\x00",
                                        bytes(len(ind.header))]))
    _decode_kpm(header, bytes(message) + tail, seed[1])


@FUZZ
@given(raw=st.binary(max_size=512), version=st.sampled_from([2, 3, 4]))
def test_random_bytes(raw: bytes, version: int) -> None:
    _decode_all(raw, version)
    _decode_kpm(raw, raw, version)
