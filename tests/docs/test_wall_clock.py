"""A test bounds wall time only where the guarantee is a real server's timing, and each such
test is listed, with its guarantee, in ``docs/design.md`` ("Wall-clock assertions kept").

Elsewhere a wall-clock bound flakes on a loaded machine and proves less than a count, an order
or a fake clock would.  Found by a simple pattern on the source of ``tests/``: an ``assert``
that compares (``<``, ``<=``, ``>``, ``>=``) a span of the monotonic clock (``time.monotonic``,
``time.perf_counter``): a reading plus or minus something, or a name assigned one (in the same
function, or returned by a function of the module), or a difference of times named like one
(``at - sent``, ``arrived_at[...] - started``).  Two readings compared are an order of events,
not a bound.  A bound on the test thread's own CPU time (``time.thread_time``) is not one
either: load elsewhere does not stretch it.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
SECTION = "### Wall-clock assertions kept, and why"

#: The clocks that time what a test waits for (``time.<name>()``, or the name imported from
#: ``time``).  ``time.time()`` is left out: tests read it to stamp data (a KPI row's time), and
#: comparing stamps is no bound on how long anything took.
CLOCKS = frozenset({"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"})
#: Names of a time stamp or a duration, when a difference of them is compared.
TIME_NAME = re.compile(r"(^|_)(at|sent|started|start|t0|elapsed|took)$")
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
#: Calls whose arguments a time passes through unchanged in kind.
PLAIN = frozenset({"abs", "round", "max", "min", "float", "int"})
#: The clocks of CPU time spent (``time.<name>()``).
CPU_CLOCKS = frozenset({"thread_time", "thread_time_ns", "process_time", "process_time_ns"})


def _clock_names(tree: ast.Module) -> set[str]:
    """Names the module imported from ``time`` that read a clock."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "time"
            for alias in node.names if alias.name in CLOCKS}


def _identifier(node: ast.expr) -> str:
    """The last name of ``a``, ``a.b``, ``a.b[i]``; empty for anything else."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _nodes(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and what is in it, except the arguments of calls other than :data:`PLAIN`: a
    value computed from a time (``rate(t0, t1)``) is not a time."""
    yield node
    if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                           and node.func.id in PLAIN):
        yield from _nodes(node.func)
        return
    for child in ast.iter_child_nodes(node):
        yield from _nodes(child)


def _is_cpu_clock_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "time"
            and node.func.attr in CPU_CLOCKS)


def _named_span(node: ast.AST, times: _Times) -> bool:
    """A difference of names of times (``at - sent``), neither of them CPU time."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)):
        return False
    sides = (node.left, node.right)
    if any(_is_cpu_clock_call(n) or (isinstance(n, ast.Name) and n.id in times.cpu)
           for n in sides):
        return False
    return any(TIME_NAME.search(_identifier(n)) for n in sides)


@dataclass
class _Times:
    """Names of one function that hold a clock reading (``stamps``) or a value computed from
    one (``spans``: a duration, a deadline)."""

    stamps: set[str] = field(default_factory=set)
    spans: set[str] = field(default_factory=set)
    #: Names assigned a reading of a CPU-time clock.
    cpu: set[str] = field(default_factory=set)


class _Module:
    """What reads a clock in one module."""

    def __init__(self, tree: ast.Module) -> None:
        self.clock_names = _clock_names(tree)
        #: Functions of the module that return a clock reading, or a value computed from one.
        self.stamp_functions: set[str] = set()
        self.span_functions: set[str] = set()
        functions = [n for n in ast.walk(tree)
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        changed = True
        while changed:
            changed = False
            for fn in functions:
                if fn.name in self.stamp_functions | self.span_functions:
                    continue
                times = self.times(fn)
                kinds = {self.kind(n.value, times) for n in ast.walk(fn)
                         if isinstance(n, ast.Return) and n.value is not None}
                if "span" in kinds:
                    self.span_functions.add(fn.name)
                elif "stamp" in kinds:
                    self.stamp_functions.add(fn.name)
                else:
                    continue
                changed = True

    def _is_clock_call(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            return f.value.id == "time" and f.attr in CLOCKS
        return isinstance(f, ast.Name) and (f.id in self.clock_names
                                             or f.id in self.stamp_functions)

    def _is_stamp(self, node: ast.AST, times: _Times) -> bool:
        return self._is_clock_call(node) or (isinstance(node, ast.Name)
                                             and node.id in times.stamps)

    def _is_span(self, node: ast.AST, times: _Times) -> bool:
        if isinstance(node, ast.Name):
            return node.id in times.spans
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Name) and node.func.id in self.span_functions
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
            return any(self._is_stamp(n, times) or self._is_span(n, times)
                       for side in (node.left, node.right) for n in _nodes(side))
        return False

    def kind(self, value: ast.AST, times: _Times) -> str:
        """"span", "stamp" or "" for an expression."""
        if any(self._is_span(n, times) for n in _nodes(value)):
            return "span"
        if any(self._is_stamp(n, times) for n in _nodes(value)):
            return "stamp"
        return ""

    def times(self, fn: ast.AST) -> _Times:
        """The names of ``fn`` assigned a clock reading or a value computed from one."""
        times = _Times()
        changed = True
        while changed:
            changed = False
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
                    targets, value = [node.target], node.value
                else:
                    continue
                kind = "cpu" if _is_cpu_clock_call(value) else self.kind(value, times)
                if not kind:
                    continue
                names = {"span": times.spans, "stamp": times.stamps, "cpu": times.cpu}[kind]
                for target in targets:
                    elements = target.elts if isinstance(target, ast.Tuple) else [target]
                    for n in elements:
                        if isinstance(n, ast.Name) and n.id not in names:
                            names.add(n.id)
                            changed = True
        return times

    def bounds_wall_time(self, test: ast.expr, times: _Times) -> bool:
        """A comparison in ``test`` orders a span (a duration, a deadline, a reading minus or
        plus something): comparing two readings is an order of events, not a bound."""
        for node in ast.walk(test):
            if not (isinstance(node, ast.Compare)
                    and any(isinstance(op, ORDERING) for op in node.ops)):
                continue
            for side in (node.left, *node.comparators):
                if any(self._is_span(n, times) or _named_span(n, times) for n in _nodes(side)):
                    return True
        return False


def wall_clock_assertions(path: Path, root: Path = REPO) -> Counter[str]:
    """``tests/...py::function`` -> how many of its asserts bound wall time (a nested function's
    count as its enclosing function's)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = _Module(tree)
    rel = path.relative_to(root).as_posix()
    found: Counter[str] = Counter()
    tops = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    tops += [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
             if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
    for fn in tops:
        times = module.times(fn)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assert) and module.bounds_wall_time(node.test, times):
                found[f"{rel}::{fn.name}"] += 1
    return found


def found_in_tests() -> Counter[str]:
    """Every wall-clock bound in ``tests/``, by test."""
    found: Counter[str] = Counter()
    for path in sorted((REPO / "tests").rglob("*.py")):
        found.update(wall_clock_assertions(path))
    return found


def documented() -> Counter[str]:
    """The table under :data:`SECTION`: test id -> the number of bounds it keeps."""
    text = DESIGN.read_text(encoding="utf-8")
    start = text.find(SECTION)
    if start < 0:
        return Counter()
    body = text[start + len(SECTION):]
    end = re.search(r"^#{1,3} ", body, flags=re.M)
    rows = re.findall(r"^\| `([^`]+)` \| (\d+) \|", body[:end.start() if end else None],
                      flags=re.M)
    return Counter({test: int(n) for test, n in rows})


def test_every_wall_clock_assertion_is_listed_with_its_guarantee() -> None:
    found = found_in_tests()
    listed = documented()
    unlisted = {t: n for t, n in found.items() if listed.get(t) != n}
    stale = {t: n for t, n in listed.items() if found.get(t) != n}
    assert not unlisted and not stale, (
        f"wall-clock bounds in tests/ but not in docs/design.md ({SECTION!r}) with that count: "
        f"{unlisted}; listed but not found: {stale}. Use a fake clock, a count or an order; "
        "list only a real server's timing")


def test_the_pattern_finds_each_kind(tmp_path: Path) -> None:
    """Each shape the pattern is for is found, and the waits and CPU-time bounds are not."""
    src = tmp_path / "tests" / "test_shapes.py"
    src.parent.mkdir()
    src.write_text('''
import time
from time import perf_counter as pc

def helper():
    started = time.monotonic()
    return time.monotonic() - started

def test_direct():
    t = time.perf_counter()
    assert time.perf_counter() - t < 0.5

def test_named():
    began = pc()
    elapsed = pc() - began
    assert elapsed < 1.5, "message"

def test_helper():
    took = helper()
    assert took < 4.0

def test_difference(glue):
    at, sent = glue.answer(), glue.sent()
    assert at - sent < 0.01

def test_deadline():
    deadline = time.monotonic() + 5
    while True:
        assert time.monotonic() < deadline

def test_not_these(wait_until, observed):
    started = time.thread_time()
    assert time.thread_time() - started < 1.0
    assert wait_until(lambda: True, 5)
    killed = time.monotonic()
    assert all(t > killed for t in observed)
    assert time.time() - 100 < 1e10
''')
    found = wall_clock_assertions(src, tmp_path)
    assert found == Counter({f"tests/test_shapes.py::{name}": 1 for name in (
        "test_direct", "test_named", "test_helper", "test_difference", "test_deadline")})
