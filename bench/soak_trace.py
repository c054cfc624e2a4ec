"""``tests.e2e.xapp_host`` with memory dumps on SIGUSR1: ``bench/soak.py --trace`` only.

Run as ``python -X tracemalloc=N bench/soak_trace.py DUMP_DIR <xapp_host arguments>``.  Each
SIGUSR1 writes ``DUMP_DIR/snap-<n>.pickle`` (a tracemalloc snapshot) and ``types-<n>.json``
(the live gc-tracked objects by type), n counting from 0; the bench diffs them.  The handler
lives here, in the bench's launch wrapper, not in the product.
"""

from __future__ import annotations

import gc
import itertools
import json
import signal
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e import xapp_host


def main() -> int:
    dump = Path(sys.argv[1])
    counter = itertools.count()

    def on_usr1(_signum: int, _frame: object) -> None:
        n = next(counter)
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__),
             tracemalloc.Filter(False, "<frozen importlib._bootstrap>")])
        snap.dump(str(dump / f"snap-{n}.pickle"))
        types = Counter(f"{type(o).__module__}.{type(o).__qualname__}"
                        for o in gc.get_objects())
        # Written last: the bench waits for this file.
        (dump / f"types-{n}.json").write_text(json.dumps(dict(types.most_common(300))))

    signal.signal(signal.SIGUSR1, on_usr1)
    return xapp_host.main(sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
