"""Debian root file systems made with debootstrap, for the image and systemd tests.

No container registry is reachable here, so the base image of the xApp's image and the
machine the agent's unit boots in are both made from Debian's own packages, the one registry
this kind of machine reaches. They are cached under ``.tools/rootfs/`` (the Makefile's tool
cache, git-ignored): a warm machine does not debootstrap again unless the package list changes.
The mirror is the one apt on this machine already uses, so nothing names a host.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".tools" / "rootfs"
SUITE = "bookworm"


def apt_mirror() -> str:
    """The Debian mirror apt is configured with (deb822 ``URIs:`` or one-line ``deb`` form)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^(?:URIs:\s*(\S+)|deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+))", text,
                             re.MULTILINE):
            uri = m.group(1) or m.group(2)
            if uri and "security" not in uri:
                return uri
    raise RuntimeError("no Debian mirror found in /etc/apt/sources.list{,.d}")


def debootstrap(name: str, packages: list[str], *, timeout_s: float = 900) -> Path:
    """A minbase ``SUITE`` root with ``packages``, made once and cached by its package list."""
    key = hashlib.sha256(" ".join(sorted(packages)).encode()).hexdigest()[:12]
    dest = CACHE / f"{name}-{SUITE}-{key}"
    if (dest / ".complete").exists():
        return dest
    exe = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if dest.exists():
        shutil.rmtree(dest)  # an interrupted earlier attempt
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([exe, "--variant=minbase", f"--include={','.join(packages)}", SUITE,
                    str(dest), apt_mirror()], check=True, capture_output=True,
                   timeout=timeout_s)
    # What an image does not need: package lists and caches, documentation.
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        for child in (dest / junk).glob("*"):
            if child.is_symlink() or child.is_file():
                child.unlink()
            elif child.is_dir() and child.name != "partial":
                shutil.rmtree(child)
    (dest / ".complete").write_text(" ".join(packages) + "\n")
    return dest




#: What the xApp's image needs of a base: Python 3.11 as ``python``, venv, TLS roots.
PYTHON_PACKAGES = ["python3", "python3-venv", "python-is-python3", "ca-certificates"]


def python_base_image(podman: str) -> str:
    """A ``python``-like base image for the Dockerfile's ``PYTHON_IMAGE``, imported into podman.

    The image trusts what this machine trusts (its CA bundle and pip's configuration are
    copied in), so that its pip and apt reach the same registries the host reaches.
    """
    root = debootstrap("python", PYTHON_PACKAGES)
    tag = f"localhost/mcw-base:{SUITE}-{root.name.rsplit('-', 1)[-1]}"
    if subprocess.run([podman, "image", "exists", tag], check=False).returncode == 0:
        return tag
    bundle = "etc/ssl/certs/ca-certificates.crt"
    shutil.copyfile(f"/{bundle}", root / bundle)
    if Path("/etc/pip.conf").is_file():
        shutil.copyfile("/etc/pip.conf", root / "etc/pip.conf")
    tar = subprocess.Popen(["tar", "-C", str(root), "--exclude=./.complete", "-c", "."],
                           stdout=subprocess.PIPE)
    try:
        subprocess.run([podman, "import", "-q", "-", tag], stdin=tar.stdout, check=True,
                       capture_output=True, timeout=300)
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
    return tag


__all__ = ["CACHE", "PYTHON_PACKAGES", "SUITE", "apt_mirror", "debootstrap", "python_base_image"]
