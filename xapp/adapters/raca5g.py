"""Importer for the Raca et al. 5G production traces (MMSys 2020, G-NetTrack Pro CSV, 1 Hz).

Each file is one session of one phone downloading a large file, so ``DL_bitrate`` follows what
the network gives: a full-buffer (saturated) capacity measurement.  A session becomes one CPE
(named after the file) with one cellular WAT ``nr``; the radio access technology of each second
(5G NSA, LTE, HSPA+) is kept in the ``rat`` field rather than in the WAT tag, because the
subflow (the phone's cellular interface) is the same and its history must not restart at every
NR attach/detach.

Malformed rows (wrong column count, unparsable timestamp or ``DL_bitrate``) are skipped and
counted; an unparsable KPI value becomes NaN and is counted.  Nothing here raises on bad data
except a file that is not a Raca CSV at all (missing columns).
"""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from xapp.core.kpis import FIELD_RANGES

REQUIRED_COLUMNS: tuple[str, ...] = ("Timestamp", "DL_bitrate", "NetworkMode", "RSRP", "RSRQ",
                                     "SNR", "CQI")
#: Raca column -> (wat_kpi field, scale).
NUMERIC_COLUMNS: dict[str, tuple[str, float]] = {
    "RSRP": ("rsrp_dbm", 1.0),
    "RSRQ": ("rsrq_db", 1.0),
    "SNR": ("sinr_db", 1.0),
    "CQI": ("cqi", 1.0),
    "RSSI": ("cell_rssi_dbm", 1.0),
    "NRxRSRP": ("nr_rsrp_dbm", 1.0),
    "NRxRSRQ": ("nr_rsrq_db", 1.0),
    "Speed": ("speed_kmh", 1.0),
    "PINGAVG": ("rtt_ms", 1.0),
    "PINGLOSS": ("loss", 0.01),
    "DL_bitrate": ("delivered_mbps", 0.001),
    "UL_bitrate": ("ul_mbps", 0.001),
}
#: ``State``: D while the download runs, I while idle (between files of the session).
STATE_ACTIVE: dict[str, float] = {"D": 1.0, "I": 0.0}
RAT_GENERATION: dict[str, float] = {"5G": 5.0, "LTE": 4.0, "HSPA+": 3.0, "HSUPA": 3.0,
                                    "HSDPA": 3.0, "UMTS": 3.0, "EDGE": 2.0, "GPRS": 2.0}
TIME_FORMAT = "%Y.%m.%d_%H.%M.%S"


class RacaFormatError(ValueError):
    """The file is not a Raca 5G CSV (a required column is missing)."""


@dataclass
class ImportStats:
    """What an import read and what it skipped."""

    files: int = 0
    rows: int = 0
    skipped_rows: int = 0
    bad_values: dict[str, int] = field(default_factory=dict)

    def add(self, other: ImportStats) -> None:
        self.files += other.files
        self.rows += other.rows
        self.skipped_rows += other.skipped_rows
        for k, v in other.bad_values.items():
            self.bad_values[k] = self.bad_values.get(k, 0) + v


def session_id(path: Path) -> str:
    """CPE name of a session: ``<parent dir>/<file stem>`` (e.g. ``Driving/B_2019.12.14_...``)."""
    return f"{path.parent.name}/{path.stem}"


def _parse_time(text: str) -> float:
    return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC).timestamp()


def read_session(path: str | Path) -> tuple[pd.DataFrame, ImportStats]:
    """One session as a ``wat_kpi`` long table (columns time_s, cpe, wat, cell, fields...).

    Rows keep the file's order (the traces are 1 Hz with logging jitter: a repeated second is
    followed by a skipped one, so the row order, not the rounded timestamp, is the clock).
    """
    path = Path(path)
    stats = ImportStats(files=1)
    with path.open(newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise RacaFormatError(f"{path}: empty file")
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise RacaFormatError(f"{path}: not a Raca 5G CSV, missing columns {missing}")
        width = len(header)
        rows: list[list[str]] = []
        for row in reader:
            if len(row) != width:
                stats.skipped_rows += 1
                continue
            rows.append(row)
    raw = pd.DataFrame(rows, columns=header, dtype=str)
    times = np.full(len(raw), np.nan)
    for i, text in enumerate(raw["Timestamp"].tolist()):
        with contextlib.suppress(ValueError):
            times[i] = _parse_time(text)
    out = pd.DataFrame({"time_s": times})
    for col, (name, scale) in NUMERIC_COLUMNS.items():
        if col not in raw:
            out[name] = np.nan
            continue
        text = raw[col].str.strip()
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64) * scale
        unparsable = np.isnan(values) & ~text.isin(["-", ""]).to_numpy()
        bounds = FIELD_RANGES.get(name)
        if bounds is not None:
            with np.errstate(invalid="ignore"):
                unparsable |= (values < bounds[0]) | (values > bounds[1])
        if unparsable.any():
            stats.bad_values[name] = int(unparsable.sum())
            values[unparsable] = np.nan
        out[name] = values
    out["rat"] = raw["NetworkMode"].map(RAT_GENERATION).astype(np.float64).to_numpy()
    state = raw.get("State")
    out["active"] = (state.str.strip().map(STATE_ACTIVE).astype(np.float64).to_numpy()
                     if state is not None else np.nan)
    # Full-buffer download: every second is a capacity sample (unknown = saturated).
    out["saturated"] = np.nan
    out["cpe"] = session_id(path)
    out["wat"] = "nr"
    cell = raw.get("RAWCELLID", raw.get("CellID"))
    out["cell"] = cell.astype(str).to_numpy() if cell is not None else ""
    good = np.isfinite(out["time_s"].to_numpy()) & np.isfinite(out["delivered_mbps"].to_numpy())
    stats.skipped_rows += int((~good).sum())
    out = out.loc[good].reset_index(drop=True)
    stats.rows = len(out)
    return out, stats


def find_sessions(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories to the ``*.csv`` files under them (sorted); keep files as given."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(p.rglob("*.csv")))
        else:
            found.append(p)
    return found


def read_sessions(paths: Iterable[str | Path]) -> tuple[pd.DataFrame, ImportStats]:
    """Concatenate sessions (files or directories of them) into one long table."""
    frames: list[pd.DataFrame] = []
    stats = ImportStats()
    for p in find_sessions(paths):
        df, st = read_session(p)
        frames.append(df)
        stats.add(st)
    if not frames:
        return pd.DataFrame(columns=["time_s", "cpe", "wat", "cell"]), stats
    return pd.concat(frames, ignore_index=True), stats
