"""Every arrow points inward: the layering of ``docs/architecture.md``, checked on the source.

``core`` is the control loop's logic and its ports; ``model`` the capacity model on top of it;
``adapters`` implement core's ports for Redis, InfluxDB, MQTT, RMR, A1 and E2; ``app`` wires
them into commands and the runtime.  The twin is a plug-in that imports the xApp and is never
imported by it (the runtime image ships no ``twin/``).  Imports inside functions and
``importlib.import_module("...")`` with a constant name count as much as top-level ones.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: layer -> the layers of ours it may import (besides itself).
#: ``xapp/files.py`` (the one atomic write), ``xapp/schemas.py`` (the JSON schemas' loader) and
#: ``xapp/bounded_json.py`` (the one parser of untrusted JSON) are leaves: they import nothing of
#: ours, and the model and the adapters may use them.
LEAVES = {"xapp.files", "xapp.schemas", "xapp.bounded_json"}
ALLOWED: dict[str, set[str]] = {
    "xapp.core": set(),
    "xapp.model": {"xapp.core", "xapp.files", "xapp.bounded_json"},
    "xapp.adapters": {"xapp.core", *LEAVES},
    "xapp.app": {"xapp.core", "xapp.model", "xapp.adapters", "xapp", *LEAVES},
    "xapp": {"xapp.core", "xapp.app", *LEAVES},
    "xapp.files": set(),
    "xapp.schemas": set(),
    "xapp.bounded_json": set(),
    "twin": {"xapp", "xapp.core", "xapp.model", "xapp.adapters", "xapp.app", *LEAVES},
}


def layer(module: str) -> str | None:
    """The layer a dotted module name belongs to; None when it is not ours."""
    parts = module.split(".")
    if parts[0] == "twin":
        return "twin"
    if parts[0] != "xapp":
        return None
    if len(parts) > 1 and f"xapp.{parts[1]}" in ALLOWED:
        return f"xapp.{parts[1]}"
    return "xapp"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of ours (a file under the repository)."""
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in ``path``, relative ones resolved."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            # `from xapp import bounded_json` imports the module xapp.bounded_json, as
            # `from xapp.bounded_json import loads` does; `from xapp.adapters.mqtt import
            # ChannelSubscriber` takes a name of the package itself.
            found = {f"{name}.{a.name}" if is_module(f"{name}.{a.name}") else name
                     for a in node.names}
            yield from ((node.lineno, m) for m in sorted(found))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.lineno, node.args[0].value


def sources() -> list[Path]:
    return sorted([*(REPO / "xapp").rglob("*.py"), *(REPO / "twin").rglob("*.py")])


def violations(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        src = layer(module_name(path))
        assert src is not None
        for line, name in imports(path):
            dst = layer(name)
            if dst is None or dst == src or dst in ALLOWED[src]:
                continue
            out.append(f"{path.relative_to(REPO)}:{line}: {src} imports {name} ({dst})")
    return out


#: Fewer files than this means the glob went wrong (a moved tree, a renamed folder), and a check
#: over nothing would pass: 97 modules when this was set.
MIN_SOURCES = 90


def test_every_arrow_points_inward() -> None:
    paths = sources()
    assert len(paths) >= MIN_SOURCES, f"read {len(paths)} files: is the tree where it was?"
    assert violations(paths) == []


def test_the_check_sees_every_kind_of_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """A core module that reaches out in each way an import can be written is caught."""
    tree(tmp_path, "xapp/core/__init__.py", "xapp/adapters/sdl.py", "xapp/model/online.py")
    bad = tmp_path / "xapp" / "core" / "bad.py"
    bad.write_text("import importlib\n"
                   "from xapp.adapters import sdl\n"
                   "from ..model import online\n"
                   "def f():\n"
                   "    import twin.kpis\n"
                   "    return importlib.import_module('xapp.app.process')\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    found = violations([bad])
    assert [v.split(": ", 1)[1] for v in found] == [
        "xapp.core imports xapp.adapters.sdl (xapp.adapters)",
        "xapp.core imports xapp.model.online (xapp.model)",
        "xapp.core imports twin.kpis (twin)",
        "xapp.core imports xapp.app.process (xapp.app)",
    ], found


def test_from_a_package_import_a_module_is_that_module(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``from xapp import bounded_json`` imports the leaf, not the package ``xapp`` (which the
    model may not import); a name the package itself defines is the package's."""
    tree(tmp_path, "xapp/__init__.py", "xapp/bounded_json.py", "xapp/model/__init__.py",
         "xapp/adapters/sdl.py", "xapp/adapters/mqtt/__init__.py")
    (tmp_path / "xapp" / "__init__.py").write_text("VERSION = '1'\n")
    uses = tmp_path / "xapp" / "model" / "uses.py"
    uses.write_text("from xapp import bounded_json\n"
                    "from xapp import VERSION\n"
                    "from xapp.adapters import sdl, mqtt\n"
                    "from xapp.adapters.mqtt import ChannelSubscriber\n"
                    "from . import *\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert list(imports(uses)) == [
        (1, "xapp.bounded_json"), (2, "xapp"), (3, "xapp.adapters.mqtt"),
        (3, "xapp.adapters.sdl"), (4, "xapp.adapters.mqtt"), (5, "xapp.model")]
    assert [v.split(": ", 1)[1] for v in violations([uses])] == [
        "xapp.model imports xapp (xapp)",
        "xapp.model imports xapp.adapters.mqtt (xapp.adapters)",
        "xapp.model imports xapp.adapters.sdl (xapp.adapters)",
        "xapp.model imports xapp.adapters.mqtt (xapp.adapters)"]


def tree(root: Path, *files: str) -> None:
    """Empty modules at ``files`` under ``root``, with their packages' ``__init__.py``."""
    for name in files:
        path = root / name
        for pkg in path.parents:
            if pkg == root:
                break
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / "__init__.py").touch()
        path.touch()


def test_no_module_of_ours_outside_the_layers() -> None:
    assert {layer(module_name(p)) for p in sources()} <= set(ALLOWED)
