"""Per-CPE weight versions that only grow, across publisher restarts and failovers.

The publisher never asks the store for every message. It reserves a *block* of versions per
CPE: the store durably records the block's ceiling before any version of the block is sent.
After a restart the publisher starts above the stored ceiling, so it may skip up to a block of
numbers but can never reuse one. The SDL (Redis) store of the RIC glue implements the same
protocol (:class:`xapp.core.ports.VersionStore`); :class:`MemoryVersionStore` and
:class:`FileVersionStore` are for tests and single-node use.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from xapp.core.ports import VersionStore
from xapp.files import atomic_write


class MemoryVersionStore:
    """In-process store; survives a publisher object, not the process. Thread-safe."""

    def __init__(self) -> None:
        self._ceilings: dict[str, int] = {}
        self._lock = threading.Lock()
        #: Number of ``set_ceilings`` calls (tests check that blocks batch the writes).
        self.writes = 0

    def get_ceilings(self, cpe_ids: Collection[str]) -> dict[str, int]:
        with self._lock:
            return {c: self._ceilings.get(c, 0) for c in cpe_ids}

    def set_ceilings(self, ceilings: Mapping[str, int]) -> None:
        with self._lock:
            self.writes += 1
            for cpe_id, value in ceilings.items():
                self._ceilings[cpe_id] = max(self._ceilings.get(cpe_id, 0), int(value))


class FileVersionStore:
    """A JSON file ``{cpe_id: ceiling}`` replaced atomically (write, fsync, rename).

    Meant for a single publisher process; a corrupt or non-object file is an error rather than
    a silent reset to 0, because a reset would make versions repeat.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._ceilings = self._load()

    def _load(self) -> dict[str, int]:
        if not self.path.exists():
            return {}
        data = json.loads(self.path.read_text())
        if not isinstance(data, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for k, v in data.items()):
            raise ValueError(f"{self.path}: expected an object of cpe_id -> non-negative int")
        return dict(data)

    def get_ceilings(self, cpe_ids: Collection[str]) -> dict[str, int]:
        with self._lock:
            return {c: self._ceilings.get(c, 0) for c in cpe_ids}

    def set_ceilings(self, ceilings: Mapping[str, int]) -> None:
        with self._lock:
            merged = dict(self._ceilings)
            for cpe_id, value in ceilings.items():
                merged[cpe_id] = max(merged.get(cpe_id, 0), int(value))
            atomic_write(self.path, json.dumps(merged, separators=(",", ":"), sort_keys=True))
            self._ceilings = merged


class VersionAllocator:
    """Hands out growing versions per CPE, reserving blocks in a :class:`VersionStore`.

    Not thread-safe by itself; the publisher calls it under its own lock.
    """

    def __init__(self, store: VersionStore, block: int = 100) -> None:
        if block < 1:
            raise ValueError("block must be >= 1")
        self.store = store
        self.block = block
        self._last: dict[str, int] = {}
        self._ceiling: dict[str, int] = {}
        #: The last version handed out for each CPE whose block was forgotten: a store that
        #: lost its data (FLUSHALL) and a floor from a clock that has not moved on a millisecond
        #: must not hand this process a version it sent already.
        self._forgotten: dict[str, int] = {}

    def reserve(self, cpe_ids: Collection[str]) -> None:
        """Make sure each CPE has at least one unused version, with one store write in all."""
        need = [c for c in cpe_ids if self._last.get(c, 0) >= self._ceiling.get(c, 0)]
        if not need:
            return
        unknown = [c for c in need if c not in self._ceiling]
        if unknown:
            for cpe_id, stored in self.store.get_ceilings(unknown).items():
                # Start above anything a previous run, or this one, could have sent.
                start = max(stored, self._forgotten.pop(cpe_id, 0))
                self._last[cpe_id] = start
                self._ceiling[cpe_id] = start
        new = {c: max(self._ceiling[c], self._last[c]) + self.block for c in need}
        self.store.set_ceilings(new)
        self._ceiling.update(new)

    def peek(self, cpe_id: str) -> int:
        """The version :meth:`take` would return next (reserves a block if needed)."""
        self.reserve([cpe_id])
        return self._last[cpe_id] + 1

    def take(self, cpe_id: str) -> int:
        version = self.peek(cpe_id)
        self._last[cpe_id] = version
        return version

    def take_many(self, cpe_ids: Collection[str]) -> list[int]:
        """The next version of each CPE, in order (one store write in all, if any)."""
        self.reserve(cpe_ids)
        last, ceiling = self._last, self._ceiling
        out: list[int] = []
        for cpe_id in cpe_ids:
            version = last[cpe_id] + 1
            if version > ceiling[cpe_id]:  # named twice in the batch: the block ran out
                self.reserve([cpe_id])
            last[cpe_id] = version
            out.append(version)
        return out

    def last(self, cpe_id: str) -> int:
        """The last version handed out in this process (0 if none)."""
        return self._last.get(cpe_id, 0)

    def exhausted(self, cpe_ids: Collection[str]) -> list[str]:
        """The CPEs that have no unused version left (or none known): the next version of
        each needs the store."""
        return [c for c in cpe_ids if self._last.get(c, 0) >= self._ceiling.get(c, 0)
                or c not in self._ceiling]

    def forget(self, which: Callable[[str], bool]) -> int:
        """Drop the cached block of every CPE ``which`` selects, so its next version is read
        from the store again: another replica may have sent (and stored ceilings) meanwhile.
        Returns how many were dropped."""
        gone = [c for c in self._ceiling if which(c)]
        for c in gone:
            del self._ceiling[c]
            last = self._last.pop(c, 0)
            self._forgotten[c] = max(self._forgotten.get(c, 0), last)
        return len(gone)
