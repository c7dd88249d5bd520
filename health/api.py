"""The batch entry points of NeMo Gym's rollout health check (CLI behaviour in docs/report.md).

NeMo Gym's signatures, path resolution, messages and output, except that an identity NeMo Gym
cannot coerce is a ``record_unreadable`` finding instead of an abort. :func:`check_rollout_files`
is the same run without one ``RolloutDigest`` object per rollout (the CLI's).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import orjson

from .ignored import normalize_ignored_checks
from .reduce import HealthReducer
from .report import render_summary, write_reports
from .runner import ProgressCallback, default_workers, map_into_reducer

if TYPE_CHECKING:
    from .types import HealthCheckResult

__all__ = [
    "HealthRun",
    "check_rollout_files",
    "emit_run_output",
    "format_health_report",
    "health_check_run_dir",
    "resolve_rollout_path",
    "run_health_checks",
    "summary_report",
]

PathArg = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class HealthRun:
    """A finished batch run: the summary, where the reports went, and the reducer behind them."""

    summary: dict[str, Any]
    summary_path: Path
    verdicts_path: Path
    reducer: HealthReducer

    def result(self) -> HealthCheckResult:
        """The NeMo-Gym-shaped result, with every post-duplicate digest in input order."""
        from .types import HealthCheckResult

        return HealthCheckResult(
            summary=self.summary,
            rollouts=self.reducer.digests(),
            summary_path=self.summary_path,
            verdicts_path=self.verdicts_path,
        )


def _as_paths(rollout_paths: PathArg | Iterable[PathArg]) -> list[Path]:
    if isinstance(rollout_paths, PurePath):
        return [Path(rollout_paths)]
    # Like NeMo Gym, anything else is iterated: a plain string yields one path per character.
    return [Path(path) for path in rollout_paths]  # type: ignore[union-attr]


def check_rollout_files(
    rollout_paths: PathArg | Iterable[PathArg],
    output_dir: PathArg | None = None,
    workers: int | None = None,
    ignored_checks: str | Iterable[str] | None = (),
    progress: ProgressCallback | None = None,
    *,
    ray_address: str | None = None,
) -> HealthRun:
    """Run the health check over one or more JSONL files and write both reports.

    With ``ray_address`` the map runs on a Ray cluster (:func:`health.ray_map.map_on_ray`)
    instead of the local process pool; the reports are the same bytes.
    """
    ignored = frozenset(normalize_ignored_checks(ignored_checks))
    paths = _as_paths(rollout_paths)
    if not paths:
        raise ValueError("at least one rollout JSONL path is required")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"Rollout JSONL not found: {path}")
        os.close(os.open(path, os.O_RDONLY))
    worker_count = default_workers() if workers is None else workers
    if worker_count < 1:
        raise ValueError("workers must be at least 1")
    names = [str(path) for path in paths]
    if ray_address is not None:
        from .ray_map import map_on_ray

        reducer = map_on_ray(names, address=ray_address, ignored_checks=ignored, progress=progress)
    else:
        reducer = map_into_reducer(names, workers=worker_count, ignored_checks=ignored, progress=progress)
    out_dir = paths[0].parent if output_dir is None else Path(output_dir)
    summary = reducer.summary()
    rows = reducer.iter_verdict_lines()
    summary_path, verdicts_path = write_reports(out_dir, render_summary(summary), rows)
    return HealthRun(summary, summary_path, verdicts_path, reducer)


def run_health_checks(
    rollout_paths: PathArg | Iterable[PathArg],
    output_dir: PathArg | None = None,
    workers: int | None = None,
    ignored_checks: str | Iterable[str] | None = (),
) -> HealthCheckResult:
    """NeMo Gym's ``run_health_checks``: reports go to ``output_dir`` or beside the first input."""
    return check_rollout_files(rollout_paths, output_dir, workers, ignored_checks).result()


def resolve_rollout_path(run_dir: PathArg, rollout_file: PathArg | None = None) -> tuple[Path, Path]:
    """``(run_dir, rollouts file)``; relative files resolve under the run directory."""
    directory = Path(run_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"Run directory not found: {directory}")
    selected = Path(rollout_file) if rollout_file is not None else Path("rollouts.jsonl")
    path = selected if selected.is_absolute() else directory / selected
    if not path.is_file():
        raise FileNotFoundError(f"Rollout JSONL not found: {path}")
    return directory, path


def summary_report(summary: dict[str, Any], summary_path: PathArg) -> str:
    """The two report lines for ``summary`` (the verdict counts, then the summary path), without a
    trailing newline."""
    run = summary["run"]
    verdicts = run["verdicts"]
    healthy, unhealthy, unobserved = verdicts["healthy"], verdicts["unhealthy"], verdicts["unobserved"]
    ignored = run["ignored_checks"]
    suffix = f" (ignored: {', '.join(ignored)})" if ignored else ""
    return (
        f"Rollout health: {healthy + unhealthy + unobserved} checked, {healthy} healthy, "
        f"{unhealthy} unhealthy, {unobserved} unobserved{suffix}\n"
        f"Quality summary: {summary_path}"
    )


def format_health_report(result: HealthCheckResult) -> str:
    """NeMo Gym's one-line-plus-path report for ``result``."""
    return summary_report(result.summary, result.summary_path)


def emit_run_output(run: HealthRun, json_output: bool, stream: Any = None) -> None:
    """Print what ``health_check_run_dir`` prints: the two report lines, or the summary as JSON."""
    out = sys.stdout if stream is None else stream
    if json_output:
        data = orjson.dumps(run.summary, option=orjson.OPT_APPEND_NEWLINE)
    else:
        data = (summary_report(run.summary, run.summary_path) + "\n").encode("utf-8")
    out.flush()
    binary = getattr(out, "buffer", None)
    if binary is not None:  # UTF-8 whatever the locale, like orjson's output
        binary.write(data)
        binary.flush()
    else:
        out.write(data.decode("utf-8"))
        out.flush()


def health_check_run_dir(
    run_dir: PathArg,
    rollout_file: PathArg | None = None,
    workers: int | None = None,
    ignored_checks: str | Iterable[str] | None = (),
    json_output: bool = False,
) -> HealthCheckResult:
    """NeMo Gym's ``health_check_run_dir``: check a run directory in place and print the report."""
    directory, path = resolve_rollout_path(run_dir, rollout_file)
    run = check_rollout_files(path, directory, workers, ignored_checks)
    emit_run_output(run, json_output)
    return run.result()
