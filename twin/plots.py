"""PNG figures of a twin run (matplotlib, Agg backend, imported only when plotting)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from twin.fluid import SimResult

COLOURS = {"nr": "#1f77b4", "lte": "#9467bd", "wifi": "#ff7f0e", "lifi": "#2ca02c"}
LABELS = {"nr": "5G NR", "lte": "LTE", "wifi": "Wi-Fi", "lifi": "LiFi"}


def _seconds(x: np.ndarray, per: int) -> np.ndarray:
    """Means over consecutive blocks of ``per`` steps along axis 0 (1 s at 100 ms steps)."""
    n = (len(x) // per) * per
    return np.asarray(x[:n].reshape(n // per, per, *x.shape[1:]).mean(axis=1))


def plot_run(res: SimResult, capacity: np.ndarray, path: Path, cpe: int = 0,
             title: str | None = None) -> Path:
    """Stacked per-WAT throughput with the oracle line, weights, and true capacities.

    ``capacity`` is the scenario's (steps, n_cpes, k) array.  Needs the run's traces
    (``res.delivered_mbps`` and ``res.weights``), kept for runs up to a few million rows.
    """
    if res.delivered_mbps is None or res.weights is None:
        raise ValueError("this run kept no traces (too many CPEs x steps); plot a smaller run")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = max(1, round(1.0 / res.dt_s))
    delivered = _seconds(res.delivered_mbps[:, cpe, :].astype(np.float64), per)
    t = np.arange(len(delivered)) * per * res.dt_s
    fig, axes = plt.subplots(3, 1, figsize=(10, 8.5), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1.6, 1.6]})
    ax = axes[0]
    ax.stackplot(t, delivered.T, labels=[LABELS.get(w, w) for w in res.wats],
                 colors=[COLOURS.get(w, "grey") for w in res.wats], alpha=0.85, step="post")
    if res.oracle_mbps is not None:
        ax.plot(t, _seconds(res.oracle_mbps[:, cpe], per), color="black", lw=1.3,
                label="oracle (best weights, true capacity)", drawstyle="steps-post")
    ax.plot(t, _seconds(capacity[:, cpe, :].sum(axis=-1), per), color="grey", lw=0.8, ls=":",
            label="sum of capacities", drawstyle="steps-post")
    ax.set_ylabel("throughput (Mbps)")
    ax.legend(loc="upper right", fontsize=8, ncol=2)
    ax.set_title(title or f"{res.scenario} ({res.direction}): policy {res.policy}")
    ax.grid(alpha=0.3)

    ax = axes[1]
    tw = np.arange(res.weights.shape[0]) * res.dt_s
    for j, w in enumerate(res.wats):
        ax.plot(tw, res.weights[:, cpe, j], color=COLOURS.get(w, "grey"),
                label=LABELS.get(w, w), drawstyle="steps-post", lw=1.2)
    ax.set_ylabel("WRR weight")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.legend(loc="upper right", fontsize=8, ncol=3)
    ax.grid(alpha=0.3)

    ax = axes[2]
    cap = _seconds(capacity[:, cpe, :], per)
    for j, w in enumerate(res.wats):
        ax.plot(t, cap[:, j], color=COLOURS.get(w, "grey"), label=LABELS.get(w, w), lw=1.0,
                drawstyle="steps-post")
    ax.set_ylabel("true capacity (Mbps)")
    ax.set_yscale("symlog", linthresh=10.0)
    ax.set_xlabel("time (s)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
