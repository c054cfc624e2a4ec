"""The physics check a model passes before it goes live (issue 22).

The loader checks an artifact's signature, sizes and tree structure; none of that stops a
signed model whose leaves hold 1.5e301 Mbps.  Such forecasts are finite, so nothing downstream
refuses them, and the weights they make are nearly equal whatever the capacities.  Before a
model is swapped in (at start and at every hot reload), it forecasts a reference input set and
every forecast must be finite and within its WAT's plausible range; otherwise the artifact is
refused and the model in force stays.

The reference set is what a link can show: for every WAT, a steady and a fluctuating capacity
at levels from 0 up to half the WAT's peak rate, fed for :data:`TICKS` control periods through
the same per-tick estimator the loop runs (so the history features are real ones).  A forecast
may exceed what was measured, but not the WAT's peak rate: no scheduler gets more out of a
link than its technology's peak.  Just under 0 is tolerated (:data:`NEGATIVE_SLACK_MBPS`): the
loop reads a negative forecast as "no usable forecast", not as a capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.model.errors import ArtifactError

#: Peak rates (Mbps) of each WAT's technology: the defaults of ``controls.model.plausible_mbps``.
#: 5G NR: the IMT-2020 downlink peak (20 Gbit/s); LTE: LTE-Advanced's 3 Gbit/s (category
#: 8/14); Wi-Fi: 802.11ax at 8 spatial streams and 160 MHz (9,608 Mbit/s, the ceiling of the
#: phy_rate_mbps field too); LiFi: 802.11bb's 10 Gbit/s class.
PEAK_MBPS: dict[str, float] = {"nr": 20_000.0, "lte": 3_000.0, "wifi": 9_608.0,
                               "lifi": 10_000.0}
#: Control periods of reference input fed before the forecasts are judged (every tick's
#: forecasts are judged, the first ones with almost no history included).
TICKS = 6
#: Levels per WAT, from 0 to half its peak.
LEVELS = 8
NEGATIVE_SLACK_MBPS = 1.0


def check_plausible(plausible: Mapping[str, float]) -> dict[str, float]:
    """``plausible`` over the defaults, each a positive finite number of a known WAT."""
    unknown = sorted(set(plausible) - set(PEAK_MBPS))
    if unknown:
        raise ValueError(f"plausible_mbps: unknown WATs {unknown}; known: {sorted(PEAK_MBPS)}")
    out = dict(PEAK_MBPS)
    for wat, value in plausible.items():
        v = float(value)
        if not np.isfinite(v) or v <= 0:
            raise ValueError(f"plausible_mbps.{wat} must be a positive number, got {value!r}")
        out[wat] = v
    return out


def reference_frames(plausible: Mapping[str, float], wats: tuple[str, ...] | None = None
                     ) -> list[KpiFrame]:
    """The reference input set: one frame per tick, for each WAT a steady and a fluctuating
    row at each level from 0 to half its plausible maximum."""
    names = tuple(plausible) if wats is None else wats
    wat, level, swing = [], [], []
    for w in names:
        top = plausible[w] / 2
        for lvl in np.concatenate([[0.0], np.geomspace(1.0, top, LEVELS - 1)]).tolist():
            for s in (0.0, 0.3):
                wat.append(w)
                level.append(lvl)
                swing.append(s)
    n = len(wat)
    cpe = np.array([f"physics-{i}" for i in range(n)])
    wat_col = np.array(wat)
    lvl, sw = np.array(level), np.array(swing)
    frames = []
    for t in range(TICKS):
        factor = 1.0 - sw * (t % 2)  # the fluctuating rows drop by 30 % every other tick
        values = {"delivered_mbps": lvl * factor, "saturated": np.ones(n),
                  "rtt_ms": np.full(n, 10.0), "loss": np.zeros(n)}
        frames.append(KpiFrame(time_s=1_000_000.0 + t, cpe=cpe, wat=wat_col, values=values))
    return frames


def check_forecasts(step: Callable[[KpiFrame], CapacityForecast], plausible: Mapping[str, float],
                    where: str) -> None:
    """Feed :func:`reference_frames` to ``step`` (a fresh estimator's) and raise
    :class:`ArtifactError` naming the first WAT whose forecast is not finite or is outside
    ``[-NEGATIVE_SLACK_MBPS, plausible[wat]]``."""
    limits = dict(plausible)
    for frame in reference_frames(limits):
        forecast = step(frame)
        for name, values in (("median", forecast.median_mbps), ("lower", forecast.lower_mbps)):
            arr = np.asarray(values, dtype=np.float64)
            top = np.array([limits[str(w)] for w in frame.wat.tolist()])
            bad = ~np.isfinite(arr) | (arr < -NEGATIVE_SLACK_MBPS) | (arr > top)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                wat = str(frame.wat[i])
                raise ArtifactError(
                    f"{where}: fails the physics check: {name} forecast {arr[i]:.4g} Mbps for "
                    f"{wat} measured at {frame.column('delivered_mbps')[i]:.4g} Mbps is "
                    + ("not finite" if not np.isfinite(arr[i]) else
                       f"outside [-{NEGATIVE_SLACK_MBPS:g}, {limits[wat]:g}] (the plausible "
                       f"range of {wat}, controls.model.plausible_mbps)"))
