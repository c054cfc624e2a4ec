"""Inputs the E2 codec tests share: the O-RAN SC simulator's golden bytes and a UE id of each
form the KPM UEID CHOICE carries."""

from __future__ import annotations

import pytest

from tests.support.paths import SHARED
from xapp.adapters.e2.records import UeId

GOLDEN = SHARED / "data" / "e2sim-kpm"


def golden(name: str) -> bytes:
    path = GOLDEN / name
    if not path.exists():
        pytest.skip(f"golden vectors not present at {GOLDEN}")
    return path.read_bytes()

UES = (
    UeId(amf_ue_ngap_id=(1 << 40) - 1, guami="02f839-ff-3ff-3f", gnb_cu_ue_f1ap_id=7,
         ran_ue_id="0102030405060708"),
    UeId(amf_ue_ngap_id=0, guami="00f110-1-2-3"),
    UeId(gnb_cu_ue_f1ap_id=0xFFFFFFFF, ran_ue_id="ffffffffffffffff"),
    UeId(gnb_cu_ue_f1ap_id=12),
)
