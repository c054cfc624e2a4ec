"""The lock every throughput measurement between network namespaces takes, so that two never
share the machine's cores: two benches at once each measure the other (issue 32's benches ran
into each other until they took it)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator

#: The lock file; ``go test`` runs of the netns benches take it with ``flock`` too.
NETNS_LOCK = os.environ.get("MCW_NETNS_LOCK", "/tmp/netns-bench.lock")


@contextlib.contextmanager
def netns_bench_lock(path: str = NETNS_LOCK) -> Iterator[None]:
    """Hold the lock for the block; say on stderr when another measurement holds it."""
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {path}: another netns measurement runs", file=sys.stderr)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
