"""``.ci/run`` is shared by every machine that runs CI: it stops only what it started."""

from __future__ import annotations

import re
from pathlib import Path

CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"


def _commands() -> list[str]:
    """The script's lines without comments (a mention in a comment runs nothing)."""
    return [line.split("#", 1)[0] for line in CI_RUN.read_text(encoding="utf-8").splitlines()]


def test_no_process_is_killed_by_name() -> None:
    by_name = [line for line in _commands() if re.search(r"\b(pkill|killall)\b", line)]
    assert by_name == []


def test_the_packaged_prometheus_is_stopped_through_its_service() -> None:
    assert any(re.search(r"\bservice prometheus stop\b", line) for line in _commands())
