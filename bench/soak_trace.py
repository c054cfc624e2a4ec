"""``tests.e2e.xapp_host`` with memory dumps on SIGUSR1: ``bench/soak.py --trace`` only.

Run as ``python bench/soak_trace.py DUMP_DIR <xapp_host arguments>``.  Every
:data:`MALLOC_EVERY_S` it appends glibc's ``mallinfo2`` (KiB: the heap taken from the system,
in use, free but kept) and VmRSS to ``DUMP_DIR/malloc.jsonl`` (``bench/soak.py --malloc``:
nothing else, so the RSS stays the product's).  The first SIGUSR1
starts tracemalloc (tracing the start-up too took it past the harness's 180 s to get ready on 2
busy cores, and what a leak leaves behind is allocated later anyway); each SIGUSR1 writes
``DUMP_DIR/snap-<n>.pickle`` (a tracemalloc snapshot: what is alive of what was allocated since
the first signal), ``types-<n>.json`` (the live gc-tracked objects by type) and
``malloc-<n>.json`` (glibc's ``mallinfo2``, KiB: what the heap holds in use and free, next to
VmRSS), n counting from 0; the bench diffs them.  SIGUSR2
calls ``malloc_trim(0)`` and writes ``trim.json``: VmRSS before and after (freed memory the
allocator kept, returned).  The handler lives here, in the bench's launch wrapper, not in the
product.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import signal
import sys
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e import xapp_host

#: Frames kept per allocation.
FRAMES = 10
#: How often the allocator's figures are appended to ``malloc.jsonl``.
MALLOC_EVERY_S = 10.0


#: ``struct mallinfo2``'s fields, in order (each a size_t).
MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
             "fordblks", "keepcost")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO2]


def _vm_rss_kib() -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines()
                if x.startswith("VmRSS:"))
    return int(line.split()[1])


def malloc_stats(libc: ctypes.CDLL) -> dict[str, int]:
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return {"vm_rss_kib": _vm_rss_kib(),
            **{name: int(getattr(info, name)) // 1024 for name in MALLINFO2}}


def main() -> int:
    dump = Path(sys.argv[1])
    counter = itertools.count()
    libc = ctypes.CDLL("libc.so.6")

    def on_usr1(_signum: int, _frame: object) -> None:
        n = next(counter)
        if not tracemalloc.is_tracing():
            tracemalloc.start(FRAMES)
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__),
             tracemalloc.Filter(False, "<frozen importlib._bootstrap>")])
        snap.dump(str(dump / f"snap-{n}.pickle"))
        types = Counter(f"{type(o).__module__}.{type(o).__qualname__}"
                        for o in gc.get_objects())
        (dump / f"malloc-{n}.json").write_text(json.dumps(malloc_stats(libc)))
        # Written last: the bench waits for this file.
        (dump / f"types-{n}.json").write_text(json.dumps(dict(types.most_common(300))))

    def on_usr2(_signum: int, _frame: object) -> None:
        before = malloc_stats(libc)
        libc.malloc_trim(0)
        (dump / "trim.json").write_text(json.dumps({"before": before,
                                                    "after": malloc_stats(libc)}))

    def malloc_series() -> None:
        t0 = time.monotonic()
        with (dump / "malloc.jsonl").open("a") as fh:
            while True:
                fh.write(json.dumps({"t_s": round(time.monotonic() - t0, 1),
                                     **malloc_stats(libc)}) + "\n")
                fh.flush()
                time.sleep(MALLOC_EVERY_S)

    threading.Thread(target=malloc_series, name="soak-malloc", daemon=True).start()
    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGUSR2, on_usr2)
    return xapp_host.main(sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
