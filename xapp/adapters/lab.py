"""In-memory and file adapters: the twin's and the benches' ports, and ``mcw run``'s lab mode.

:class:`MemoryPublisher` builds and validates every weights message exactly as the MQTT
publisher does and hands it to whoever plays the agents (the twin); :class:`NullSink` keeps
nothing.  Lab mode of ``mcw run`` reads KPIs from a JSON file and appends weights to a
JSON-lines file:

For a bench or a test where the RIC parts (RMR, A1, SDL) are real but there is no InfluxDB or
MQTT broker: ``mcw run --kpi-file kpis.json --publish-file weights.jsonl``.  The KPI file is
re-read whenever it changes, so an experiment can change capacities while the xApp runs.

KPI file format::

    {"cpes": {"cpe-1": {"nr": {"delivered_mbps": 342, "saturated": 1, "rtt_ms": 20},
                        "wifi": {"delivered_mbps": 1190, "saturated": 1}}}}

Every row is taken as fresh (its time is the time of the call).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from xapp.adapters.mqtt.payloads import PayloadError, build_weights
from xapp.adapters.mqtt.versions import MemoryVersionStore, VersionAllocator, VersionStore
from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.ports import PublishResult, WeightUpdate
from xapp.core.weights import WeightDecision


class FileKpiSource:
    """:class:`~xapp.core.ports.KpiSource` over a JSON file (format in the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._rows: list[tuple[str, str, dict[str, float]]] = []

    def _reload(self) -> None:
        st = self.path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        doc = json.loads(self.path.read_text(encoding="utf-8"))
        rows: list[tuple[str, str, dict[str, float]]] = []
        for cpe, wats in doc.get("cpes", {}).items():
            for wat, fields in wats.items():
                rows.append((str(cpe), str(wat), {k: float(v) for k, v in fields.items()}))
        self._rows, self._stamp = rows, stamp

    def latest(self, now_s: float, max_age_s: float) -> KpiFrame:
        # A file being rewritten fails to parse: keep the last good rows.
        with contextlib.suppress(OSError, ValueError):
            self._reload()
        names = sorted({k for _, _, f in self._rows for k in f})
        return KpiFrame(
            time_s=now_s,
            cpe=np.array([r[0] for r in self._rows], dtype=np.str_),
            wat=np.array([r[1] for r in self._rows], dtype=np.str_),
            values={n: np.array([r[2].get(n, np.nan) for r in self._rows], dtype=np.float64)
                    for n in names},
        )


class MemoryPublisher:
    """:class:`~xapp.core.ports.WeightPublisher` that keeps the messages in memory.

    Each message is the ``mcw.weights.v1`` document :func:`~xapp.adapters.mqtt.payloads.
    build_weights` makes and validates for MQTT, with versions from the same
    :class:`~xapp.adapters.mqtt.versions.VersionAllocator`; a refused one is reported in the
    result's ``errors`` like the MQTT publisher does.  :meth:`take` hands the messages published
    since the last call to the simulated agents.
    """

    def __init__(self, versions: VersionStore | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._versions = VersionAllocator(versions if versions is not None
                                          else MemoryVersionStore(), block=1000)
        self._clock = clock
        self._lock = threading.Lock()
        self._outbox: list[dict[str, Any]] = []
        self.published = 0

    def publish_many(self, items: Iterable[WeightUpdate]) -> PublishResult:
        result = PublishResult()
        issued = int(self._clock() * 1000)
        with self._lock:
            for cpe_id, decision, mode, lease_s in items:
                version = self._versions.peek(cpe_id)
                try:
                    doc = build_weights(cpe_id, version, decision, mode=mode, lease_s=lease_s,
                                        issued_at_ms=issued)
                except PayloadError as exc:
                    result.errors[cpe_id] = exc
                    continue
                self._versions.take(cpe_id)
                self._outbox.append(doc)
                result.versions[cpe_id] = version
            self.published += len(result.versions)
        return result

    def take(self) -> list[dict[str, Any]]:
        """The messages published since the last call, oldest first."""
        with self._lock:
            out, self._outbox = self._outbox, []
        return out


class NullSink:
    """A :class:`~xapp.core.ports.TelemetrySink` that keeps nothing (no InfluxDB in the lab)."""

    def write_kpis(self, frame: KpiFrame) -> None:
        return None

    def write_forecasts(self, frame: KpiFrame, forecast: CapacityForecast,
                        model_version: str) -> None:
        return None

    def write_weights(self, time_s: float,
                      weights: Mapping[str, tuple[int, WeightDecision]]) -> None:
        return None


class JsonlPublisher:
    """:class:`~xapp.core.ports.WeightPublisher` appending one JSON line per message.

    Versions come from the same :class:`~xapp.adapters.mqtt.versions.VersionAllocator` as the MQTT
    publisher's, so they keep growing across restarts when ``versions`` is the SDL store.
    """

    def __init__(self, path: str | os.PathLike[str], versions: VersionStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._versions = VersionAllocator(versions, block=100)
        self._clock = clock
        self._lock = threading.Lock()
        self.connected = True

    def publish_many(self, items: Iterable[WeightUpdate]) -> PublishResult:
        result = PublishResult()
        for cpe_id, decision, mode, lease_s in items:
            result.versions[cpe_id] = self._publish(cpe_id, decision, mode, lease_s)
        return result

    def _publish(self, cpe_id: str, decision: WeightDecision, mode: str, lease_s: float) -> int:
        with self._lock:
            version = self._versions.peek(cpe_id)
            line = json.dumps({"cpe_id": cpe_id, "version": version,
                               "issued_at_ms": int(self._clock() * 1000), "lease_s": lease_s,
                               "mode": mode, "reason": decision.reason,
                               "weights": dict(decision.weights)}, sort_keys=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
            self._versions.take(cpe_id)
            return version


def read_published(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records :class:`JsonlPublisher` appended to ``path`` (empty when it has none yet)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
