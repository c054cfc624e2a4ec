"""Training telemetry as the xApp really sees it: KPIs of the twin's closed loop.

:func:`twin.kpis.synthesize` by default reports a full-buffer probe (every WAT saturated, with a
small random fraction censored), so a model trained on it has almost never seen a WAT whose
throughput history is censored for a long stretch.  Under WRR that is the normal case: only the
bottleneck WAT of a CPE is saturated; the others carry their weight's share for as long as the
weights stay.  This module runs the ``xapp`` policy (EWMA estimator by default) on the twin and
reports what its connection delivered and whether each subflow was cwnd-limited, period by
period, with the scenario's radio KPIs: the regime the model must forecast in.

    from twin.closed_loop_data import closed_loop_telemetry
    df = closed_loop_telemetry(["wifi-walk", "lockin"], n_cpes=8, seeds=(100, 101))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from twin.fluid import deliver
from twin.policies import TwinOptions, run_policy
from twin.scenarios import build


def closed_loop_telemetry(scenarios: Sequence[str], n_cpes: int = 8,
                          seeds: Sequence[int] = (100,), periods_s: Sequence[float] = (1.0,),
                          estimator: str = "ewma", directions: Sequence[str] = ("dl",)
                          ) -> pd.DataFrame:
    """A ``wat_kpi`` long table (see :func:`twin.kpis.synthesize`) of closed-loop runs.

    One run per (scenario, seed, period), which steers both directions; ``directions`` are
    those reported (default the downlink, the paper's, as the shipped model was trained on).
    CPE names say which (``cl-<scenario>-<seed>-<period>-<i>``, with ``ul-`` before ``<i>`` for
    the uplink, a history of its own) and each scenario gets its own time offset, so keys never
    collide.  ``saturated`` is the fraction-of-period rule of :func:`twin.kpis.synthesize` (1
    only if cwnd-limited for the whole period); ``capacity_mbps`` is the truth, for labels.
    """
    from twin.kpis import synthesize

    frames = []
    for i, name in enumerate(scenarios):
        for seed in seeds:
            scn = build(name, n_cpes=n_cpes, seed=seed)
            for period in periods_s:
                run = run_policy(scn, "xapp", TwinOptions(period_s=period, estimator=estimator))
                both = run.extra["directions"]
                assert isinstance(both, dict)
                for d in directions:
                    res, view = both[d], scn.toward(d)
                    if res.weights is None or res.delivered_mbps is None:
                        raise ValueError("run too large to keep traces; use fewer CPEs")
                    _, _, sat = deliver(view.capacity_mbps, res.weights.astype(np.int64))
                    tag = "" if d == "dl" else f"{d}-"
                    frames.append(synthesize(
                        view, period_s=period, delivered=res.delivered_mbps.astype(np.float64),
                        saturated=sat.astype(np.float64), seed=seed,
                        cpe_prefix=f"cl-{name}-{seed}-{period:g}-{tag}",
                        start_time_s=1e6 * (i + 1)))
    return pd.concat(frames, ignore_index=True)
