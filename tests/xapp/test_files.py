"""``xapp.files.atomic_write``: the old content or the new, never a half, never a stray file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from xapp.files import atomic_write


def test_replaces_whole_with_mode_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.json"
    atomic_write(target, "old")
    atomic_write(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.json"]


def test_a_failed_write_keeps_the_old_content(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f"
    atomic_write(target, "old")

    def no_rename(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
