"""A minimal RMR endpoint for tests: plays the A1 mediator / health checker on loopback.

Imports ``ricxappframe.rmr`` (loads ``librmr_si.so``) only when :class:`RmrPeer` is created, so
test modules can import this file and skip when the library is absent.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.polling import wait_until


class RmrPeer:
    """An RMR context on ``port``; routes come from ``RMR_SEED_RT`` (set it before creating)."""

    def __init__(self, port: int, ready_timeout_s: float = 15.0) -> None:
        from ricxappframe.rmr import rmr

        self.rmr = rmr
        self.mrc = rmr.rmr_init(str(port).encode(), rmr.RMR_MAX_RCV_BYTES, 0x00)
        if not wait_until(lambda: rmr.rmr_ready(self.mrc) != 0, ready_timeout_s, 0.1):
            raise TimeoutError("RMR peer not ready (route table?)")
        self.received: list[tuple[int, bytes]] = []

    def send(self, mtype: int, payload: bytes, retries_s: float = 10.0,
             meid: str | None = None) -> None:
        """Send until RMR accepts it (the xApp's listener may still be starting); ``meid``
        names the E2 node, as the E2 termination does on a RIC Indication."""
        rmr = self.rmr
        states: list[int] = []

        def accepted() -> bool:
            sbuf = rmr.rmr_alloc_msg(self.mrc, len(payload), payload=payload,
                                     gen_transaction_id=True, mtype=mtype,
                                     meid=None if meid is None else meid.encode())
            sbuf = rmr.rmr_send_msg(self.mrc, sbuf)
            states.append(sbuf.contents.state)
            rmr.rmr_free_msg(sbuf)
            return states[-1] == 0

        if not wait_until(accepted, retries_s, 0.2):
            raise TimeoutError(f"RMR send of type {mtype} failed with state {states[-1]}")

    def receive(self, mtype: int, timeout_s: float = 10.0) -> bytes:
        """The payload of the next message of ``mtype`` (others are kept in ``received``)."""
        rmr = self.rmr
        deadline = time.monotonic() + timeout_s
        for i, (t, p) in enumerate(self.received):
            if t == mtype:
                del self.received[i]
                return p
        while time.monotonic() < deadline:
            sbuf = rmr.rmr_alloc_msg(self.mrc, 4096)
            sbuf = rmr.rmr_torcv_msg(self.mrc, sbuf, 200)
            summary: dict[str, Any] = rmr.message_summary(sbuf)
            rmr.rmr_free_msg(sbuf)
            if summary[rmr.RMR_MS_MSG_STATE] != 0:
                continue
            t, p = summary[rmr.RMR_MS_MSG_TYPE], summary[rmr.RMR_MS_PAYLOAD]
            if t == mtype:
                return bytes(p)
            self.received.append((t, bytes(p)))
        raise TimeoutError(f"no RMR message of type {mtype} within {timeout_s} s")

    def request(self, mtype: int, doc: dict[str, Any], reply_type: int) -> dict[str, Any]:
        self.send(mtype, json.dumps(doc).encode())
        return json.loads(self.receive(reply_type))  # type: ignore[no-any-return]

    def close(self) -> None:
        self.rmr.rmr_close(self.mrc)
