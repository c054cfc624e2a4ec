"""Where the repository and ../shared (the data beside it: e2sim captures, Raca traces) are,
so a test's path does not depend on how deep its folder sits."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
