"""A run's shard files: ``--glob`` patterns resolved the way ``gym eval aggregate`` takes its glob.

Rollouts files are read as one input list in sorted path order (so position-dependent identities
are ``run_health_checks(sorted(paths))``'s); ``_failures`` / ``_materialized_inputs`` files and a
previous verdicts report are skipped, as the aggregator skips them.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["MAX_GLOB_FILES", "MAX_GLOB_PATTERNS", "resolve_shard_paths"]

MAX_GLOB_PATTERNS = 256
"""More ``--glob`` options than this is refused (a shell expansion passed by mistake)."""
MAX_GLOB_FILES = 1_000_000
"""More matched files than this is refused; a run of 10^7 rollouts has far fewer shards."""
_MAX_PATTERN_CHARS = 4096
_SIDE_FILE_STEMS = ("_failures", "_materialized_inputs")
_REPORT_NAME = "rollout_verdicts.jsonl"


def _is_rollouts_file(path: Path, run_dir: Path) -> bool:
    if path.stem.endswith(_SIDE_FILE_STEMS):
        return False
    if path.name == _REPORT_NAME and path.parent == run_dir:
        return False
    return path.is_file()


def resolve_shard_paths(run_dir: str | os.PathLike[str], patterns: Sequence[str]) -> tuple[Path, list[Path]]:
    """``(run_dir, files)``: every rollouts file any pattern (relative to ``run_dir``) matches,
    sorted, once; ``FileNotFoundError`` or ``ValueError`` naming what is wrong otherwise."""
    directory = Path(run_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"Run directory not found: {directory}")
    if not patterns:
        raise ValueError("at least one --glob pattern is required")
    if len(patterns) > MAX_GLOB_PATTERNS:
        raise ValueError(f"{len(patterns)} --glob patterns given; at most {MAX_GLOB_PATTERNS} are accepted")
    found: dict[str, Path] = {}
    for pattern in patterns:
        if not pattern.strip():
            raise ValueError("--glob pattern is empty")
        if len(pattern) > _MAX_PATTERN_CHARS:
            raise ValueError(f"--glob pattern is {len(pattern)} characters; at most {_MAX_PATTERN_CHARS}")
        matched = 0
        for match in glob.iglob(pattern, root_dir=directory, recursive=True):
            path = directory / match
            if not _is_rollouts_file(path, directory):
                continue
            matched += 1
            found.setdefault(str(path), path)
            if len(found) > MAX_GLOB_FILES:
                raise ValueError(f"--glob matched more than {MAX_GLOB_FILES} files under {directory}")
        if not matched:
            raise FileNotFoundError(f"--glob {pattern!r} matched no rollouts file under {directory}")
    return directory, [found[key] for key in sorted(found)]
