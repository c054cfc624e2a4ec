"""Agent telemetry as KPI rows: validated ``mcw.telemetry.v2`` documents (a CPE agent's, or a
proxy's for a CPE it serves) become one :class:`xapp.core.forecast.KpiFrame`, a row per (CPE,
WAT, direction).  Pure functions: the subscriber's batch worker calls them, and so do the
benchmarks and the fuzz tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from xapp.core.forecast import DIRECTIONS, KpiFrame
from xapp.core.kpis import AGENT_FIELDS

#: KpiFrame columns made from a telemetry message (``up`` as 1.0 / 0.0). ``saturated`` is the
#: fraction (0..1) of the interval the WAT's subflows were limited by the path (cwnd-limited,
#: tcp_info chrono times), so ``delivered_mbps`` measures capacity only when it is near 1;
#: ``delivery_rate_mbps`` is the kernel's own rate sample; ``retrans_pct`` the percentage of
#: the data segments sent in the interval that were retransmissions.  Each is NaN (unknown)
#: when the agent did not report it (first sample, old kernel, receiving end, nothing sent).
TELEMETRY_FIELDS: Final = AGENT_FIELDS
#: Fields of a WAT as a whole (the reporting end's view of its subflows); the others come
#: from the WAT's ``dl`` and ``ul`` objects.
WAT_FIELDS: Final = ("up", "subflows", "rtt_ms")
DIRECTION_FIELDS: Final = tuple(f for f in AGENT_FIELDS if f not in WAT_FIELDS)


def telemetry_frame(docs: Sequence[Mapping[str, Any]]) -> KpiFrame:
    """Rows (cpe, wat, direction) of validated telemetry documents; ``time_s`` is the newest
    ``time_ms``, ``row_time_s`` each row's document's.

    A WAT with ``dl`` / ``ul`` objects gives a row per direction: the direction's fields and
    the WAT's own (``up``, ``subflows``, ``rtt_ms``); a WAT with neither gives one row without
    a direction (both).  Fields a row did not report are NaN, as
    :class:`~xapp.core.forecast.KpiFrame` expects.
    """
    cpes: list[str] = []
    wats: list[str] = []
    dirs: list[str] = []
    times: list[int] = []
    own: list[Mapping[str, Any]] = []  # per row: the WAT's object
    part: list[Mapping[str, Any]] = []  # per row: its direction's object ({} for none)
    newest = 0
    for doc in docs:
        t = int(doc["time_ms"])
        if t > newest:
            newest = t
        cpe = doc["cpe_id"]
        for wat, stats in doc["wats"].items():
            n = len(part)
            for d in DIRECTIONS:
                sub = stats.get(d)
                # (parsed JSON makes dicts; the ABC check only for other mappings)
                if type(sub) is dict or isinstance(sub, Mapping):
                    dirs.append(d)
                    part.append(sub)
            k = len(part) - n
            if k == 0:
                dirs.append("")
                part.append(_NOTHING)
                k = 1
            times += [t] * k
            cpes += [cpe] * k
            wats += [wat] * k
            own += [stats] * k
    values = {f: _column([o.get(f) for o in own]) for f in WAT_FIELDS}
    values.update({f: _column([p.get(f) for p in part]) for f in DIRECTION_FIELDS})
    return KpiFrame(
        time_s=newest / 1000.0,
        cpe=np.asarray(cpes, dtype=np.str_),
        wat=np.asarray(wats, dtype=np.str_),
        values=values,
        direction=np.asarray(dirs, dtype="<U2"),
        row_time_s=np.asarray(times, dtype=np.float64) / 1000.0,
    )


_NOTHING: Final[Mapping[str, Any]] = {}
_PLAIN: Final = frozenset({float, int, bool, type(None)})


def _column(raw: list[object]) -> NDArray[np.float64]:
    """One field over the rows, as floats (NaN where absent or not a finite number).

    Column by column in C when every value is a plain number or absent (validated telemetry
    always is; numpy makes None NaN): 48 values a message, 10,000 messages a second. Anything
    else goes value by value through :func:`_measurement`."""
    if _PLAIN.issuperset(map(type, raw)):
        try:
            col = np.array(raw, dtype=np.float64)
        except OverflowError:  # an integer beyond float range
            pass
        else:
            bad = ~np.isfinite(col)
            if bad.any():
                col[bad] = math.nan
            return col
    return np.array([_measurement(v) for v in raw], dtype=np.float64)


def _measurement(v: object) -> float:
    """A KPI as a float; NaN (unknown) for what is not a finite number.

    The schemas bound no magnitudes and :func:`~xapp.adapters.mqtt.decoder.decode` bounds
    them (integers of 20 digits, floats below 1e100), but this is public: an integer beyond
    float range or ``inf`` from elsewhere must not raise or reach the model as a measurement.
    """
    if not isinstance(v, int | float):  # bool is an int: "up" becomes 1.0 / 0.0
        return math.nan
    try:
        f = float(v)
    except OverflowError:
        return math.nan
    return f if math.isfinite(f) else math.nan
