"""Where the packaging artifacts live, and small loaders the packaging tests share."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTOR = ROOT / "config-file.json"
SCHEMAS = ROOT / "schemas"
CONTROLS_SCHEMA = SCHEMAS / "controls.schema.json"
#: The A1 policy types the xApp registers, oldest first; the newest is the default policy's.
POLICY_TYPE_IDS = [20100, 20101]
POLICY_TYPES = {t: SCHEMAS / f"a1-policy-type-{t}.json" for t in POLICY_TYPE_IDS}
POLICY_TYPE = POLICY_TYPES[POLICY_TYPE_IDS[-1]]
CHART = ROOT / "charts" / "mcw-xapp"
DOCKERFILE = ROOT / "Dockerfile"
HERE = Path(__file__).resolve().parent
DESCRIPTOR_RULES = HERE / "descriptor-rules.schema.json"
SERVICEMONITOR_SCHEMA = HERE / "crds" / "servicemonitor.monitoring.coreos.com-v1.json"
#: The onboarder's own schema, shared beside the repository; used only when present.
ONBOARDER_SCHEMA = ROOT.parent / "shared" / "ref" / "xapp-descriptor.schema.json"

XAPP_NAME = "mcw-xapp"
PORTS = {"rmrdata": 4560, "rmrroute": 4561, "http": 8080}
UID = GID = 10001


def load_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def helm_binary() -> str | None:
    """The helm the Makefile installs (.tools/bin), else one on PATH, else None."""
    local = ROOT / ".tools" / "bin" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("helm")


def tool(name: str) -> str | None:
    """A tool from the project's virtualenv (beside the running interpreter) or PATH."""
    venv_bin = ROOT / ".venv" / "bin" / name
    if venv_bin.is_file():
        return str(venv_bin)
    return shutil.which(name)
