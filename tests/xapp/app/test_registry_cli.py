"""``mcw cpe-registry``: add, show, list, import, remove against a real Redis, with --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.redis_server import RedisServer
from xapp.adapters.e2.registry import CpeRegistry
from xapp.adapters.sdl import ricsdl_backend
from xapp.cli import main

CELL = "00f110-00000000a"


def mcw(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["cpe-registry", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if "--json" in args and out.strip() else out), err


def test_add_show_list_remove(redis: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = mcw(capsys, "add", "cpe-1", "--ue-id", "crnti:4660", "--ue-id",
                       "AMF:00F110-2-1-3:17", "--cell", CELL, "--json")
    assert code == 0
    assert doc == {"cpe_id": "cpe-1", "ue_ids": ["crnti:4660", "amf:00f110-2-1-3:17"],
                   "cell": CELL}
    code, doc, _ = mcw(capsys, "add", "cpe-2", "--ue-id", "f1ap:9", "--json")
    assert code == 0
    code, doc, _ = mcw(capsys, "show", "cpe-1", "--json")
    assert code == 0 and doc["ue_ids"] == ["crnti:4660", "amf:00f110-2-1-3:17"]
    code, doc, _ = mcw(capsys, "list", "--json")
    assert [e["cpe_id"] for e in doc["cpes"]] == ["cpe-1", "cpe-2"]
    # The running xApp's registry (another client of the same namespace) sees it.
    seen = CpeRegistry(backend_factory=ricsdl_backend)
    assert seen.refresh() and seen.cpe_for_keys(["amf:00f110-2-1-3:17"]) == "cpe-1"
    seen.stop()
    code, doc, _ = mcw(capsys, "remove", "cpe-1", "--ue-id", "crnti:4660", "--json")
    assert code == 0 and doc["entry"]["ue_ids"] == ["amf:00f110-2-1-3:17"]
    code, doc, _ = mcw(capsys, "remove", "cpe-1", "--json")
    assert code == 0 and doc == {"cpe_id": "cpe-1", "removed": True, "entry": None}
    code, doc, _ = mcw(capsys, "show", "cpe-1", "--json")
    assert code == 1 and doc == {"cpe_id": "cpe-1", "registered": False}
    code, text, _ = mcw(capsys, "list")
    assert code == 0 and text.strip() == "cpe-2: f1ap:9; cell unknown"


def test_invalid_input_changes_nothing(redis: RedisServer,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert mcw(capsys, "add", "cpe-1", "--ue-id", "crnti:1")[0] == 0
    code, _, err = mcw(capsys, "add", "cpe-2", "--ue-id", "crnti:1")
    assert code == 2 and "both cpe-1 and cpe-2" in err
    code, _, err = mcw(capsys, "add", "cpe 3", "--ue-id", "crnti:3")
    assert code == 2 and "CPE id" in err
    code, _, err = mcw(capsys, "add", "cpe-4", "--ue-id", "imsi:001010123456789")
    assert code == 2 and "UE id" in err
    code, doc, _ = mcw(capsys, "list", "--json")
    assert [e["cpe_id"] for e in doc["cpes"]] == ["cpe-1"]


def test_import_csv_then_json_round_trip(redis: RedisServer, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"cpe-{i:04d},crnti:{i};f1ap:{i},{CELL}\n" for i in range(200))
    csv_file = tmp_path / "reg.csv"
    csv_file.write_text("cpe_id,ue_ids,cell\n" + rows)
    code, doc, _ = mcw(capsys, "import", str(csv_file), "--json")
    assert code == 0 and doc == {"imported": 200, "registered": 200}
    code, listed, _ = mcw(capsys, "list", "--json")
    assert len(listed["cpes"]) == 200
    # What list --json prints is what import reads; --replace-all drops the rest.
    keep = tmp_path / "keep.json"
    keep.write_text(json.dumps({"cpes": listed["cpes"][:3]}))
    code, doc, _ = mcw(capsys, "import", str(keep), "--replace-all", "--json")
    assert code == 0 and doc == {"imported": 3, "registered": 3}
    bad = tmp_path / "bad.csv"
    bad.write_text("cpe_id,ue_ids,cell\ncpe-x,crnti:99,\ncpe-y,crnti:70000,\n")
    code, _, err = mcw(capsys, "import", str(bad))
    assert code == 2 and "line 3" in err
    code, doc, _ = mcw(capsys, "list", "--json")
    assert [e["cpe_id"] for e in doc["cpes"]] == ["cpe-0000", "cpe-0001", "cpe-0002"]


def test_sdl_unreachable_is_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.polling import free_port

    monkeypatch.setenv("DBAAS_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("DBAAS_SERVICE_PORT", str(free_port()))
    code, _, err = mcw(capsys, "add", "cpe-1", "--ue-id", "crnti:1")
    assert code == 3 and "SDL unreachable" in err


def test_help_explains() -> None:
    out = subprocess.run([sys.executable, "-m", "xapp.cli", "cpe-registry", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "No standard core API" in out and "import" in out
    out = subprocess.run([sys.executable, "-m", "xapp.cli", "cpe-registry", "add", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "crnti:<C-RNTI>" in out and "--json" in out
