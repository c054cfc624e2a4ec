"""The ``wat_kpi`` line-protocol schema: measurements, tags, fields and their physical ranges.

The spec for humans is ``schemas/wat_kpi.md``; this module is the same contract for code.  Every
reader and writer (the InfluxDB store, the Raca 5G importer, the synthetic telemetry, the model's
input cleaning) takes field names and ranges from here, so a value that is physically impossible
is rejected the same way everywhere.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

#: Per-(cpe, wat, direction) radio and transport KPIs, one point per CPE, WAT, direction (none:
#: both, as radio KPIs) and report period.
MEASUREMENT_KPI = "wat_kpi"
#: What the xApp forecasts for each (cpe, wat, direction): median and lower quantile, with the
#: model version.
MEASUREMENT_PREDICTION = "wat_prediction"
#: The weights the xApp publishes, per (cpe, wat, direction), with the published version.
MEASUREMENT_WEIGHT = "wat_weight"

#: Tags of ``wat_kpi`` (and of the write-back measurements, minus ``cell``).
TAGS: tuple[str, ...] = ("cpe", "wat", "cell")

#: WAT tag values and the technology family each belongs to (the model is trained per family).
WAT_FAMILY: dict[str, str] = {"nr": "cellular", "lte": "cellular", "wifi": "wifi", "lifi": "lifi"}
FAMILIES: tuple[str, ...] = ("cellular", "wifi", "lifi")

#: Aliases accepted on input (CSV files, other tools) and normalised to the tag values above.
WAT_ALIASES: dict[str, str] = {
    "5g": "nr", "nr": "nr", "lte": "lte", "4g": "lte", "wifi": "wifi", "wi-fi": "wifi",
    "wlan": "wifi", "lifi": "lifi", "li-fi": "lifi", "vlc": "lifi",
}

CELLULAR_FIELDS: tuple[str, ...] = ("rsrp_dbm", "rsrq_db", "sinr_db", "cqi", "mcs", "prb_util",
                                    "bler")
WIFI_FIELDS: tuple[str, ...] = ("rssi_dbm", "snr_db", "mcs", "nss", "channel_busy", "retries",
                                "phy_rate_mbps", "stations")
LIFI_FIELDS: tuple[str, ...] = ("snr_db", "rx_optical_dbm")
#: Reported for every WAT.  ``delivered_mbps`` is what the subflow carried (a censored
#: measurement of capacity under WRR); ``saturated`` says whether the subflow had data waiting
#: for the whole period (send queue non-empty / cwnd-limited), i.e. whether delivered_mbps
#: measured capacity.  NaN when the reporter does not know.
#: A period counts as a capacity measurement when its subflow was path-limited (``saturated``)
#: for at least this fraction of it; below, ``delivered_mbps`` is censored by the WRR weights.
#: The agent reads about 0.93-1.0 for a bulk subflow and 0.2-0.4 for a weight-starved one.
SATURATED_MIN = 0.5

#: ``retrans_pct`` is the agents' loss figure: the percentage of the data segments the sending
#: end's subflows sent in the period that were retransmissions (what steering thresholds act
#: on).  ``loss`` (a fraction) is another one, the model's input, which traces and the twin
#: carry; the agents do not report it.
COMMON_FIELDS: tuple[str, ...] = ("delivered_mbps", "rtt_ms", "loss", "saturated",
                                  "retrans_pct")

#: What a CPE agent reports per WAT in its MQTT telemetry (``schemas/mqtt-telemetry.schema.json``).
AGENT_FIELDS: tuple[str, ...] = ("delivered_mbps", "rtt_ms", "cwnd", "bytes_acked", "subflows",
                                 "up", "saturated", "delivery_rate_mbps", "retrans_pct")

FIELDS_BY_FAMILY: dict[str, tuple[str, ...]] = {
    "cellular": CELLULAR_FIELDS + COMMON_FIELDS,
    "wifi": WIFI_FIELDS + COMMON_FIELDS,
    "lifi": LIFI_FIELDS + COMMON_FIELDS,
}

#: Every numeric field of ``wat_kpi``, in a stable order.
KPI_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(
    CELLULAR_FIELDS + WIFI_FIELDS + LIFI_FIELDS + COMMON_FIELDS))

#: Physical (inclusive) ranges; a value outside is a broken reporter, never a real measurement.
#: Sources: 3GPP TS 38.133 (RSRP -156..-31 dBm, RSRQ -43..20 dB, SINR -23..40 dB), TS 38.214
#: (CQI 0..15, MCS 0..31), 802.11ax (MCS 0..11, 1..8 spatial streams, 160 MHz 2x2 peak
#: 2402 Mbps; 8x8 caps the field at 9608 Mbps).
FIELD_RANGES: dict[str, tuple[float, float]] = {
    "rsrp_dbm": (-156.0, -31.0),
    "rsrq_db": (-43.0, 20.0),
    "sinr_db": (-23.0, 40.0),
    "cqi": (0.0, 15.0),
    "mcs": (0.0, 31.0),
    "prb_util": (0.0, 1.0),
    "bler": (0.0, 1.0),
    "rssi_dbm": (-120.0, 0.0),
    "snr_db": (-20.0, 80.0),
    "nss": (1.0, 8.0),
    "channel_busy": (0.0, 1.0),
    "retries": (0.0, 1.0),
    "phy_rate_mbps": (0.0, 9608.0),
    "stations": (0.0, 2048.0),
    "rx_optical_dbm": (-60.0, 20.0),
    "delivered_mbps": (0.0, 100_000.0),
    "rtt_ms": (0.0, 60_000.0),
    "loss": (0.0, 1.0),
    "saturated": (0.0, 1.0),
    "retrans_pct": (0.0, 100.0),
}

#: Fields of the write-back measurements.
PREDICTION_FIELDS: tuple[str, ...] = ("median_mbps", "lower_mbps", "model_version")
WEIGHT_FIELDS: tuple[str, ...] = ("weight", "share", "version")


def normalise_wat(name: str) -> str | None:
    """The canonical WAT tag for ``name`` (case-insensitive alias), or None if unknown."""
    return WAT_ALIASES.get(name.strip().lower())


def family_of(wat: str) -> str | None:
    """Technology family of a canonical WAT tag, or None."""
    return WAT_FAMILY.get(wat)


@dataclass
class CleanCounts:
    """How many values a cleaning pass replaced by NaN, and why (per field)."""

    non_finite: dict[str, int] = field(default_factory=dict)
    out_of_range: dict[str, int] = field(default_factory=dict)

    def add(self, other: CleanCounts) -> None:
        for mine, theirs in ((self.non_finite, other.non_finite),
                             (self.out_of_range, other.out_of_range)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v

    @property
    def total(self) -> int:
        return sum(self.non_finite.values()) + sum(self.out_of_range.values())


def clean_columns(values: Mapping[str, NDArray[np.float64]]
                  ) -> tuple[dict[str, NDArray[np.float64]], CleanCounts]:
    """Replace infinite and out-of-range values by NaN; NaN itself means "not reported".

    Returns new arrays (the input is not modified) and the counts of what was replaced.
    """
    counts = CleanCounts()
    out: dict[str, NDArray[np.float64]] = {}
    for name, col in values.items():
        arr = np.array(col, dtype=np.float64, copy=True)
        inf = np.isinf(arr)
        if inf.any():
            counts.non_finite[name] = int(inf.sum())
            arr[inf] = np.nan
        bounds = FIELD_RANGES.get(name)
        if bounds is not None:
            with np.errstate(invalid="ignore"):
                bad = (arr < bounds[0]) | (arr > bounds[1])
            if bad.any():
                counts.out_of_range[name] = int(bad.sum())
                arr[bad] = np.nan
        out[name] = arr
    return out, counts


def cell_code(cell: str | None) -> float:
    """A numeric identity of a cell tag (CRC-32), NaN when unknown; the model sees its changes."""
    if cell is None or cell == "" or cell == "-":
        return math.nan
    return float(zlib.crc32(cell.encode()))
