"""InfluxDB store of per-WAT telemetry: the xApp's :class:`KpiSource` and :class:`TelemetrySink`.

Uses the maintained ``influxdb-client`` (v2 API), so the same code talks to InfluxDB 2.x and to
1.8 through its ``/api/v2/write`` and ``/api/v2/query`` compatibility endpoints (1.8: bucket
``database/retention-policy``, token ``user:password`` or empty, ``flux-enabled = true``).

Writes are buffered and sent in batches.  What happens to a batch depends on why it failed
(:func:`~xapp.adapters.influx.write_errors.transient`):

* **Transient** (connection refused or reset, timeouts, 5xx, 429, 408, and 401/403/404, which
  say the destination is wrong or not there yet, not that the batch is): the batch stays at the
  head of the buffer and is retried after an exponential backoff (with jitter, capped, longer if
  the server sends ``Retry-After``).  Nothing is lost while the buffer has room; the buffer is
  bounded, and when it is full the *oldest* points are dropped and counted in
  :attr:`InfluxCounters.dropped_points` (fresh telemetry is worth more than old).
* **Permanent** (any other 4xx): sending the same bytes again can never succeed, so the batch
  leaves the buffer at once and the next one is sent.  A *partial write* (1.8's 400 "partial
  write: ...", 2.x's 422) has already stored the good points; the rejected ones are counted by
  reason.  A 400 that stored nothing (2.x rejects a whole batch for one bad line; 1.8 does so
  for a field-type conflict *inside* one batch) and a 413 are split in halves and re-sent, so
  one bad line costs its batch about ``2 log2(n)`` requests, not its good points; a line
  isolated alone is dropped.  Re-sending points already stored is harmless: InfluxDB keeps one
  point per series and timestamp.

Tag values are written so that InfluxDB reads back exactly what was written (see
:func:`~xapp.adapters.influx.line_protocol.escape_tag`); values line protocol cannot carry are
refused and counted.

Reads skip and count rows they cannot parse; they never raise on bad data.
"""

from __future__ import annotations

import io
import itertools
import logging
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
import urllib3
from influxdb_client.client.influxdb_client import InfluxDBClient
from influxdb_client.client.write_api import SYNCHRONOUS
from influxdb_client.rest import ApiException
from numpy.typing import NDArray

from xapp.adapters.influx import write_errors
from xapp.adapters.influx.line_protocol import Lines, column_lines
from xapp.core.forecast import DIRECTIONS, CapacityForecast, KpiFrame
from xapp.core.kpis import (
    KPI_FIELDS,
    MEASUREMENT_KPI,
    MEASUREMENT_PREDICTION,
    MEASUREMENT_WEIGHT,
    clean_columns,
)
from xapp.core.ports import Published
from xapp.core.timings import derive_timings
from xapp.core.workers import Worker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InfluxConfig:
    """Where and how to write.

    ``bucket`` on InfluxDB 1.8 is ``database/retention-policy`` (``mcw/autogen``); ``token`` is
    empty (no auth) or ``user:password``; ``org`` is ignored by 1.8.  ``writer`` (the xApp
    replica's id) tags every ``wat_kpi`` point :meth:`InfluxStore.write_kpis` writes, so that
    the :class:`InfluxIntake` of the same replica skips them: they reached its intake in-process
    (agent telemetry, E2 reports), and reading them back cost InfluxDB a query of 60,000 points
    a second at 10,000 CPEs. Another replica's points are still read.
    """

    url: str
    bucket: str = "mcw/autogen"
    org: str = "-"
    token: str = ""
    batch_size: int = 5000
    max_buffer_points: int = 200_000
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    timeout_ms: int = 10_000
    writer: str = ""


@dataclass
class InfluxCounters:
    """Cumulative counts for Prometheus (``mcw_influx_events{event=<field name>}``).

    ``dropped_points`` counts overflow of the bounded buffer (points never sent);
    ``refused_points`` points not queued because a tag value cannot be carried by line protocol
    (:func:`~xapp.adapters.influx.line_protocol.escape_tag`); ``rejected_points_<reason>``
    points InfluxDB refused for good (the reason from its error message: ``parse``,
    ``type_conflict``, ``too_large``, ``other``) and ``rejected_batches`` the requests such
    refusals came in; ``write_failures`` transient failures (each retried).
    """

    written_points: int = 0
    write_batches: int = 0
    write_failures: int = 0
    dropped_points: int = 0
    refused_points: int = 0
    rejected_batches: int = 0
    rejected_points_parse: int = 0
    rejected_points_type_conflict: int = 0
    rejected_points_too_large: int = 0
    rejected_points_other: int = 0
    rejected_values: int = 0
    parse_skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def add_rejected(self, reason: str, points: int) -> None:
        """Count ``points`` InfluxDB rejected for ``reason`` (one of
        :data:`~xapp.adapters.influx.write_errors.REJECT_REASONS`)."""
        if reason == "parse":
            self.rejected_points_parse += points
        elif reason == "type_conflict":
            self.rejected_points_type_conflict += points
        elif reason == "too_large":
            self.rejected_points_too_large += points
        else:
            self.rejected_points_other += points

    @property
    def rejected_points(self) -> int:
        return (self.rejected_points_parse + self.rejected_points_type_conflict
                + self.rejected_points_too_large + self.rejected_points_other)


class InfluxStore:
    """Buffered writer and Flux reader of ``wat_kpi`` and the write-back measurements.

    Safe for concurrent use: writers append under a lock; one flush runs at a time.

    The loop's write-backs (forecasts, weights) and agent telemetry are formatted as line
    protocol by the flusher, not by the writer: ``write_kpis``, ``write_forecasts`` and
    ``write_weights`` keep references to the (never modified) arrays, so the tick does not spend
    about 100 ms on 100,000 lines of history at 10,000 CPEs. What they count (refused values)
    is counted when the flusher formats them.
    """

    def __init__(self, config: InfluxConfig) -> None:
        self.config = config
        self.counters = InfluxCounters()
        #: With several replicas (the fleet's shard count): KPI points get a ``shard`` tag, for
        #: dashboards per shard.  Reads do not rely on it: other writers tag no shard.
        self.shard_of: Callable[[str], int] | None = None
        self._client = InfluxDBClient(url=config.url, token=config.token, org=config.org,
                                      timeout=config.timeout_ms)
        self._write = self._client.write_api(write_options=SYNCHRONOUS)
        self._http = urllib3.PoolManager(
            timeout=urllib3.Timeout(total=config.timeout_ms / 1000), retries=False)
        self._buffer: deque[str] = deque()
        #: Writes not formatted yet, and the points they hold.
        self._deferred: list[tuple[Callable[[], Lines], int]] = []
        self._deferred_points = 0
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._backoff_s = 0.0
        self._retry_at = 0.0
        #: The flusher, once started (:meth:`start`).
        self.worker: Worker | None = None

    def ping(self) -> bool:
        """True when the server answers its health endpoint (readiness checks); never raises."""
        try:
            return bool(self._client.ping())
        except Exception:  # any transport error means "not ready", not a crash of the caller
            return False

    # ----------------------------------------------------------------- writing
    @property
    def buffered(self) -> int:
        with self._lock:
            return len(self._buffer) + self._deferred_points

    def _defer(self, job: Callable[[], Lines], points: int) -> None:
        with self._lock:
            self._deferred.append((job, points))
            self._deferred_points += points
            # Over the bound (InfluxDB away or slower than the fleet): the oldest writes go
            # unformatted, as formatted points would go (oldest first), and the writer never
            # pays for formatting.
            limit = self.config.max_buffer_points
            while len(self._buffer) + self._deferred_points > limit and len(self._deferred) > 1:
                _old, n = self._deferred.pop(0)
                self._deferred_points -= n
                self.counters.dropped_points += n
            # Not at every batch: the flusher would format while the tick still runs. It
            # flushes once per period, and early only when half the bound is reached.
            half_full = len(self._buffer) + self._deferred_points >= limit // 2
        if half_full and self.worker is not None:
            self.worker.wake()

    def _format_deferred(self) -> None:
        with self._lock:
            jobs, self._deferred, self._deferred_points = self._deferred, [], 0
        for job, _n in jobs:
            self._queue(job())

    def _append(self, lines: Iterable[str | None], refused: int = 0) -> None:
        with self._lock:
            self.counters.refused_points += refused
            buffer, limit = self._buffer, self.config.max_buffer_points
            kept = [ln for ln in lines if ln is not None]
            # Oldest points out first when the buffer would overflow (InfluxDB away).
            over = max(0, len(buffer) + len(kept) - limit)
            if over:
                drop_old = min(over, len(buffer))
                for _ in range(drop_old):
                    buffer.popleft()
                # More new lines than the buffer holds: only the newest fit.
                kept = kept[over - drop_old:]
                self.counters.dropped_points += over
            buffer.extend(kept)
            full = len(self._buffer) >= self.config.batch_size
        if full:
            # Never flush here: writers are the loop and the MQTT network thread, and a slow
            # InfluxDB must not stall them.  The flusher thread sends the batch now.
            worker = self.worker
            if worker is not None:
                worker.wake()

    def write_lines(self, lines: Iterable[str]) -> None:
        """Queue raw line-protocol lines (as they are: InfluxDB judges them)."""
        self._append(lines)

    def _queue(self, lines: Lines) -> None:
        self._append(lines.lines, lines.refused)

    def write_kpis(self, frame: KpiFrame) -> None:
        """Queue one ``wat_kpi`` point per row; out-of-range values are dropped and counted.

        A ``cell`` column of strings is not part of :class:`KpiFrame`; rows are tagged with
        the ``cell`` given in ``frame.values`` only through :meth:`write_table`.
        """
        self._defer(lambda: self._kpi_lines(frame), len(frame))

    def _kpi_lines(self, frame: KpiFrame) -> Lines:
        cpes = frame.cpe.astype(str).tolist()
        tags = {"cpe": cpes, "wat": frame.wat.astype(str).tolist(),
                "direction": _directions(frame)}
        if self.config.writer:
            tags["writer"] = [self.config.writer] * len(frame)
        if self.shard_of is not None:
            tags["shard"] = [str(self.shard_of(c)) for c in cpes]
        return column_lines(
            MEASUREMENT_KPI, tags,
            self.clean_kpis({k: v for k, v in frame.values.items() if k in KPI_FIELDS}),
            round(frame.time_s * 1e9) if frame.row_time_s is None
            else np.round(frame.row_times() * 1e9).astype(np.int64), required=_IDENTITY)

    def write_table(self, df: pd.DataFrame) -> int:
        """Queue a long table (time_s, cpe, wat, [cell], [direction], fields); returns points
        queued.  A row without a direction is written without the tag (both directions)."""
        times = pd.to_numeric(df["time_s"], errors="coerce").to_numpy(dtype=np.float64) * 1e9
        ok = np.isfinite(times)
        self.counters.parse_skipped += int((~ok).sum())
        df = df[ok]
        cells = (df["cell"].where(df["cell"].notna(), "").astype(str).tolist() if "cell" in df
                 else [""] * len(df))  # (a missing cell is no tag; a cell named "nan" is one)
        directions = (df["direction"].where(df["direction"].notna(), "").astype(str).tolist()
                      if "direction" in df else [""] * len(df))
        lines = column_lines(
            MEASUREMENT_KPI, {"cpe": df["cpe"].where(df["cpe"].notna(), "").astype(str).tolist(),
                              "wat": df["wat"].where(df["wat"].notna(), "").astype(str).tolist(),
                              "cell": cells, "direction": directions},
            self.clean_kpis({f: pd.to_numeric(df[f], errors="coerce").to_numpy(dtype=np.float64)
                            for f in df.columns if f in KPI_FIELDS}),
            times[ok].astype(np.int64), required=_IDENTITY)
        self._queue(lines)
        return len(lines.lines)

    def clean_kpis(self, columns: Mapping[str, Any]) -> dict[str, NDArray[np.float64]]:
        """The KPI columns with infinite and out-of-range values made NaN (not written),
        counted."""
        clean, counts = clean_columns(columns)
        self.counters.rejected_values += counts.total
        return clean

    def write_forecasts(self, frame: KpiFrame, forecast: CapacityForecast,
                        model_version: str) -> None:
        self._defer(lambda: column_lines(
            MEASUREMENT_PREDICTION, {"cpe": frame.cpe.astype(str).tolist(),
                                     "wat": frame.wat.astype(str).tolist(),
                                     "direction": _directions(frame)},
            {"median_mbps": np.asarray(forecast.median_mbps),
             "lower_mbps": np.asarray(forecast.lower_mbps)},
            round(frame.time_s * 1e9), text={"model_version": model_version}, decimals=3,
            required=_IDENTITY), len(frame))

    def write_weights(self, published: Published) -> None:
        """One ``wat_weight`` point per (CPE, WAT, direction) of the messages published."""
        self._defer(lambda: self._weight_lines(published),
                    len(published.batch.cpe_ids) * len(published.batch.wats) * len(DIRECTIONS))

    def _weight_lines(self, published: Published) -> Lines:
        b = published.batch
        out = Lines([], 0)
        for name in DIRECTIONS:
            d = b.direction(name)
            rows, cols = np.nonzero(d.present)
            weights = d.weights[rows, cols]
            totals = np.maximum(np.where(d.present, d.weights, 0).sum(axis=1), 1)
            part = column_lines(
                MEASUREMENT_WEIGHT, {"cpe": [b.cpe_ids[i] for i in rows.tolist()],
                                     "wat": [b.wats[j] for j in cols.tolist()],
                                     "direction": [name] * len(rows)},
                {"weight": weights, "share": weights / totals[rows],
                 "version": published.versions[rows]},
                round(published.time_s * 1e9), decimals=4, required=_IDENTITY)
            out.lines.extend(part.lines)
            out.refused += part.refused
        return out

    def flush(self, force: bool = True) -> bool:
        """Send buffered points batch by batch; True when the buffer is empty afterwards.

        A batch InfluxDB refuses for good is counted and dropped, and the next one is sent; a
        transient failure stops the flush (False) and starts a backoff, and without ``force``
        a flush during the backoff does nothing.
        """
        with self._flush_lock:
            self._format_deferred()  # (during a backoff too: the buffer's bound applies)
            if not force and time.monotonic() < self._retry_at:
                return False
            while True:
                with self._lock:
                    n = min(self.config.batch_size, len(self._buffer))
                    batch = list(itertools.islice(self._buffer, n))
                if not batch:
                    return True
                try:
                    rejected = self._send(batch, [_SPLIT_BUDGET])
                except write_errors.TransientWriteError as exc:
                    self.counters.write_failures += 1
                    self._backoff_s = min(self.config.backoff_max_s,
                                          max(self.config.backoff_initial_s,
                                              self._backoff_s * 2))
                    delay = self._backoff_s * (0.5 + random.random() / 2)
                    if exc.retry_after_s is not None:  # the server knows best, within bounds
                        delay = max(delay, min(exc.retry_after_s, self.config.backoff_max_s))
                    self._retry_at = time.monotonic() + delay
                    log.warning("influx write of %d points failed (retry in %.1fs): %s",
                                len(batch), delay, exc)
                    return False
                with self._lock:
                    # Drops may have removed some of the batch's head meanwhile: remove only
                    # what is still there.
                    for sent in batch:
                        if not self._buffer or self._buffer[0] is not sent:
                            break
                        self._buffer.popleft()
                lost = 0
                for refusal in rejected:  # one per request InfluxDB refused
                    self.counters.rejected_batches += 1
                    for reason, points in refusal.items():
                        self.counters.add_rejected(reason, points)
                        lost += points
                self.counters.written_points += n - lost
                self.counters.write_batches += 1
                self._backoff_s = 0.0
                self._retry_at = 0.0

    def _send(self, batch: list[str], budget: list[int]) -> list[dict[str, int]]:
        """Write ``batch``; the points InfluxDB refused for good, by reason, one dict per
        refused request.

        Raises :class:`~xapp.adapters.influx.write_errors.TransientWriteError` when the batch
        should be sent again later.  A refused batch that stored nothing is split in halves
        while ``budget[0]`` (requests left for this batch) allows, to keep its good points.
        """
        try:
            self._write.write(bucket=self.config.bucket, org=self.config.org,
                              record="\n".join(batch))
            return []
        except ApiException as exc:
            status = int(exc.status or 0)
            message = write_errors.error_message(exc)
            if write_errors.transient(status):
                raise write_errors.TransientWriteError(f"HTTP {status}: {message}",
                                                       write_errors.retry_after(exc.headers)
                                                       ) from exc
        except Exception as exc:  # urllib3/socket errors of many kinds: the server is away
            raise write_errors.TransientWriteError(f"{type(exc).__name__}: {exc}", None) from exc
        if status == 422 or "partial write" in message:
            # The good points are stored already: re-sending would store them again and
            # reject the same bad ones.
            counts = write_errors.rejections(message, len(batch))
            log.warning("influx stored %d of %d points; refused %s: %s", len(batch)
                        - sum(counts.values()), len(batch), counts, message[:_LOG_CHARS])
            return [counts]
        unparsable = message.count("unable to parse")
        if (status in (400, 413) and len(batch) > 1 and budget[0] >= 2
                and unparsable < len(batch)):  # (1.8 names every unparsable line)
            budget[0] -= 2
            half = len(batch) // 2
            return self._send(batch[:half], budget) + self._send(batch[half:], budget)
        reason = ("too_large" if status == 413 else "parse" if unparsable
                  else "type_conflict" if "field type conflict" in message else "other")
        log.warning("influx refused %d points (HTTP %d), dropped: %s", len(batch), status,
                    message[:_LOG_CHARS])
        return [{reason: len(batch)}]

    def start(self, interval_s: float = 1.0) -> Worker:
        """Flush every ``interval_s`` (honouring backoff), or as soon as a batch is full, in a
        supervised worker until :meth:`close`.  Its deadline allows a whole split of a refused
        batch (up to 64 requests) against a slow server."""
        if self.worker is None:
            self.worker = Worker("influx-flush", lambda: self.flush(force=False), interval_s,
                                 deadline_s=120.0)
        return self.worker.start()

    def close(self) -> None:
        """Stop the flusher, try a last flush, close the client."""
        if self.worker is not None:
            self.worker.stop(timeout_s=5.0)
        if self._buffer:
            self.flush(force=True)
        self._client.close()  # type: ignore[no-untyped-call]
        self._http.clear()

    # ----------------------------------------------------------------- reading
    def _influxql(self, start: str, stop: str | None, measurement: str,
                  fields: tuple[str, ...] | None, not_writer: str = "") -> str:
        def when(t: str) -> str:
            if _DURATION.fullmatch(t):
                return f"now() - {t[1:]}"
            stamp = str(pd.Timestamp(t).tz_convert("UTC").isoformat())
            return "'" + stamp.replace("+00:00", "Z") + "'"

        what = ("*" if fields is None
                else ", ".join([_ident(f) for f in fields] + [f'"{t}"::tag' for t in _TAGS]))
        where = f"time >= {when(start)}" + (f" AND time < {when(stop)}" if stop else "")
        if not_writer:
            # (a point without the tag, another writer's, compares unequal and is read)
            where += f" AND \"writer\" != '{_influxql_string(not_writer)}'"
        return f"SELECT {what} FROM {_ident(measurement)} WHERE {where}"

    def _query(self, statement: str) -> pd.DataFrame:
        """Run one InfluxQL SELECT over the v1 ``/query`` API; its rows as read from CSV
        (nanosecond times, empty values NaN, tag values kept as written)."""
        db, _, rp = self.config.bucket.partition("/")
        params = {"db": db, "q": statement, "epoch": "ns", "chunked": "true",
                  "chunk_size": "20000"}
        if rp:
            params["rp"] = rp
        headers = {"Accept": "application/csv"}
        if ":" in self.config.token:
            headers.update(urllib3.make_headers(basic_auth=self.config.token))
        elif self.config.token:
            headers["Authorization"] = f"Token {self.config.token}"
        resp = self._http.request("GET", self.config.url.rstrip("/") + "/query", fields=params,
                                  headers=headers)
        if resp.status != 200:
            raise InfluxReadError(f"InfluxDB answered {resp.status}: {resp.data[:200]!r}")
        if not resp.data.strip():
            return pd.DataFrame()
        text = {c: str for c in ("name", "tags", "error", *_TAGS, *_TEXT_FIELDS)}
        # Tags are bytes as another writer sent them: undecodable ones are replaced, not
        # allowed to fail every read from now on.
        table = pd.read_csv(io.BytesIO(resp.data), dtype=text, keep_default_na=False,
                            na_values=[""], low_memory=False, encoding_errors="replace")
        if list(table.columns) == ["error"]:  # (a *field* named error is data, not this)
            raise InfluxReadError(str(table["error"].dropna().iloc[0]))
        return table

    def read_table(self, start: str = "-24h", stop: str | None = None,
                   measurement: str = MEASUREMENT_KPI,
                   fields: tuple[str, ...] | None = None, not_writer: str = ""
                   ) -> pd.DataFrame:
        """Points of ``measurement`` in [start, stop) as a long table sorted by time.

        ``start``/``stop`` are relative (``-24h``) or RFC 3339 times; ``not_writer`` leaves out
        the points that writer tagged (:attr:`InfluxConfig.writer`).  Rows without a time,
        cpe or wat are skipped and counted; non-numeric KPI values become NaN (counted).  The
        ``direction`` column is ``dl``, ``ul`` or ``""`` (a point without the tag: both
        directions, as every point written before directions existed); a row with any other
        direction is skipped and counted.

        Read with InfluxQL over the v1 ``/query`` API, which InfluxDB 1.8 serves and 2.x keeps
        for compatibility, as CSV parsed by pandas: 90,000 points take about 50 ms to parse,
        where Flux's annotated CSV through influxdb-client's record objects took seconds and
        left the KPI intake of a 10,000-CPE fleet ten seconds behind.
        """
        raw = self._query(self._influxql(start, stop, measurement, fields, not_writer))
        if len(raw) == 0 or "time" not in raw:
            return pd.DataFrame(columns=["time_s", "cpe", "wat", "cell", "direction"])
        for tag in _TAGS:
            if tag not in raw:
                raw[tag] = np.nan
        times = pd.to_numeric(raw["time"], errors="coerce")
        direction = raw["direction"].fillna("").astype(str)
        ok = (times.notna() & raw["cpe"].notna() & raw["wat"].notna()
              & direction.isin(["", *DIRECTIONS]))
        self.counters.parse_skipped += int((~ok).sum())
        raw, times = raw[ok], times[ok]
        df = pd.DataFrame({
            "time_s": times.to_numpy(dtype=np.int64) / 1e9,
            "cpe": raw["cpe"].astype(str).to_numpy(),
            "wat": raw["wat"].astype(str).to_numpy(),
            "cell": raw["cell"].fillna("").astype(str).to_numpy(),
            "direction": direction[ok].to_numpy(dtype=str)})
        for name in raw.columns:
            if name in ("name", "tags", "time", "time_s", "writer", *_TAGS):
                continue  # (a field another writer named time_s must not replace the times)
            col = raw[name]
            if name in _TEXT_FIELDS:  # CSV cannot tell an empty string from no value
                df[name] = col.fillna("").astype(str).to_numpy()
                continue
            if col.dtype.kind in "fiub":  # numbers (and empty values) only: the usual case
                df[name] = col.to_numpy(dtype=np.float64)
                continue
            numeric = pd.to_numeric(col.map(_number), errors="coerce")
            if name in KPI_FIELDS:
                self.counters.parse_skipped += int((numeric.isna() & col.notna()).sum())
                df[name] = numeric.to_numpy(dtype=np.float64)
            else:
                df[name] = col.to_numpy()
        return df.sort_values(["time_s", "cpe", "wat"], kind="mergesort").reset_index(drop=True)


_TAGS = ("cpe", "wat", "cell", "direction")
#: Tags without which a point of ours means nothing (the reader skips such rows).
_IDENTITY = ("cpe", "wat")
#: String fields this xApp writes, read back as text (``""`` where empty or absent).
_TEXT_FIELDS = ("model_version",)

#: Requests one batch may spend isolating its bad lines (a batch of 5,000 with one bad line
#: needs about 26); past it the pieces still refused are dropped whole.
_SPLIT_BUDGET = 64
_LOG_CHARS = 500


class InfluxReadError(RuntimeError):
    """InfluxDB refused or failed a query."""


_DURATION = re.compile(r"-\d+(ns|u|µs|ms|s|m|h|d|w)")


def _ident(name: str) -> str:
    """An InfluxQL identifier, quoted."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _influxql_string(value: str) -> str:
    """The inside of an InfluxQL single-quoted string literal."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _number(value: object) -> object:
    """A CSV cell of a KPI column as a number, or None (booleans are 1 and 0)."""
    if isinstance(value, str):
        return {"true": 1.0, "false": 0.0}.get(value, value)
    if isinstance(value, bool):
        return float(value)
    return value


def flush_interval_s(period_s: float) -> float:
    """How often the xApp's InfluxDB writer flushes and its intake polls: once per control
    period, at most once a second (:func:`xapp.core.timings.derive_timings`)."""
    return derive_timings(period_s).influx_flush_s


def _directions(frame: KpiFrame) -> list[str]:
    """The ``direction`` tag of each row ("" leaves the tag out: both directions)."""
    if frame.direction is None:
        return [""] * len(frame)
    return [str(d) for d in frame.direction.tolist()]
