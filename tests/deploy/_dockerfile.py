"""Just enough Dockerfile parsing for the deploy tests: stages, instructions, exec-form arguments."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Instruction", "Stage", "exec_form", "global_args", "parse_dockerfile"]


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]

    def one(self, keyword: str) -> str:
        found = self.all(keyword)
        assert len(found) == 1, f"expected one {keyword} in stage {self.name or self.base}, got {found}"
        return found[0]


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):  # comment lines inside a continuation are dropped
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "Dockerfile ends inside a line continuation"
    return lines


def global_args(path: Path) -> dict[str, str | None]:
    """The ``ARG``s before the first FROM (usable in FROM lines), with their defaults."""
    found: dict[str, str | None] = {}
    for line in _logical_lines(path.read_text(encoding="utf-8")):
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            break
        assert keyword.upper() == "ARG", f"{keyword} before FROM in {path}"
        name, equals, default = args.strip().partition("=")
        found[name] = default if equals else None
    return found


def parse_dockerfile(path: Path) -> list[Stage]:
    """The build stages of ``path``, each with its instructions after FROM (the ARGs before the
    first FROM are :func:`global_args`)."""
    stages: list[Stage] = []
    for line in _logical_lines(path.read_text(encoding="utf-8")):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if not stages and keyword == "ARG":
            continue
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        else:
            assert stages, f"{keyword} before FROM in {path}"
            stages[-1].instructions.append(Instruction(keyword, args))
    return stages


def exec_form(args: str) -> list[str]:
    """The JSON array of an exec-form instruction; shell form fails the test."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value
