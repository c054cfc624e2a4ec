"""Where the project's JSON Schemas (``schemas/`` in the repository) are found at run time.

One lookup for every reader (A1 policy type, controls, MQTT payloads): ``$MCW_SCHEMAS_DIR``,
the image path ``/opt/mcw/schemas``, then the repository's ``schemas/`` for development.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Where schemas live in the image (the Dockerfile copies ``schemas/`` there).
IMAGE_SCHEMAS_DIR = Path("/opt/mcw/schemas")
REPO_SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"


def schemas_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding the schemas: ``explicit``, ``$MCW_SCHEMAS_DIR``, the image path
    ``/opt/mcw/schemas`` or the repository's ``schemas/``, the first that exists."""
    for candidate in (explicit, os.environ.get("MCW_SCHEMAS_DIR"), IMAGE_SCHEMAS_DIR,
                      REPO_SCHEMAS_DIR):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    raise FileNotFoundError(
        "no schemas directory: set --schemas-dir or MCW_SCHEMAS_DIR "
        f"(looked at {IMAGE_SCHEMAS_DIR} and {REPO_SCHEMAS_DIR})")
