"""Every command, file and link the docs cite exists: moving the manual lost nothing a reader
could try.

Checked in the README, ``docs/`` and the component guides: ``make`` targets against the
Makefile, ``mcw`` commands and their sub-commands against the CLI's own parsers, repository
paths in code spans and blocks, and relative Markdown links (with their anchors).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import re
from pathlib import Path

import pytest

from xapp.cli import commands

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", REPO / "CHANGELOG.md", REPO / "CONTRIBUTING.md",
               *(REPO / "docs").glob("*.md"),
               REPO / "kernel-agent" / "README.md", REPO / "charts" / "mcw-xapp" / "README.md",
               REPO / "broker" / "README.md"])
#: Top-level folders whose paths a doc may cite.
ROOTS = ("xapp/", "twin/", "tests/", "bench/", "kernel-agent/", "charts/", "schemas/",
         "broker/", "models/", "docs/", "dashboards/", "keys/", ".ci/")


PATHS = "|".join(map(re.escape, ROOTS))


def exists(path: str) -> bool:
    """A repository path, a name in a file (``tests/x.py::test_y``, ``xapp/core/loop.py:Name``,
    ``tests/e2e/report.name``) or a Go package's identifier (``kernel-agent/integration.TestX``)."""
    if (REPO / path).exists():
        return True
    file, _, name = path.partition(":")
    name = name.lstrip(":").split("::")[-1].split("[")[0]
    if name and (REPO / file).is_file():
        return re.search(rf"\b{re.escape(name)}\b", (REPO / file).read_text()) is not None
    package, _, ident = path.rpartition(".")
    module = REPO / f"{package}.py"
    if module.is_file():  # a Python module's name: tests/e2e/report.f
        return re.search(rf"\b{re.escape(ident)}\b", module.read_text()) is not None
    return bool(ident) and ident[0].isupper() and (REPO / package).is_dir()


def code(text: str) -> list[str]:
    """Text of the code spans and code blocks."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return blocks + spans


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"(?m)^([A-Za-z0-9_.-]+):", text))


def mcw_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each ``mcw`` command's own parser, as ``mcw COMMAND`` builds it."""
    out = {}
    for name, (module_name, _) in commands().items():
        parser = argparse.ArgumentParser(prog=f"mcw {name}")
        importlib.import_module(module_name).configure(parser)
        out[name] = parser
    return out


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-parsers here, nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def headings(text: str) -> list[tuple[int, str]]:
    """(line index, title) of a Markdown text's headings; a ``#`` line inside a code block is
    a comment, not a heading."""
    out, fence = [], False
    for i, line in enumerate(text.split("\n")):
        fence ^= line.startswith("```")
        heading = None if fence else re.match(r"#+ (.+)$", line)
        if heading:
            out.append((i, heading.group(1)))
    return out


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for _, title in headings(path.read_text())}


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name != "CHANGELOG.md"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_cited_commands_exist(doc: Path) -> None:
    """(The changelog is history: it names commands that were replaced.)"""
    targets = make_targets()
    mcw = mcw_parsers()
    missing = []
    for snippet in code(doc.read_text()):
        for target in re.findall(r"(?<![\w-])make ((?:[a-z][\w-]*)(?: [a-z][\w-]*)*)", snippet):
            for t in target.split():
                if t not in targets and not re.fullmatch(r"[A-Z_]+=.*", t):
                    missing.append(f"make {t}")
                break  # the first word after make is the target; what follows is prose
        for cmd, sub in re.findall(r"(?<![\w/.-])mcw ([a-z][\w-]*)(?: ([a-z][\w-]*))?", snippet):
            if cmd not in mcw:
                missing.append(f"mcw {cmd}")
                continue
            subs = subcommands(mcw[cmd])
            if sub and subs and sub not in subs:
                missing.append(f"mcw {cmd} {sub}")
        for path in re.findall(rf"(?<![\w/.-])((?:{PATHS})[^\s`'\"(),;]*)", snippet):
            path = path.rstrip(".:")
            if re.search(r"[*{<]", path) or exists(path):
                continue
            missing.append(path)
    assert not missing, sorted(set(missing))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = doc if not file else (doc.parent / file).resolve()
        if not dest.exists() or (anchor and dest.suffix == ".md"
                                 and anchor not in anchors(dest)):
            broken.append(target)
    assert not broken, broken


#: Lines of a page a reader may have to scroll through before the next heading (code blocks
#: count: they are what a link would point next to).
MAX_LINES_WITHOUT_HEADING = 80


def longest_stretch_without_heading(text: str) -> int:
    starts = [0, *(i for i, _ in headings(text)), len(text.split("\n"))]
    return max(b - a for a, b in itertools.pairwise(starts))


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name != "CHANGELOG.md"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_every_part_of_a_page_can_be_linked(doc: Path) -> None:
    """A page is read by links into it: no long stretch of it lies under one heading (the
    changelog is left out: one heading per issue, as they close)."""
    assert longest_stretch_without_heading(doc.read_text()) <= MAX_LINES_WITHOUT_HEADING


def test_the_stretch_counter_sees_headings_outside_code_only() -> None:
    page = "# a\n" + "x\n" * 10 + "```sh\n# a comment, not a heading\n```\n" + "y\n" * 5
    assert longest_stretch_without_heading(page) == 20
    assert longest_stretch_without_heading("# a\n## b\nc") == 2
