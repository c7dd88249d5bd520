"""The ``serve`` and ``report`` subcommands of ``rollout-sidecar``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sidecar.settings import (
    DEFAULT_BODY_CAP,
    DEFAULT_JOURNAL_PATH,
    DEFAULT_MAX_JSON_DEPTH,
    TOKEN_ENV_VAR,
    ServiceSettings,
    SettingsError,
    load_token,
)

__all__ = ["register"]


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    factor = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        return int(float(number) * factor)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64M, 1048576)") from exc


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="run the sidecar service",
        description="Run the ingest / drain margin / metrics / report service.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=9400, help="port (default 9400)")
    serve.add_argument(
        "--journal",
        type=Path,
        default=DEFAULT_JOURNAL_PATH,
        help=f"SQLite journal path (default {DEFAULT_JOURNAL_PATH})",
    )
    serve.add_argument(
        "--token-file", type=Path, default=None, help=f"file holding the bearer token (else ${TOKEN_ENV_VAR})"
    )
    serve.add_argument(
        "--body-cap", type=_size, default=DEFAULT_BODY_CAP, help="max request body (default 64M)"
    )
    serve.add_argument(
        "--max-json-depth",
        type=int,
        default=DEFAULT_MAX_JSON_DEPTH,
        help=f"max JSON nesting of a request (default {DEFAULT_MAX_JSON_DEPTH})",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=0,
        help="processes digesting rows ahead of the commit (default 0: inline; see benchmarks/ingest.py)",
    )
    serve.add_argument(
        "--retain-ended",
        type=float,
        default=None,
        metavar="SECONDS",
        help="forget runs this long after they ended (default: keep them)",
    )
    serve.add_argument(
        "--keep-rows",
        action="store_true",
        help="also journal every raw row, for audits (default: only what each row contributes; "
        "the dispatcher's rollouts.jsonl holds the rows)",
    )
    serve.add_argument(
        "--snapshot-every-events",
        type=int,
        default=100_000,
        metavar="N",
        help="snapshot the state after N journaled events (default 100000; 0: not by count)",
    )
    serve.add_argument(
        "--snapshot-every-seconds",
        type=float,
        default=300.0,
        metavar="S",
        help="... or S seconds after the last snapshot (default 300; 0: not by time)",
    )
    serve.add_argument(
        "--snapshot-keep",
        type=int,
        default=2,
        metavar="K",
        help="snapshots kept; journal records older than the oldest are compacted (default 2)",
    )
    serve.add_argument("--log-level", default="info", help="log level (default info)")
    serve.add_argument(  # dispatcher_client's follower, run beside the service (issue 5)
        "--follow",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="also follow RUN_DIR's rollout files into this service (run id: the directory's name)",
    )
    serve.set_defaults(handler=_serve)

    report = subparsers.add_parser(
        "report",
        help="write a run's report from a live sidecar",
        description="Write quality_summary.json, rollout_verdicts.jsonl and "
        "report.json of a run into a directory.",
    )
    report.add_argument("--sidecar", required=True, help="base URL, e.g. http://127.0.0.1:9400")
    report.add_argument("--run-id", required=True)
    report.add_argument("--out", type=Path, required=True, help="output directory")
    report.add_argument("--token-file", type=Path, default=None)
    report.set_defaults(handler=_report)


def _serve(args: argparse.Namespace) -> int:
    from sidecar.journal import JournalError
    from sidecar.logging import configure_logging
    from sidecar.server import run_service

    configure_logging(args.log_level)
    try:
        settings = ServiceSettings(
            host=args.host,
            port=args.port,
            journal_path=args.journal,
            token=load_token(args.token_file),
            body_cap=args.body_cap,
            max_json_depth=args.max_json_depth,
            workers=args.workers,
            retain_ended_s=args.retain_ended,
            keep_rows=args.keep_rows,
            snapshot_every_events=args.snapshot_every_events,
            snapshot_every_s=args.snapshot_every_seconds,
            snapshot_keep=args.snapshot_keep,
        )
        follower = _start_follower(args, settings)
        try:
            run_service(settings)
        finally:
            if follower is not None:
                follower.stop()
    except (SettingsError, JournalError) as exc:
        print(f"rollout-sidecar serve: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


def _start_follower(args: argparse.Namespace, settings: ServiceSettings) -> Any:
    """``serve --follow RUN_DIR``: dispatcher_client's follower on a thread, posting to this service."""
    if getattr(args, "follow", None) is None:
        return None
    from dispatcher_client.follow import FollowerThread

    host = "127.0.0.1" if settings.host in ("", "0.0.0.0", "::") else settings.host
    url = f"http://[{host}]:{settings.port}" if ":" in host else f"http://{host}:{settings.port}"
    token = settings.token.get() if settings.token is not None else None
    try:
        thread = FollowerThread(args.follow, url, token=token)
    except ValueError as exc:
        raise SettingsError(f"--follow {str(args.follow)!r}: {exc}") from exc
    thread.start()
    return thread


def _report(args: argparse.Namespace) -> int:
    from sidecar.report import ReportError, fetch_report

    try:
        token = load_token(args.token_file)
        files = fetch_report(args.sidecar, args.run_id, args.out, token=token.get() if token else None)
    except (SettingsError, ReportError) as exc:
        print(f"rollout-sidecar report: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    print(f"Report written: {files.summary}, {files.verdicts}, {files.report}")  # noqa: T201
    return 0
