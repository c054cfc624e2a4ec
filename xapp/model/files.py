"""The model package's reads: bounded before they allocate.

An artifact directory may be a volume someone else writes; every file read from it is read
with a size cap first (a 10 GB "card" must not be read into memory to find out it is wrong).
Writes go through :func:`xapp.files.atomic_write`.
"""

from __future__ import annotations

import os
from pathlib import Path

from xapp.model.errors import ArtifactError


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path`` if it holds at most ``limit`` bytes; :class:`ArtifactError` if it
    is larger, missing or unreadable.  Reads at most ``limit + 1`` bytes whatever the file
    claims, so a file that grows between ``stat`` and ``read`` is still caught."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise ArtifactError(f"{what} {path} is {size} bytes, above the {limit}-byte cap")
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ArtifactError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise ArtifactError(f"{what} {path} grew above the {limit}-byte cap while read")
    return data
