"""Files written whole or not at all: the one ``atomic_write`` of the project.

A reader (the xApp after a crash, an operator's tool, the next hot reload) sees the old content
or the new one, never half of either: the data goes to a unique temporary file beside the
target, is flushed and fsynced, renamed over the target, and the directory is fsynced so the
rename itself survives a power cut.  A unique name (not ``path + ".tmp"``) lets two writers of
one directory never write into each other's temporary file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """Replace ``path`` by ``data`` atomically, creating its directory; the file gets ``mode``
    (0644 unless it is a secret: artifacts are read by the image's non-root user)."""
    payload = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
