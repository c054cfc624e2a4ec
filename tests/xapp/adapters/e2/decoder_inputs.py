"""What the decoder tests share: one node's subscription, its RIC indications, and an ingest
whose frames are kept."""

from __future__ import annotations

from xapp.adapters.e2 import e2ap, kpm_encode
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
from xapp.core.forecast import KpiFrame

NODE = "gnb_208_092_0000000a"
CELL = "02f839-00000000a"
REQUEST = RicRequestId(123, 7)
FUNCTION = 2


def ue(i: int) -> UeId:
    return UeId(amf_ue_ngap_id=100 + i, guami="02f839-1-2-3", gnb_cu_ue_f1ap_id=i,
                ran_ue_id=f"{0xA000_0000 + i:016x}")


def indication(ues: int = 3, *, dialect: str = "v3", request: RicRequestId = REQUEST) -> bytes:
    reports = [KpmReport({"DRB.UEThpDl": 10_000.0 + i, "DRB.UEThpUl": 2_000.5,
                          "RRU.PrbUsedDl": 20.0, "RRU.PrbAvailDl": 100.0}, ue=ue(i))
               for i in range(ues)]
    header = kpm_encode.encode_kpm_indication_header(1_700_000_000_000, 3, sender_name="gnb-t")
    message = kpm_encode.encode_kpm_indication_message(reports, 3, granularity_ms=1000,
                                                       dialect=dialect)
    return e2ap.encode_ric_indication(RicIndication(request, FUNCTION, 1, 1, "report",
                                                    header, message))


class FrameSink:
    def __init__(self) -> None:
        self.frames: list[KpiFrame] = []

    def __call__(self, frame: KpiFrame) -> None:
        self.frames.append(frame)


class Ingest(KpmIngest):
    book: SubscriptionBook


def make_ingest(ues: int = 3, dialect: str = "v3") -> tuple[Ingest, FrameSink]:
    book = SubscriptionBook(REQUEST.requestor)
    book.add(ActiveSubscription("sub-1", NODE, REQUEST, FUNCTION, 3, 4, dialect=dialect))
    registry = CpeRegistry()
    for i in range(ues):
        registry.add(f"cpe-{i}", ue(i).keys()[:1], CELL)
    sink = FrameSink()
    return Ingest(book, registry, sink), sink

