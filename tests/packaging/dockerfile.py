"""A small Dockerfile reader: enough to check the image against the chart and the descriptor
without a Docker engine (none runs here)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON-array form of CMD/ENTRYPOINT/RUN, or None for the shell form."""
        text = self.args.strip()
        if text.startswith("["):
            value = json.loads(text)
            assert isinstance(value, list)
            return [str(v) for v in value]
        return None


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        """ENV of this stage (key=value pairs; later assignments win)."""
        out: dict[str, str] = {}
        for ins in self.all("ENV"):
            for token in shlex.split(ins.args):
                key, sep, value = token.partition("=")
                assert sep, f"line {ins.line}: ENV in the legacy 'KEY value' form"
                out[key] = value
        return out

    def args(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for ins in self.all("ARG"):
            key, _, value = ins.args.partition("=")
            out[key.strip()] = value.strip().strip('"')
        return out

    def copies(self) -> list[tuple[list[str], str, dict[str, str]]]:
        """(sources, destination, flags) of every COPY."""
        out = []
        for ins in self.all("COPY"):
            tokens = shlex.split(ins.args)
            flags = dict(t[2:].split("=", 1) for t in tokens if t.startswith("--"))
            paths = [t for t in tokens if not t.startswith("--")]
            out.append((paths[:-1], paths[-1], flags))
        return out

    def user(self) -> str | None:
        users = self.all("USER")
        return users[-1].args.strip() if users else None


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r}: {[s.name for s in self.stages]}")

    def lineage(self, name: str) -> list[Stage]:
        """The stage and the stages it is built FROM, nearest first."""
        chain = [self.stage(name)]
        names = {s.name for s in self.stages}
        while chain[-1].base in names:
            chain.append(self.stage(chain[-1].base))
        return chain

    @property
    def default_target(self) -> Stage:
        """The stage `docker build` builds without --target: the last one."""
        return self.stages[-1]

    def image(self, name: str) -> Stage:
        """The stage with the instructions of the stages it is built FROM before its own: what
        the image of that target is made of (its base is the root image)."""
        chain = self.lineage(name)
        instructions = [i for stage in reversed(chain) for i in stage.instructions]
        return Stage(name, chain[-1].base, instructions)

    def effective_env(self, name: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for stage in reversed(self.lineage(name)):
            env.update(stage.env())
        return env

    def effective_user(self, name: str) -> str | None:
        for stage in self.lineage(name):
            if stage.user() is not None:
                return stage.user()
        return None


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Instructions with their continuation lines joined and comment lines dropped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        out.append((start, " ".join(b for b in buf if b)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def parse(path: Path) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, text in logical_lines(path.read_text(encoding="utf-8")):
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args.strip(),
                             flags=re.IGNORECASE)
            assert m, f"line {line}: cannot read FROM {args!r}"
            stages.append(Stage(m.group(2) or str(len(stages)), m.group(1)))
        elif not stages:
            assert keyword == "ARG", f"line {line}: {keyword} before the first FROM"
            key, _, value = args.partition("=")
            global_args[key.strip()] = value.strip().strip('"')
        else:
            stages[-1].instructions.append(Instruction(keyword, args, line))
    return Dockerfile(global_args, stages)
