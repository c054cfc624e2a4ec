"""The agent unit's fallback for systemd < 247 (no ``LoadCredential=``), read by systemd.

Booting it under an old systemd is not done here; ``systemd-analyze verify`` (the host's
systemd) reads the unit with the drop-in beside it, as ``/etc/systemd/system`` would hold them,
and must find nothing wrong in the drop-in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.packaging.paths import ROOT

DEPLOY = ROOT / "kernel-agent" / "deploy"
DROP_IN = DEPLOY / "mcw-agent.service.d" / "key-without-credentials.conf"


def test_the_fallback_copies_the_key_where_the_docs_point() -> None:
    text = DROP_IN.read_text()
    assert "RuntimeDirectory=mcw-agent\n" in text and "RuntimeDirectoryMode=0700\n" in text
    (copy,) = [line for line in text.splitlines() if line.startswith("ExecStartPre=+")]
    # "%u" alone is systemd's user-name specifier; stat's format needs "%%u" in a unit.
    assert "%%u" in copy and "%%g" in copy and not re.search(r"[^%]%[ug]", copy)
    assert "-m 0400" in copy
    assert copy.endswith(" /etc/mcw-agent/pki/cpe.key /run/mcw-agent/cpe.key'")
    for doc in (ROOT / "kernel-agent" / "README.md", DEPLOY / "agent.example.yaml"):
        assert "/run/mcw-agent/cpe.key" in doc.read_text()
    assert "systemd >= 247" in (DEPLOY / "mcw-agent.service").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_reads_the_drop_in_without_a_complaint(tmp_path: Path) -> None:
    (tmp_path / "mcw-agent.service.d").mkdir()
    shutil.copy(DEPLOY / "mcw-agent.service", tmp_path)
    shutil.copy(DROP_IN, tmp_path / "mcw-agent.service.d")
    out = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "mcw-agent.service")],
                         env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
                         capture_output=True, text=True, timeout=60)
    complaints = [line for line in (out.stdout + out.stderr).splitlines()
                  # The binary is not installed on the test host.
                  if "/usr/local/bin/mcw-agent is not executable" not in line]
    assert complaints == []
