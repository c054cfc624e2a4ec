"""How many points a second InfluxDB 1.8 on this machine takes from the xApp's writer.

A fresh ``influxd`` (the one ``make deps-tools`` builds), fed a 10,000-CPE fleet's telemetry
periods (``wat_kpi``, 60,000 points each, as the subscriber writes them) through the shipped
:class:`~xapp.adapters.influx.store.InfluxStore`, once per batch size.  The flush is timed as
the writer's thread runs it (line protocol made, then sent batch by batch, each write waiting
for InfluxDB's answer): the ceiling of the history one replica can keep, with the machine to
itself.

    .venv/bin/python bench/bench_influx.py [--cpes 10000] [--periods 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tick import Fleet, telemetry_messages

from tests.support.influxd import start_influxd
from xapp.adapters.influx.store import InfluxConfig, InfluxStore
from xapp.adapters.mqtt.telemetry import telemetry_frame
from xapp.bounded_json import loads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpes", type=int, default=10_000)
    parser.add_argument("--periods", type=int, default=5, help="telemetry periods per batch size")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[5000, 20000, 50000])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    fleet = Fleet(args.cpes)
    t0 = time.time() - 3600
    frames = [telemetry_frame([loads(p) for _, p in telemetry_messages(fleet.step(t0 + k))])
              for k in range(args.periods)]
    runs = []
    with tempfile.TemporaryDirectory() as work:
        influx = start_influxd(Path(work))
        try:
            for i, size in enumerate(args.batch_sizes):
                store = InfluxStore(InfluxConfig(url=influx.url, bucket=influx.bucket,
                                                 writer=f"bench-{i}", batch_size=size,
                                                 max_buffer_points=10 ** 7))
                points, flushing = 0, 0.0
                for frame in frames:
                    store.write_kpis(frame)
                    start = time.perf_counter()
                    assert store.flush(), "InfluxDB refused a write"
                    flushing += time.perf_counter() - start
                    points += len(frame)
                assert store.counters.written_points == points, store.counters
                store.close()
                runs.append({"batch_size": size, "points": points,
                             "points_per_s": round(points / flushing)})
        finally:
            influx.stop()
    result = {"cpes": args.cpes, "runs": runs}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for r in runs:
            print(f"batch {r['batch_size']:>6}: {r['points']} points, "
                  f"{r['points_per_s']:,} a second")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
