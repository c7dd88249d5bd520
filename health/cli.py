"""``rollout-sidecar health-check``: NeMo Gym's ``gym eval health-check`` as a subcommand.

Importing this module is cheap (``sidecar.cli`` imports it for every subcommand); the
pipeline is imported only when the subcommand runs, and the per-record step only inside
the pool's workers (or serially, with one worker).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .cli_types import whole
from .process_tuning import collector_paused, imported_for_good, own_process

if TYPE_CHECKING:
    from .api import HealthRun

__all__ = ["register", "run"]

_PROG = "rollout-sidecar health-check"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``health-check`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        "health-check",
        help="check a run directory's rollouts and write quality_summary.json + rollout_verdicts.jsonl",
        description=(
            "Run NeMo Gym's rollout health checks over RUN_DIR/rollouts.jsonl (or every shard "
            "--glob matches, as one run) and write quality_summary.json and rollout_verdicts.jsonl "
            "into RUN_DIR."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory holding the rollouts JSONL")
    parser.add_argument(
        "--rollouts-file",
        metavar="PATH",
        default=None,
        help="rollouts JSONL to check (relative paths resolve under RUN_DIR; default rollouts.jsonl)",
    )
    parser.add_argument(
        "--glob",
        dest="globs",
        action="append",
        default=None,
        metavar="PATTERN",
        help=(
            "check every shard file matching PATTERN under RUN_DIR as one run, in sorted path order "
            "(repeatable; *_failures / *_materialized_inputs files are skipped; excludes --rollouts-file; "
            "default: RUN_DIR/rollouts.jsonl alone)"
        ),
    )
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="map over a Ray cluster: 'auto' joins the job's cluster, 'local' starts one, or HOST:PORT "
        "(needs the ray extra: pip install '.[ray]' in the clone; default: the local process pool)",
    )
    parser.add_argument(
        "--workers",
        type=whole(1, 256),
        default=None,
        metavar="N",
        help=(
            "worker processes of the local pool (default: CPU count, at most 8; 1 runs serially; "
            "unused with --ray)"
        ),
    )
    parser.add_argument(
        "--ignore-checks",
        "--ignore",
        dest="ignore_checks",
        action="append",
        default=None,
        metavar="CHECK[,CHECK...]",
        help="comma-separated check IDs to skip (repeatable; default: none)",
    )
    parser.add_argument("--json", action="store_true", help="print the compact summary JSON instead")
    parser.set_defaults(handler=run)


def _error(message: str) -> int:
    sys.stderr.write(f"{_PROG}: error: {message}\n")
    return 2


def _refuse_run_dir(run_dir: str, rollouts_file: str | None) -> str | None:
    """The message for a RUN_DIR or rollouts file that cannot be checked, naming the fix; else None."""
    directory = Path(run_dir)
    if directory.is_file():
        fix = f"rollout-sidecar health-check {directory.parent}"
        if directory.name != "rollouts.jsonl":
            fix += f" --rollouts-file {directory.name}"
        return f"RUN_DIR is a file, not a directory: {run_dir} (pass its run directory: {fix})"
    if not directory.is_dir():
        return f"Run directory not found: {run_dir} (pass the directory that holds rollouts.jsonl)"
    selected = Path(rollouts_file) if rollouts_file is not None else Path("rollouts.jsonl")
    path = selected if selected.is_absolute() else directory / selected
    if not path.is_file():
        how = (
            "relative to RUN_DIR"
            if rollouts_file is not None
            else "the default; --rollouts-file names another"
        )
        return f"Rollout JSONL not found: {path} ({how})"
    return None


def run(args: argparse.Namespace) -> int:
    """Handler: check the run directory, print the report; 2 on a bad argument or missing file.
    The entry point owns the process's collector settings (:mod:`health.process_tuning`)."""
    with own_process("health-check"):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    with imported_for_good():
        from . import api, explain, progress, shards  # noqa: F401  (the pipeline, imported once)

        if args.ray is None:  # the per-record step runs here or in workers forked from here
            from . import digest  # noqa: F401

    ignored: str | None = ",".join(args.ignore_checks) if args.ignore_checks else None
    if args.globs and args.rollouts_file is not None:
        return _error("--glob and --rollouts-file are mutually exclusive")
    if not args.globs:
        refused = _refuse_run_dir(args.run_dir, args.rollouts_file)
        if refused is not None:
            return _error(refused)
    if args.ray is not None:
        from .ray_map import ray_missing_message

        missing = ray_missing_message()
        if missing is not None:
            return _error(missing)
    # passes would re-scan every acyclic digest and free nothing; Ray's client threads need them
    with collector_paused(args.ray is None, freeze_after=True):
        try:
            result = _check(args, ignored)
        except (FileNotFoundError, ValueError, ConnectionError) as exc:
            return _error(str(exc))
        except KeyboardInterrupt:
            sys.stderr.write(f"{_PROG}: interrupted\n")
            return 130
        api.emit_run_output(result, args.json)
        reason = explain.explain_unobserved(result.summary)
    if reason is not None:  # stderr: stdout stays byte-identical to NeMo Gym's
        sys.stderr.write(f"{_PROG}: {reason}\n")
    return 0


def _check(args: argparse.Namespace, ignored: str | None) -> HealthRun:
    """Check the rollouts the arguments name and write the reports."""
    from .api import check_rollout_files, resolve_rollout_path
    from .progress import terminal_progress
    from .shards import resolve_shard_paths

    if args.globs:
        run_dir, paths = resolve_shard_paths(args.run_dir, args.globs)
    else:
        run_dir, path = resolve_rollout_path(args.run_dir, args.rollouts_file)
        paths = [path]
    total = sum(os.path.getsize(path) for path in paths)
    with terminal_progress(total, sys.stderr) as progress:
        return check_rollout_files(paths, run_dir, args.workers, ignored, progress, ray_address=args.ray)
