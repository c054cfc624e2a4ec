"""The run's cgroups: ``/mcw-e2e-k8s-<pid>`` in every cgroup v1 hierarchy, the kubelet's
``cgroupRoot`` and the parent of the pods' cgroups; made before the kubelet starts, removed when
the cluster stops, and the ones of crashed runs found (and the empty ones removed) before a run."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tests.support.polling import wait_until

CGROUPFS = Path("/sys/fs/cgroup")
CGROUP_PREFIX = "mcw-e2e-k8s-"
CGROUP_ROOT = f"{CGROUP_PREFIX}{os.getpid()}"


def hierarchies() -> list[Path]:
    return [h for h in sorted(CGROUPFS.iterdir())
            if h.is_dir() and not h.is_symlink() and (h / "cgroup.procs").exists()]


def make_cgroups() -> None:
    """``/mcw-e2e-k8s-<pid>`` in every hierarchy (the kubelet's ``cgroupRoot`` must exist),
    cpuset's filled from its parent."""
    for h in hierarchies():
        d = h / CGROUP_ROOT
        d.mkdir(exist_ok=True)
        if h.name == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (d / f).read_text().strip():
                    (d / f).write_text((h / f).read_text())


def remove_cgroups() -> list[str]:
    """Remove the run's cgroups, deepest first; returns the ones still busy."""
    left = []
    for h in hierarchies():
        top = h / CGROUP_ROOT
        if not top.exists():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                      reverse=True)
        for d in [*dirs, top]:
            if not wait_until(lambda: _removed(d), 5.0, 0.25):  # noqa: B023
                left.append(f"cgroup {d} still busy")
    return left


def leftovers_of_earlier_runs() -> list[str]:
    """The cgroups of runs whose harness is gone (crashed or killed): empty ones are removed,
    the others (processes still in them) are returned."""
    left = []
    for h in hierarchies():
        for top in h.glob(f"{CGROUP_PREFIX}*"):
            pid = top.name.removeprefix(CGROUP_PREFIX)
            if pid.isdigit() and Path(f"/proc/{pid}").exists():
                continue  # a run in progress
            below = sorted((p for p in top.rglob("*") if p.is_dir()),
                           key=lambda p: len(p.parts), reverse=True)
            for d in [*below, top]:
                with contextlib.suppress(OSError):
                    d.rmdir()
            if top.exists():
                left.append(str(top))
    return left


def _removed(d: Path) -> bool:
    """Remove the cgroup ``d``: True once it is gone, False while the kernel still counts a
    process in it (a killed one is released a moment later)."""
    try:
        d.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True
