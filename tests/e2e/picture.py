"""The PNG of an e2e run: what the agents applied, the fleet and the xApp's health, faults
marked."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tests.e2e.observer import Applied
from tests.e2e.report import FaultResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from tests.e2e.system import Run

COLOURS = {"nr": "tab:blue", "wifi": "tab:orange", "lifi": "tab:green"}


def _legend(ax: Axes) -> None:
    """The legend beside the plot, never over it: inside, it hid the readiness dips the
    picture is there to show."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0, fontsize=8)


def _real_link(run: Run, records: list[Applied], ax_rate: Axes, ax_w: Axes) -> None:
    """The real MPTCP connection: delivered per direction against the sum of the path
    rates, and the weights its CPE agent applied (uplink; the proxy applies the same message's
    downlink)."""
    assert run.link is not None
    wall0 = time.time() - run.now()
    for d, style in (("ul", "-"), ("dl", "--")):
        pts = run.link.delivered(d)
        ax_rate.plot([t - 0.5 - wall0 for t, _ in pts], [m for _, m in pts], style,
                     label=f"delivered {d}")
    ax_rate.axhline(run.link.sum_mbit, color="black", lw=0.8, label="sum of path rates")
    ax_rate.set_ylabel(f"real MPTCP\n{run.link.cpe_id}, Mbit/s")
    # The weights each agent applied per WAT: the CPE's uplink (solid), the proxy's downlink
    # for this CPE (dashed); above, the rate caps mptcp-shares set from them (dotted: uplink,
    # dash-dot: downlink; a gap is a WAT left uncapped, its own link the limit).
    ul = [r for r in records if r.cpe == run.link.cpe_id and r.online]
    dl = [r for r in run.observer.proxy_snapshot() if r.cpe == run.link.cpe_id and r.online]
    for recs, style, d in ((ul, ":", "ul"), (dl, "-.", "dl")):
        for wat in (p.wat for p in run.link.topo.paths):
            if any(wat in r.caps for r in recs):
                ax_rate.step([r.t for r in recs], [r.caps.get(wat, float("nan")) for r in recs],
                             style, where="post", color=COLOURS[wat], label=f"{wat} cap {d}")
    _legend(ax_rate)
    for recs, style, d in ((ul, "-", "ul"), (dl, "--", "dl")):
        for wat in (p.wat for p in run.link.topo.paths):
            ax_w.step([r.t for r in recs], [r.weights.get(wat, 0) for r in recs], style,
                      where="post", color=COLOURS[wat], label=f"{wat} {d}")
    ax_w.set_ylabel(f"real {run.link.cpe_id}\napplied weights")
    _legend(ax_w)


def plot(run: Run, faults: list[FaultResult], path: Path) -> Path:
    fig = figure(run, faults)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def figure(run: Run, faults: list[FaultResult]) -> Figure:
    """The picture of ``run`` with ``faults`` shaded (the caller closes it)."""
    records = run.observer.snapshot()
    cpe = run.cpes[min(1, len(run.cpes) - 1)]  # cpes[0] is the one restarted
    fig, axes = plt.subplots(6, 1, figsize=(14, 16), sharex=True)
    mine = [r for r in records if r.cpe == cpe and r.online and r.version > 0]
    ax = axes[0]
    for wat, colour in COLOURS.items():
        ax.step([r.t for r in mine], [r.weights.get(wat, 0) for r in mine], where="post",
                color=colour, label=wat)
    ax.set_ylabel(f"{cpe}\napplied ul weight")
    _legend(ax)
    ax = axes[1]
    feeder = run.feeder
    times = [r.t for r in mine]
    i = run.cpes.index(cpe)
    for k, wat in enumerate(feeder.wats):
        cap = feeder.capacity[:, k]
        steps = [int(t / feeder.dt_s) + feeder.offsets[i] for t in times]
        ax.plot(times, [cap[s % len(cap)] for s in steps], color=COLOURS.get(wat, "grey"),
                label=f"{wat} KPI delivered_mbps")
    ax.set_ylabel(f"{cpe}\nKPI feed, Mbps")
    _legend(ax)
    ax = axes[2]
    bins: dict[int, int] = {}
    for r in records:
        if r.online and r.version > 0:
            bins[int(r.t)] = bins.get(int(r.t), 0) + 1
    xs = sorted(bins)
    ax.bar(xs, [bins[x] for x in xs], width=1.0, color="tab:purple")
    ax.set_ylabel("state messages / s\n(all agents)")
    ax = axes[3]
    assert run.prom is not None
    wall0 = time.time() - run.now()
    for expr, label in (("mcw_ready", "xApp ready"),
                        ('sum(up{job="mcw-agent"}) / count(up{job="mcw-agent"})',
                         "agents scraped (fraction)"),
                        ('up{job="mcw-xapp"}', "xApp scraped")):
        series = run.prom.query_range(expr, wall0, time.time())
        ax.step([t - wall0 for t, _ in series], [v for _, v in series], where="post",
                label=label)
    ax.set_ylabel("Prometheus")
    ax.set_ylim(-0.05, 1.1)
    _legend(ax)
    if run.link is not None:
        _real_link(run, records, axes[4], axes[5])
    ax = axes[-1]
    ax.set_xlabel("time since start, s")
    for f in faults:
        for a in axes:
            a.axvspan(f.injected_s, max(f.restored_s, f.injected_s + 0.5), color="red",
                      alpha=0.12)
        axes[0].annotate(f.name, (f.injected_s, 1.0), xycoords=("data", "axes fraction"),
                         rotation=30, fontsize=7, va="bottom")
    fig.suptitle(f"make e2e: {len(run.cpes)} agents, faults shaded", y=0.995)
    fig.tight_layout()
    return fig
