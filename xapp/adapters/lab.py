"""In-memory and file adapters: the twin's and the benches' ports, and ``mcw run``'s lab mode.

:class:`MemoryPublisher` validates and encodes every weights message exactly as the MQTT
publisher does and hands it to whoever plays the agents (the twin); :class:`NullSink` keeps
nothing.  Lab mode of ``mcw run`` reads KPIs from a JSON file and appends weights to a
JSON-lines file:

For a bench or a test where the RIC parts (RMR, A1, SDL) are real but there is no InfluxDB or
MQTT broker: ``mcw run --kpi-file kpis.json --publish-file weights.jsonl``.  The KPI file is
re-read whenever it changes, so an experiment can change capacities while the xApp runs.

KPI file format::

    {"cpes": {"cpe-1": {"nr": {"delivered_mbps": 342, "saturated": 1, "rtt_ms": 20},
                        "wifi": {"rtt_ms": 8, "dl": {"delivered_mbps": 1190, "saturated": 1},
                                 "ul": {"delivered_mbps": 410, "saturated": 1}}}}}

Fields of a WAT apply to both directions; those under ``dl`` or ``ul`` to that direction only.
Every row is taken as fresh (its time is the time of the call).

:class:`LoopbackGlue` is the shipped :class:`~xapp.adapters.rmr.RmrGlue` without RMR's library:
messages go in through :meth:`~xapp.adapters.rmr.RmrGlue.dispatch` (what the dispatch worker
does with each received message) and the answers RMR would return to the sender are kept,
with the time they left, for tests and ``bench/bench_a1.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from xapp.adapters.mqtt.versions import MemoryVersionStore, VersionAllocator
from xapp.adapters.mqtt.weights_encoder import encode_weights_batch
from xapp.adapters.rmr import MS_MEID, MS_MSG_TYPE, MS_PAYLOAD, RmrGlue
from xapp.core.forecast import DIRECTIONS, CapacityForecast, KpiFrame
from xapp.core.ports import Published, PublishResult, VersionStore, WeightBatch


class FileKpiSource:
    """:class:`~xapp.core.ports.KpiSource` over a JSON file (format in the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._rows: list[tuple[str, str, str, dict[str, float]]] = []

    def _reload(self) -> None:
        st = self.path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        doc = json.loads(self.path.read_text(encoding="utf-8"))
        rows: list[tuple[str, str, str, dict[str, float]]] = []
        for cpe, wats in doc.get("cpes", {}).items():
            for wat, fields in wats.items():
                both = {k: float(v) for k, v in fields.items() if k not in DIRECTIONS}
                own = {d: {k: float(v) for k, v in fields[d].items()}
                       for d in DIRECTIONS if d in fields}
                if not own:
                    rows.append((str(cpe), str(wat), "", both))
                for d in DIRECTIONS:
                    if own:
                        rows.append((str(cpe), str(wat), d, {**both, **own.get(d, {})}))
        self._rows, self._stamp = rows, stamp

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        # A file being rewritten fails to parse: keep the last good rows.
        with contextlib.suppress(OSError, ValueError):
            self._reload()
        names = sorted({k for _, _, _, f in self._rows for k in f})
        return KpiFrame(
            time_s=now_s,
            cpe=np.array([r[0] for r in self._rows], dtype=np.str_),
            wat=np.array([r[1] for r in self._rows], dtype=np.str_),
            values={n: np.array([r[3].get(n, np.nan) for r in self._rows], dtype=np.float64)
                    for n in names},
            direction=np.array([r[2] for r in self._rows], dtype="<U2"),
        )


class MemoryPublisher:
    """:class:`~xapp.core.ports.WeightPublisher` that keeps the messages in memory.

    Each message is the ``mcw.weights.v2`` payload (both directions' sets) that
    :func:`~xapp.adapters.mqtt.weights_encoder.encode_weights_batch` validates and encodes for
    MQTT, with versions from the same :class:`~xapp.adapters.mqtt.versions.VersionAllocator`; a
    refused one is reported in the result's ``errors`` like the MQTT publisher does.
    :meth:`take` hands the messages published since the last call to the simulated agents.
    """

    def __init__(self, versions: VersionStore | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._versions = VersionAllocator(versions if versions is not None
                                          else MemoryVersionStore(), block=1000)
        self._clock = clock
        self._lock = threading.Lock()
        self._outbox: list[bytes] = []
        self.published = 0

    def publish_many(self, batch: WeightBatch) -> PublishResult:
        with self._lock:
            out = encode_weights_batch(batch, int(self._clock() * 1000),
                                       self._versions.take_many)
            self._outbox += out.payloads
            self.published += len(out.payloads)
        return out.result(batch)

    def take(self) -> list[dict[str, Any]]:
        """The messages published since the last call, oldest first, as the agents parse
        them."""
        with self._lock:
            out, self._outbox = self._outbox, []
        return [json.loads(payload) for payload in out]


class NullSink:
    """A :class:`~xapp.core.ports.TelemetrySink` that keeps nothing (no InfluxDB in the lab)."""

    def write_kpis(self, frame: KpiFrame) -> None:
        return None

    def write_forecasts(self, frame: KpiFrame, forecast: CapacityForecast,
                        model_version: str) -> None:
        return None

    def write_weights(self, published: Published) -> None:
        return None


class JsonlPublisher:
    """:class:`~xapp.core.ports.WeightPublisher` appending each weights message as a line.

    The lines are the MQTT payloads (validated and encoded the one way); versions come from
    the same :class:`~xapp.adapters.mqtt.versions.VersionAllocator` as the MQTT publisher's,
    so they keep growing across restarts when ``versions`` is the SDL store.
    """

    def __init__(self, path: str | os.PathLike[str], versions: VersionStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._versions = VersionAllocator(versions, block=100)
        self._clock = clock
        self._lock = threading.Lock()
        self.connected = True

    def publish_many(self, batch: WeightBatch) -> PublishResult:
        with self._lock:
            out = encode_weights_batch(batch, int(self._clock() * 1000),
                                       self._versions.take_many)
            with self.path.open("ab") as fh:
                fh.write(b"".join(payload + b"\n" for payload in out.payloads))
        return out.result(batch)


def read_published(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records :class:`JsonlPublisher` appended to ``path`` (empty when it has none yet)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


class LoopbackGlue(RmrGlue):
    """:class:`~xapp.adapters.rmr.RmrGlue` whose return-to-sender keeps the answer (and when it
    left) instead of handing it to RMR; everything before that is the shipped code.  The
    buffer handed to :meth:`send` is any token that names the message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: queue.Queue[tuple[float, Any, int, bytes]] = queue.Queue()

    def send(self, mtype: int, payload: bytes, token: Any, meid: bytes = b"") -> float:
        """Dispatch one message as if received; returns when it was (``time.monotonic()``)."""
        at = time.monotonic()
        self.dispatch(None, {MS_MSG_TYPE: mtype, MS_PAYLOAD: payload, MS_MEID: meid}, token)
        return at

    def answer(self, token: Any, timeout_s: float = 10.0) -> tuple[float, int, bytes]:
        """When the answer to the message ``token`` left, its type and payload (answers to
        other messages stay queued); raises ``queue.Empty`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        held = []
        try:
            while True:
                at, buf, mtype, payload = self.answers.get(
                    timeout=max(0.0, deadline - time.monotonic()))
                if buf == token:
                    return at, mtype, payload
                held.append((at, buf, mtype, payload))
        finally:
            for item in held:
                self.answers.put(item)

    def rmr_healthy(self) -> bool:
        return True  # RMR's own receive thread: there is none here

    def _rts(self, sbuf: Any, payload: bytes, mtype: int) -> bool:
        self.answers.put((time.monotonic(), sbuf, mtype, payload))
        return True

    def _free(self, sbuf: Any) -> None:
        pass
