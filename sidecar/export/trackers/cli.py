"""The tracker flags of ``serve`` and ``health-check`` (``health`` never imports ``sidecar``, so
``health-check``'s handler is wrapped here). No tracker library is imported here.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from health.cli_types import seconds
from sidecar.export.trackers import (
    DEFAULT_INTERVAL_S,
    MLFLOW_RUN_ID_PATTERN,
    WANDB_RUN_PATH_PATTERN,
    RunTarget,
    TrackerName,
    TrackerSettings,
    tracker_available,
)

_HEALTH_PROG = "rollout-sidecar health-check"


#: ``serve``'s tracker flags: (flag, settings field, metavar, help); named like NeMo Gym's settings.
_SERVE_FLAGS = (
    ("--mlflow-tracking-uri", "mlflow_tracking_uri", "URI",
     "log into this MLflow tracking server (needs the mlflow extra: pip install '.[mlflow]' in the clone; "
     "default off; MLFLOW_TRACKING_URI is used with --mlflow-experiment alone)"),
    ("--mlflow-experiment", "mlflow_experiment_name", "NAME",
     "experiment of the runs the sidecar creates (default rollout-sidecar)"),
    ("--mlflow-run-name", "mlflow_run_name", "NAME",
     "name of the runs the sidecar creates (default: the sidecar run id)"),
    ("--wandb-project", "wandb_project", "NAME",
     "log into this W&B project (needs the wandb extra: pip install '.[wandb]' in the clone; default off; "
     "WANDB_API_KEY, WANDB_MODE, WANDB_DIR are read by wandb)"),
    ("--wandb-entity", "wandb_entity", "E", "W&B entity (default: wandb's)"),
    ("--wandb-name", "wandb_name", "NAME",
     "name of the W&B runs the sidecar creates (default: the sidecar run id)"),
)  # fmt: skip


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """``serve``'s MLflow and W&B flags."""
    group = serve.add_argument_group(
        "experiment trackers", "log each run's numbers into MLflow and/or W&B (docs/operations.md)"
    )
    for flag, dest, metavar, help_text in _SERVE_FLAGS:
        group.add_argument(flag, dest=dest, metavar=metavar, default=None, help=help_text)
    group.add_argument(
        "--tracker-interval",
        type=seconds(86400, low=0.05, open_low=False),
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"seconds between two live steps (default {DEFAULT_INTERVAL_S:g})",
    )
    group.add_argument("--tracker-timeout", type=seconds(600, low=0.05, open_low=False), default=10.0,
                       metavar="SECONDS", help="longest one MLflow HTTP call or W&B wait may take before it "
                       "fails and is counted (default 10; an answer over 4 MiB fails at once)")  # fmt: skip


def _missing(name: TrackerName, flag: str) -> str:
    return f"{flag} needs the {name} extra: pip install '.[{name}]' in the rollout-sidecar clone"


def tracker_settings(args: argparse.Namespace) -> TrackerSettings | None:
    """The tracker settings of ``serve``'s arguments; ``ValueError`` (one line) without the extra."""
    settings = TrackerSettings(
        **{dest: getattr(args, dest) for _, dest, _, _ in _SERVE_FLAGS},
        interval_s=args.tracker_interval,
        timeout_s=args.tracker_timeout,
    )
    flags = {"mlflow": "--mlflow-tracking-uri", "wandb": "--wandb-project"}
    for name in settings.enabled:
        if not tracker_available(name):
            raise ValueError(_missing(name, flags[name]))
    return settings if settings.enabled else None


def add_health_check_flags(parser: argparse.ArgumentParser) -> None:
    """``health-check``'s tracker flags; its handler wrapped to log the report into the given runs."""
    group = parser.add_argument_group("experiment trackers", "log the report into an existing run")
    group.add_argument(
        "--mlflow-run-id",
        metavar="ID",
        default=None,
        help="MLflow run to log into (default: $MLFLOW_RUN_ID; tracking server: "
        "$MLFLOW_TRACKING_URI; needs the mlflow extra: pip install '.[mlflow]' in the clone)",
    )
    group.add_argument("--wandb-run-path", metavar="PATH", default=None,
                       help="W&B run [entity/][project/]id to log into (default: $WANDB_RUN_ID with "
                       "$WANDB_PROJECT / $WANDB_ENTITY; needs the wandb extra: pip install '.[wandb]' "
                       "in the clone)")  # fmt: skip
    handler: Callable[[argparse.Namespace], int] = parser.get_default("handler")
    parser.set_defaults(handler=lambda args: _health_check(args, handler))


def _targets(args: argparse.Namespace) -> dict[TrackerName, str]:
    targets: dict[TrackerName, str] = {}
    mlflow_run = args.mlflow_run_id or os.environ.get("MLFLOW_RUN_ID", "").strip()
    if mlflow_run:
        targets["mlflow"] = mlflow_run
    wandb_run = args.wandb_run_path
    if not wandb_run and os.environ.get("WANDB_RUN_ID", "").strip():
        parts = (
            os.environ.get(name, "").strip() for name in ("WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_ID")
        )
        wandb_run = "/".join(part for part in parts if part)
    if wandb_run:
        targets["wandb"] = wandb_run
    return targets


def _health_check(args: argparse.Namespace, handler: Callable[[argparse.Namespace], int]) -> int:
    targets = _targets(args)
    patterns = {"mlflow": (MLFLOW_RUN_ID_PATTERN, "--mlflow-run-id"),
                "wandb": (WANDB_RUN_PATH_PATTERN, "--wandb-run-path")}  # fmt: skip
    for name, ref in targets.items():
        pattern, flag = patterns[name]
        if not re.fullmatch(pattern, ref):
            sys.stderr.write(f"{_HEALTH_PROG}: error: {flag} {ref[:80]!r} is not a run id ({pattern})\n")
            return 2
        if not tracker_available(name):
            sys.stderr.write(f"{_HEALTH_PROG}: error: {_missing(name, flag)}\n")
            return 2
    code = handler(args)
    if code != 0 or not targets:
        return code
    html: Path | None = getattr(args, "html", None)
    failed = log_run_dir(Path(args.run_dir), targets, html=html)
    for line in failed:
        sys.stderr.write(f"{_HEALTH_PROG}: report written, but {line}\n")
    return 1 if failed else 0


def log_run_dir(run_dir: Path, targets: dict[TrackerName, str], *, html: Path | None = None) -> list[str]:
    """Log ``run_dir``'s report (and ``html`` page) into each target; one message per failure."""
    import orjson

    from sidecar.export.trackers.backends import make_backend
    from sidecar.export.trackers.session import ExportStore, TrackerSession, final_package

    directory = run_dir.parent if run_dir.is_file() else run_dir
    files = {
        name: (directory / name).read_bytes() for name in ("quality_summary.json", "rollout_verdicts.jsonl")
    }
    if html is not None and html.is_file():
        files["report.html"] = html.read_bytes()
    report = {"run_id": directory.name, "quality_summary": orjson.loads(files["quality_summary.json"])}
    failed: list[str] = []
    for name, ref in targets.items():
        try:
            session = TrackerSession(make_backend(name, TrackerSettings()), ExportStore(None))
            try:
                session.log_final(
                    RunTarget(directory.name, given=ref), final_package({}, report, files, name)
                )
            finally:
                session.close()
        except Exception as exc:  # each tracker on its own: one failing leaves the other logged
            failed.append(f"logging into {name} run {ref!r} failed: {type(exc).__name__}: {exc}"[:500])
    return failed
