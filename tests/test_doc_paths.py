"""The maps name real files: every backticked repository path in ARCHITECTURE.md and the
benchmark READMEs exists (or arrives with a branch being merged, listed below)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Paths a doc may name before the branch that brings them is merged (none pending now).
PENDING_PATHS: dict[str, str] = {}
#: Folders the benchmarks make when they run (git-ignored).
MADE_BY_RUNS = {"benchmarks/out"}


def _backticked_repo_paths(text: str) -> set[str]:
    """Backticked words that name a file or folder of this repository: their first part is an
    entry of the repo's root (``health/walk.py``, ``docs/``, ``CHANGELOG.md``). Templates
    (``<seq>``, ``{run_id}``, ``*``) and anything with a space are not paths."""
    roots = {entry.name for entry in REPO.iterdir() if not entry.name.startswith(".")} | {".ci"}
    paths = set()
    for word in re.findall(r"`([^`\s]+)`", text):
        if any(mark in word for mark in "<>{}*"):
            continue
        path = word.rstrip("/")
        nested = "/" in path and path.split("/")[0] in roots
        at_root = path in roots and (word.endswith("/") or "." in path)  # `docs/`, `setup.py`
        if nested or at_root:
            paths.add(path)
    return paths


@pytest.mark.parametrize("doc", ["ARCHITECTURE.md", "benchmarks/README.md"])
def test_every_path_the_maps_name_exists(doc: str) -> None:
    paths = _backticked_repo_paths((REPO / doc).read_text(encoding="utf-8"))
    assert len(paths) > (50 if doc == "ARCHITECTURE.md" else 3), sorted(paths)  # it does name paths
    allowed = {*PENDING_PATHS, *MADE_BY_RUNS}
    missing = sorted(path for path in paths if not (REPO / path).exists() and path not in allowed)
    assert missing == [], f"{doc} names paths that do not exist: {missing}"


def test_the_path_finder_sees_paths_and_skips_templates() -> None:
    text = "`health/walk.py` `docs/` `README.md` `J.snapshots/snapshot-<seq>.bin` `/v1/runs/{run_id}` `x y`"
    assert _backticked_repo_paths(text) == {"health/walk.py", "docs", "README.md"}
