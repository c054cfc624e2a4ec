"""The e2e picture and where a run writes, without running one (``make e2e`` is minutes)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
from matplotlib.transforms import Bbox

from tests.e2e.observer import Applied
from tests.e2e.picture import figure, plot
from tests.e2e.report import FaultResult
from tests.e2e.run import write_outputs
from tests.e2e.system import Run
from tests.integration.stack import REPO

#: Readiness as Prometheus saw it: ready, a dip at 20-23 s, ready again.
READY = [(float(t), 0.0 if 20 <= t < 23 else 1.0) for t in range(40)]


def _fake_run() -> Run:
    """What :func:`figure` reads of a run: two agents' records, a feed, Prometheus series and
    the real MPTCP connection."""
    records = [Applied(t=float(t), cpe=c, online=True, version=t + 1,
                       weights={"nr": 1 + t % 5, "wifi": 6 - t % 5, "lifi": 1},
                       event="applied", caps={"nr": 8.0})
               for t in range(40) for c in ("cpe-0000", "cpe-0001")]
    feeder = SimpleNamespace(wats=["nr", "wifi", "lifi"], capacity=np.ones((100, 3)) * 50.0,
                             dt_s=1.0, offsets=[0, 3])
    link = SimpleNamespace(cpe_id="cpe-real", sum_mbit=24.0,
                           topo=SimpleNamespace(paths=[SimpleNamespace(wat="nr"),
                                                       SimpleNamespace(wat="wifi")]),
                           delivered=lambda d: [(float(t), 20.0) for t in range(40)])
    observer = SimpleNamespace(snapshot=lambda: records,
                               proxy_snapshot=lambda: [Applied(t=1.0, cpe="cpe-real",
                                                               online=True, version=1,
                                                               weights={"nr": 1, "wifi": 1},
                                                               event="applied")])
    prom = SimpleNamespace(query_range=lambda expr, t0, t1: [(t0 + t, v) for t, v in READY])
    return cast(Run, SimpleNamespace(cpes=["cpe-0000", "cpe-0001"], observer=observer,
                                     feeder=feeder, prom=prom, link=link, now=lambda: 40.0))


def test_no_legend_covers_a_plot() -> None:
    """Issue 33: the Prometheus panel's legend sat over its lower right, where the readiness
    dips are; every legend now stands beside its axes."""
    faults = [FaultResult("mcw run killed", injected_s=20.0, restored_s=22.0)]
    fig = figure(_fake_run(), faults)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        legends = 0
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            legends += 1
            box, area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert not Bbox.intersection(box, area), (ax.get_ylabel(), box, area)
            # ... and inside the figure, not cut off.
            assert fig.bbox.containsx(box.x1) and fig.bbox.containsy(box.y0)
        assert legends == 5
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_plot_writes_the_png(tmp_path: Path) -> None:
    path = plot(_fake_run(), [], tmp_path / "e2e.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_writes_its_figures_under_out_only(tmp_path: Path) -> None:
    doc: dict[str, Any] = {"ok": True}
    written = write_outputs(tmp_path, doc, "report", {"agents": 3})
    assert sorted(p.name for p in written) == ["figures.json", "report.json", "report.txt"]
    assert all(p.parent == tmp_path for p in written)
    assert json.loads((tmp_path / "figures.json").read_text()) == {"agents": 3}


def test_make_e2e_leaves_tracked_files_alone() -> None:
    """Issue 33: ``make e2e`` ran with ``--bench``, which rewrote the tracked bench/e2e.json,
    so a clean checkout was dirty after it."""
    makefile = (REPO / "Makefile").read_text()
    rule = re.search(r"^e2e:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert rule is not None
    (command,) = [line for line in rule.group(1).splitlines() if "-m tests.e2e" in line]
    assert "--bench" not in command
    out = re.search(r"--out (\S+)", command)
    assert out is not None and out.group(1).startswith("out/")
    assert "/out/" in (REPO / ".gitignore").read_text().splitlines()
