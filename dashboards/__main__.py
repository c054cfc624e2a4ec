"""``python -m dashboards [--check]``: write (or check) the chart's dashboard JSON files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dashboards.mcw_xapp import DASHBOARDS, dashboard_json

OUT = Path(__file__).resolve().parents[1] / "charts" / "mcw-xapp" / "files" / "dashboards"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="fail (exit 1) when a committed JSON differs from the code")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, build in DASHBOARDS.items():
        text = json.dumps(dashboard_json(build()), indent=2, sort_keys=True) + "\n"
        path = OUT / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("stale dashboards (run python -m dashboards): " + ", ".join(stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
