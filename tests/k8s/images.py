"""The images the cluster runs, made here without a registry and saved for ``ctr import``.

- ``localhost/mcw-xapp:e2e-k8s``: the Dockerfile's ``runtime`` target, built by podman from the
  working tree on the debootstrap base of ``tests/support/rootfs.py``, without RMR
  (``RMR_DEB_URL=none``: its package cannot be downloaded here);
- ``localhost/mcw-aux:<key>``: a Debian minbase with ``mosquitto`` and ``wget`` (debootstrap),
  the chart's broker (``broker.server.image``) and its ``helm test`` pod (``helmTest.image``,
  which needs ``wget``) in place of ``eclipse-mosquitto`` and ``busybox`` from Docker Hub;
- ``localhost/mcw-pause:3.10.1``: Kubernetes' own ``build/pause/linux/pause.c`` compiled
  static (the Makefile builds ``.tools/k8s/bin/pause``), the pods' sandbox.

podman keeps its layer cache, so a warm build of the xApp image takes seconds; the archives are
written into the run's scratch directory.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.k8s.cluster import PAUSE_IMAGE
from tests.support.rootfs import SUITE, debootstrap, python_base_image

ROOT = Path(__file__).resolve().parents[2]
XAPP_IMAGE = "localhost/mcw-xapp:e2e-k8s"
AUX_PACKAGES = ["mosquitto", "wget"]
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Images:
    xapp: str
    aux: str
    pause: str
    archives: list[Path]
    build_s: float


def _podman() -> str:
    exe = shutil.which("podman")
    if exe is None:
        raise RuntimeError("podman is not installed (make deps-system)")
    return exe


def _run(cmd: list[str], timeout: float, stdin: int | None = None) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=stdin)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {res.stderr.strip()[-4000:]}")
    return res.stdout


def _import(podman: str, tar: Path, tag: str, changes: list[str]) -> None:
    cmd = [podman, "import", "-q"]
    for c in changes:
        cmd += ["--change", c]
    with tar.open("rb") as fh:
        _run([*cmd, "-", tag], 300, stdin=fh.fileno())


def xapp_image(podman: str) -> str:
    base = python_base_image(podman)
    _run([podman, "build", "-q", "--network", "host", "--target", "runtime",
          "--build-arg", f"PYTHON_IMAGE={base}", "--build-arg", "RMR_DEB_URL=none",
          "-t", XAPP_IMAGE, str(ROOT)], 1800)
    return XAPP_IMAGE


def aux_image(podman: str, scratch: Path) -> str:
    root = debootstrap("k8s-aux", AUX_PACKAGES)
    tag = f"localhost/mcw-aux:{SUITE}-{root.name.rsplit('-', 1)[-1]}"
    if subprocess.run([podman, "image", "exists", tag], check=False).returncode == 0:
        return tag
    tar = scratch / "aux-rootfs.tar"
    _run(["tar", "-C", str(root), "--exclude=./.complete", "-cf", str(tar), "."], 300)
    _import(podman, tar, tag, [f"ENV {PATH_ENV}"])
    tar.unlink()
    return tag


def pause_image(podman: str, pause_bin: Path, scratch: Path) -> str:
    if not pause_bin.exists():
        raise RuntimeError(f"{pause_bin} is missing (the Makefile's e2e-k8s builds it)")
    tar = scratch / "pause-rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(pause_bin, arcname="pause")
    _import(podman, tar, PAUSE_IMAGE, ['ENTRYPOINT ["/pause"]', "USER 65535:65535"])
    tar.unlink()
    return PAUSE_IMAGE


def build_images(scratch: Path, pause_bin: Path) -> Images:
    podman = _podman()
    scratch.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    xapp = xapp_image(podman)
    aux = aux_image(podman, scratch)
    pause = pause_image(podman, pause_bin, scratch)
    archives = []
    for tag in (pause, aux, xapp):
        out = scratch / (tag.split("/", 1)[1].replace(":", "_") + ".tar")
        out.unlink(missing_ok=True)
        _run([podman, "save", "-q", "--format", "docker-archive", "-o", str(out), tag], 600)
        archives.append(out)
    return Images(xapp, aux, pause, archives, round(time.monotonic() - t0, 1))
