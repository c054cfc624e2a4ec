"""InfluxDB line protocol for tables of points, made column by column (the loop writes 30,000
points a tick): pure, so the store's flusher formats what the tick handed over.

Tag values are written so that InfluxDB reads back exactly what was written (see
:func:`escape_tag`); values line protocol cannot carry are refused and counted
(:attr:`Lines.refused`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray


def escape_tag(value: str) -> str | None:
    """The line-protocol text of a tag value (or tag or field key) that InfluxDB reads back as
    exactly ``value``; ``""`` for an empty value (no tag); None when there is no such text.

    InfluxDB 1.8 unescapes ``\\,``, ``\\=`` and ``\\ `` in tags and keeps every other
    backslash as written (``a\\b`` reads back as ``a\\b``), so backslashes are written as
    they are: doubling them is what made them come back doubled.  A separator with a backslash
    before it counts as escaped, so a value that *ends* in a backslash can never end, and a
    newline ends the line whatever precedes it: such values are refused (None), and the caller
    drops the point and counts it rather than store a different identity.  Tags cannot be empty
    in InfluxDB: an empty value is written as an absent tag, which reads back as empty.
    Everything else (quotes, commas, equals signs, spaces, tabs, carriage returns, any unicode)
    round-trips; ``tests/xapp/adapters/influx/test_line_protocol.py`` proves it against a real
    influxd.
    """
    if not value:
        return ""
    if value[-1] == "\\" or "\n" in value:
        return None
    # Exactly the three characters InfluxDB unescapes (str.replace: 3x faster than translate).
    return value.replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


def escape_str(value: str) -> str:
    """A string field value, quotes excluded: every string round-trips (newlines included)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _key(name: str) -> str:
    """A tag or field key, escaped; our keys are constants, so an impossible one is a bug."""
    escaped = escape_tag(name)
    if not escaped:
        raise ValueError(f"{name!r} cannot be a line-protocol key")
    return escaped


@dataclass
class Lines:
    """Line protocol for a table: ``lines`` to send, and ``refused`` points that were not
    formatted because a tag value line protocol cannot carry (:func:`escape_tag`)."""

    lines: list[str]
    refused: int = 0


def column_lines(measurement: str, tags: Mapping[str, Sequence[str]],
                 fields: Mapping[str, NDArray[Any]], time_ns: int | NDArray[np.int64],
                 text: Mapping[str, str] | None = None, decimals: int | None = None,
                 required: Collection[str] = ()) -> Lines:
    """Line protocol for a table of points, column by column (the loop writes 30,000 points
    a tick, so rows are never made into dicts).

    ``fields`` are float columns (NaN and infinite values are omitted) or integer columns
    (written with the ``i`` suffix); ``text`` adds string fields with one value for every
    point; empty tag values are left out (InfluxDB has no empty tags).  A point with no field
    left is not written; a point with a tag value line protocol cannot carry
    (:func:`escape_tag`), or an empty value of a ``required`` tag, is not written either, and
    is counted in :attr:`Lines.refused`.
    Floats are written exactly, or with ``decimals`` digits after the point (half the
    formatting time).  Rows with every tag and field present, the usual case, go through one
    format string.
    """
    keys = sorted(tags)
    n = len(tags[keys[0]]) if keys else len(next(iter(fields.values())))
    tag_cols: list[list[str]] = []
    full = np.ones(n, dtype=bool)
    refused: NDArray[np.bool_] | None = None
    for key in keys:
        # Escaped once per distinct value: a column holds few (WATs) or each once (CPEs).
        escaped = {v: escape_tag(v) for v in set(tags[key])}
        if None in escaped.values() or (key in required and "" in escaped):
            # rare: those rows are skipped, whatever their text
            bad = np.array([escaped[v] is None or (key in required and v == "")
                            for v in tags[key]], dtype=bool)
            refused = bad if refused is None else refused | bad
        text_of: Mapping[str, str] = cast(Mapping[str, str], escaped)  # None: never formatted
        tag_cols.append(list(map(text_of.__getitem__, tags[key])))
        if "" in escaped:
            full &= np.array([v != "" for v in tags[key]], dtype=bool)
    keep = np.ones(n, dtype=bool) if refused is None else ~refused
    names = list(fields)
    arrays = [np.asarray(fields[k]) for k in names]
    is_int = [a.dtype.kind in "iu" for a in arrays]
    for a, integer in zip(arrays, is_int, strict=True):
        if not integer:
            full &= np.isfinite(a.astype(np.float64))
    consts = "".join(f',{_key(k)}="{escape_str(v)}"' for k, v in (text or {}).items())
    times = (None if isinstance(time_ns, int | np.integer)
             else np.asarray(time_ns, dtype=np.int64))

    def percent(t: str) -> str:
        return t.replace("%", "%%")

    meas = _measurement(measurement)
    tag_keys = [_key(k) for k in keys]
    field_keys = [_key(k) for k in names]
    spec = "%r" if decimals is None else f"%.{decimals}f"  # what {!r} and {:.Nf} write
    field_fmt = ",".join(f"{percent(k)}=%di" if integer else f"{percent(k)}={spec}"
                         for k, integer in zip(field_keys, is_int, strict=True))
    # %-formatting applied by map: no Python statement per point (a third of the time of a
    # loop of str.format calls at 60,000 points a tick).
    fmt = (percent(meas) + "".join(f",{percent(k)}=%s" for k in tag_keys) + " " + field_fmt
           + percent(consts) + (" %d" if times is not None else f" {int(time_ns)}"))
    out: list[str | None]
    fast = np.flatnonzero(full if refused is None else full & keep)
    cols: list[list[Any]] = [[c[i] for i in fast.tolist()] if len(fast) < n else c
                             for c in tag_cols] if len(fast) else []
    if len(fast):
        cols += [(a[fast] if len(fast) < n else a).astype(np.int64 if integer else np.float64)
                 .tolist() for a, integer in zip(arrays, is_int, strict=True)]
        if times is not None:
            cols.append(times[fast].tolist())
    if len(fast) == n:
        out = list(map(fmt.__mod__, zip(*cols, strict=True)))
    else:
        out = [None] * n
        if len(fast):
            for i, line in zip(fast.tolist(), map(fmt.__mod__, zip(*cols, strict=True)),
                               strict=True):
                out[i] = line
    for i in np.flatnonzero(~full & keep).tolist():  # an empty tag or a missing value
        tag_text = "".join(f",{k}={c[i]}" for k, c in zip(tag_keys, tag_cols, strict=True)
                           if c[i])
        parts = [f"{k}={int(a[i])}i" if integer else f"{k}={spec % float(a[i])}"
                 for k, a, integer in zip(field_keys, arrays, is_int, strict=True)
                 if integer or np.isfinite(a[i])]
        if parts:
            t = int(time_ns) if times is None else int(times[i])
            out[i] = f"{meas}{tag_text} {','.join(parts)}{consts} {t}"
        elif consts:
            t = int(time_ns) if times is None else int(times[i])
            out[i] = f"{meas}{tag_text} {consts[1:]} {t}"
    return Lines([line for line in out if line is not None],
                 0 if refused is None else int(refused.sum()))


def _measurement(name: str) -> str:
    """A measurement name, escaped (commas and spaces); like keys, a constant of ours."""
    if not name or name[-1] == "\\" or "\n" in name or name.startswith("#"):
        raise ValueError(f"{name!r} cannot be a line-protocol measurement")
    return name.replace(",", "\\,").replace(" ", "\\ ")
