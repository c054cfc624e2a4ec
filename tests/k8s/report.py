"""The e2e-k8s report: each step timed with its checks; the run passes only when every step
finished and every check held."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.report import Check


class StepFailed(Exception):
    def __init__(self, step: str, error: BaseException) -> None:
        super().__init__(f"{step}: {type(error).__name__}: {error}")
        self.step = step
        self.error = error


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    ok: bool = True
    error: str = ""
    checks: list[Check] = field(default_factory=list)


@dataclass
class Report:
    steps: list[Step] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        st = Step(name)
        self.steps.append(st)
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        try:
            yield st
        except Exception as exc:
            st.ok, st.error = False, f"{type(exc).__name__}: {exc}"
            raise StepFailed(name, exc) from exc
        except BaseException:  # Ctrl-C, SIGTERM: the step did not finish
            st.ok, st.error = False, "interrupted"
            raise
        finally:
            st.seconds = round(time.monotonic() - t0, 1)
        for c in st.checks:
            print(f"   {'ok ' if c.ok else 'FAIL'} {c.name}" + (f": {c.detail}" if c.detail
                                                              else ""), flush=True)
        print(f"   ({st.seconds} s)", flush=True)

    @property
    def ok(self) -> bool:
        return all(s.ok and all(c.ok for c in s.checks) for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "facts": self.facts,
                "steps": [{"name": s.name, "seconds": s.seconds, "ok": s.ok, "error": s.error,
                           "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail}
                                      for c in s.checks]} for s in self.steps]}

    def to_text(self) -> str:
        lines = []
        for s in self.steps:
            mark = "ok  " if s.ok and all(c.ok for c in s.checks) else "FAIL"
            lines.append(f"{mark} {s.seconds:7.1f} s  {s.name}")
            if s.error:
                lines.append(f"             error: {s.error}")
            for c in s.checks:
                lines.append(f"             {'ok ' if c.ok else 'FAIL'} {c.name}"
                             + (f": {c.detail}" if c.detail else ""))
        lines.append(f"facts: {json.dumps(self.facts)}")
        lines.append("e2e-k8s: " + ("PASS" if self.ok else "FAIL"))
        return "\n".join(lines)
