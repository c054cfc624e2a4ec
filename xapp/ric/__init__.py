"""The RIC side of the xApp: ``mcw run``, A1 policies, SDL state, health and metrics.

Only :mod:`xapp.ric.rmr_app` touches RMR (``ricxappframe.rmr``), and only when it starts, so the
rest imports and tests without RMR's C library.
"""

from xapp.ric.a1 import (
    A1_POLICY_QUERY,
    A1_POLICY_REQ,
    A1_POLICY_RESP,
    POLICY_TYPE_ID,
    A1Handler,
    A1Response,
    PolicyBook,
    PolicyInstance,
    PolicyResolver,
    PolicyType,
)
from xapp.ric.sdl_store import CpeRecord, SdlVersionStore, StateStore

__all__ = [
    "A1_POLICY_QUERY",
    "A1_POLICY_REQ",
    "A1_POLICY_RESP",
    "POLICY_TYPE_ID",
    "A1Handler",
    "A1Response",
    "CpeRecord",
    "PolicyBook",
    "PolicyInstance",
    "PolicyResolver",
    "PolicyType",
    "SdlVersionStore",
    "StateStore",
]
