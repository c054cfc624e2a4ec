"""Where one control tick's CPU time goes: thread CPU time per phase of the shipped loop.

Runs ``bench_tick``'s memory path (the same fleet, intake, publisher and loop) and times the
loop's phases with ``time.thread_time`` (wrappers around the named functions, no profiler, so
the other processes of a loaded machine do not count and no per-call overhead inflates the
phases of many calls).  Nested phases are indented and included in the phase above them.

``--commit`` runs the same measurement on the code of another commit of this repository
(``git archive`` into a temporary directory): the "before" of a change, back to back with the
"after" on the same machine.  A phase whose function does not exist at that commit is left
out.

    python bench/tick_phases.py [--cpes 10000] [--ticks 10] [--warm 3] [--commit SHA]
                                [--influx-sink] [--json]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: (module, attribute path, label); an indented label is part of the phase above it.
PHASES = (
    ("xapp.core.loop", "ControlLoop.tick", "tick"),
    ("xapp.core.intake", "LatestKpis.latest", "  intake: latest rows"),
    ("xapp.core.ewma", "EwmaEstimator.step", "  forecasts: EWMA step"),
    # The name the loop calls (xapp.core.rowmap.inputs is bound there at import).
    ("xapp.core.loop", "inputs", "  decision inputs"),
    ("xapp.core.loop", "ControlLoop._decide_group", "  decisions"),
    ("xapp.core.decisions", "optimal_weights_batch", "    exact weights search"),
    ("xapp.core.decisions", "_Previous.held", "    hysteresis: weights in force"),
    ("xapp.core.loop", "ControlLoop._publish", "  publish"),
    # The name the loop calls (xapp.core.outgoing.message_sets is bound there at import).
    ("xapp.core.loop", "message_sets", "    message sets"),
    ("xapp.adapters.lab", "MemoryPublisher.publish_many", "    encode and version"),
    ("xapp.core.fleet", "FleetTable.store", "    fleet tables"),
    ("xapp.adapters.sdl", "SdlStateStore.put_published", "    state store"),
    # With --influx-sink only: the lines of the write-backs (made on the tick's thread).
    ("xapp.adapters.influx.store", "InfluxStore.write_forecasts", "  write-back: forecasts"),
    ("xapp.adapters.influx.store", "InfluxStore.write_weights", "    write-back: weights"),
    # The same, at commits from before the store left xapp/adapters/influx.py (issue 34).
    ("xapp.adapters.influx", "InfluxStore.write_forecasts", "  write-back: forecasts"),
    ("xapp.adapters.influx", "InfluxStore.write_weights", "    write-back: weights"),
    # At commits from before the inputs left the loop (issue 35).
    ("xapp.core.loop", "ControlLoop._inputs", "  decision inputs"),
)


def measure(root: Path, cpes: int, ticks: int, warm: int, influx_sink: bool = False
            ) -> dict[str, float]:
    """CPU ms per tick of each phase, for the code under ``root``; with ``influx_sink`` the
    loop writes forecasts and weights to an :class:`~xapp.adapters.influx.store.InfluxStore`
    whose flusher never runs (no server: what is timed is making the lines, as on the real
    path)."""
    sys.path[:0] = [str(root), str(root / "bench")]
    spent: dict[str, float] = {}

    def timed(label: str, f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - started
        return wrapper

    for module, path, label in PHASES:
        *parents, name = path.split(".")
        try:
            owner: Any = importlib.import_module(module)
            for p in parents:
                owner = getattr(owner, p)
            setattr(owner, name, timed(label, getattr(owner, name)))
        except (ModuleNotFoundError, AttributeError):  # (a commit without it: left out)
            continue
    bench = importlib.import_module("bench_tick")
    bench.tune_gc()
    fleet = bench.Fleet(cpes)
    intake = bench.LatestKpis()
    publisher = bench.MemoryPublisher()
    sink = None
    if influx_sink:
        try:
            influx = importlib.import_module("xapp.adapters.influx.store")
        except ModuleNotFoundError:  # a commit from before issue 34 (see PHASES)
            influx = importlib.import_module("xapp.adapters.influx")
        sink = influx.InfluxStore(influx.InfluxConfig(
            url="http://127.0.0.1:9", bucket="bench", batch_size=10**7,
            max_buffer_points=10**7))
    loop = bench._loop(intake, publisher, 1.0, sink=sink)
    t0 = 1_800_000_000.0
    for k in range(warm + ticks):
        if k == warm:
            spent.clear()
        intake.update(fleet.step(t0 + k))
        loop.tick(t0 + k)
        fleet.apply(publisher.take())
        if sink is not None:
            sink._buffer.clear()  # nothing is sent: keep the buffer from growing
    order = [label for _, _, label in PHASES if label in spent]
    return {label: round(spent[label] / ticks * 1e3, 2) for label in order}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpes", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=10, help="timed ticks")
    parser.add_argument("--warm", type=int, default=3, help="untimed ticks first")
    parser.add_argument("--commit", help="measure this commit's code instead (git archive)")
    parser.add_argument("--influx-sink", action="store_true",
                        help="write forecasts and weights back to InfluxDB's line protocol "
                             "(lines made, nothing sent), as the real path does")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mcw-tick-phases-") as tmp:
        root = REPO
        if args.commit:
            root = Path(tmp)
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.commit],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        phases = measure(root, args.cpes, args.ticks, args.warm, args.influx_sink)
    if args.json:
        print(json.dumps({"cpes": args.cpes, "commit": args.commit or "HEAD",
                          "cpu_ms_per_tick": phases}, indent=2))
        return 0
    print(f"CPU ms per tick at {args.cpes} CPEs x 2 directions ({args.commit or 'this tree'}):")
    for label, ms in phases.items():
        print(f"{label:36s} {ms:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
