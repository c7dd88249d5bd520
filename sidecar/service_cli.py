"""The ``serve`` and ``report`` subcommands of ``rollout-sidecar``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import structlog

from sidecar.inflight import InflightRules
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
        "--token-file",
        type=Path,
        default=None,
        help=f"file holding the bearer token (default: ${TOKEN_ENV_VAR}, else no token: loopback only)",
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
        help="deprecated, accepted and ignored (default 0): rows are digested inline from their bytes, "
        "which a worker pool only slowed down (benchmarks/README.md)",
    )
    serve.add_argument(
        "--retain-ended",
        type=float,
        default=None,
        metavar="SECONDS",
        help="forget runs this long after they ended (default: keep them)",
    )
    serve.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="also push metrics over OTLP/HTTP to URL/v1/metrics (e.g. http://127.0.0.1:4318; "
        "needs rollout-sidecar[otel]; on by default with NEMO_GYM_OTEL_ENABLED=1 and "
        "OTEL_EXPORTER_OTLP_ENDPOINT; interval: OTEL_METRIC_EXPORT_INTERVAL ms, default 15000)",
    )
    rules = InflightRules()
    serve.add_argument(
        "--straggler-factor",
        type=float,
        default=rules.straggler_factor,
        help="in-flight rollouts older than this many times the run's p95 task duration straggle "
        f"(default {rules.straggler_factor:g}; the run's task_timeout_s caps the threshold)",
    )
    serve.add_argument(
        "--straggler-min-samples",
        type=int,
        default=rules.min_samples,
        help=f"latency samples before the p95 rule applies (default {rules.min_samples})",
    )
    serve.add_argument(
        "--stall-after",
        type=float,
        default=rules.stall_after_s,
        metavar="SECONDS",
        help=f"a heartbeating rollout stalls after this long without one (default {rules.stall_after_s:g})",
    )
    serve.add_argument(
        "--inflight-interval",
        type=float,
        default=rules.eval_interval_s,
        metavar="SECONDS",
        help=f"seconds between straggler/stall evaluations (default {rules.eval_interval_s:g})",
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
    _add_limits(serve)
    serve.add_argument("--log-level", default="info", help="log level (default info)")
    serve.add_argument(  # dispatcher_client's follower, run beside the service (issue 5)
        "--follow",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="also follow RUN_DIR's rollout files into this service (run id: the directory's name; "
        "default: follow nothing)",
    )
    serve.set_defaults(handler=_serve)

    report = subparsers.add_parser(
        "report",
        help="write a run's report from a live sidecar",
        description="Write quality_summary.json, rollout_verdicts.jsonl and "
        "report.json of a run into a directory.",
    )
    report.add_argument("--sidecar", required=True, help="base URL, e.g. http://127.0.0.1:9400 (required)")
    report.add_argument("--run-id", required=True, help="the run's id (required; GET /v1/runs lists them)")
    report.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory, created if missing (default none; --out, --html or both required)",
    )
    report.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the run's page as one self-contained HTML file that opens offline (default none)",
    )
    report.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"bearer token file (default: ${TOKEN_ENV_VAR}, else none; reads need no token)",
    )
    report.set_defaults(handler=_report)


def _add_limits(serve: argparse.ArgumentParser) -> None:
    """Caps and timeouts: what one client may cost the service (see docs/reliability.md)."""
    d = ServiceSettings()
    limits = serve.add_argument_group("limits")
    limits.add_argument(
        "--inputs-root",
        type=Path,
        default=None,
        metavar="DIR",
        help="read run_started.materialized_inputs only from files under DIR (default: any path whose "
        "name ends in _materialized_inputs.jsonl)",
    )
    limits.add_argument(
        "--max-input-line",
        type=_size,
        default=d.max_input_line_bytes,
        metavar="SIZE",
        help="longest materialized-inputs line read (default 16M)",
    )
    limits.add_argument(
        "--max-plan-tasks",
        type=int,
        default=d.max_plan_tasks,
        help=f"tasks per plan (default {d.max_plan_tasks})",
    )
    limits.add_argument(
        "--max-runs", type=int, default=d.max_runs, help=f"runs held at once (default {d.max_runs})"
    )
    limits.add_argument(
        "--max-identity-chars",
        type=int,
        default=d.max_identity_chars,
        help=f"longest string task_index / rollout_index (default {d.max_identity_chars})",
    )
    limits.add_argument(
        "--max-body-bytes-in-flight",
        type=_size,
        default=d.max_body_bytes_in_flight,
        metavar="SIZE",
        help="request body bytes held at once over all requests (default 256M)",
    )
    limits.add_argument(
        "--header-timeout",
        type=float,
        default=d.header_timeout_s,
        metavar="SECONDS",
        help=f"close a connection without complete headers after this long (default {d.header_timeout_s:g})",
    )
    limits.add_argument(
        "--body-timeout",
        type=float,
        default=d.body_timeout_s,
        metavar="SECONDS",
        help=f"close a connection whose request body stalls this long (default {d.body_timeout_s:g})",
    )
    limits.add_argument(
        "--max-connections-per-peer",
        type=int,
        default=d.max_connections_per_peer,
        help=f"open connections per client address (default {d.max_connections_per_peer})",
    )
    limits.add_argument(
        "--metrics-retain-ended",
        type=float,
        default=d.metrics_retain_ended_s,
        metavar="SECONDS",
        help=f"ended runs leave /metrics after this long (default {d.metrics_retain_ended_s:g})",
    )


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    root = args.inputs_root
    if root is not None and not root.is_dir():
        raise SettingsError(f"--inputs-root {str(root)!r} is not a directory")
    return {
        "inputs_root": root,
        "max_input_line_bytes": args.max_input_line,
        "max_plan_tasks": args.max_plan_tasks,
        "max_runs": args.max_runs,
        "max_identity_chars": args.max_identity_chars,
        "max_body_bytes_in_flight": max(args.max_body_bytes_in_flight, args.body_cap),
        "header_timeout_s": args.header_timeout,
        "body_timeout_s": args.body_timeout,
        "max_connections_per_peer": args.max_connections_per_peer,
        "metrics_retain_ended_s": args.metrics_retain_ended,
    }


def _serve(args: argparse.Namespace) -> int:
    from sidecar.journal import JournalError
    from sidecar.logging import configure_logging
    from sidecar.server import run_service

    configure_logging(args.log_level)
    try:
        try:
            inflight = InflightRules(
                straggler_factor=args.straggler_factor,
                min_samples=args.straggler_min_samples,
                stall_after_s=args.stall_after,
                eval_interval_s=args.inflight_interval,
            )
            endpoint, interval_s = _otlp(args.otlp_endpoint)
        except ValueError as exc:  # InflightRules / OtlpConfigError name the value
            raise SettingsError(str(exc)) from exc
        settings = ServiceSettings(
            host=args.host,
            port=args.port,
            journal_path=args.journal,
            token=load_token(args.token_file),
            body_cap=args.body_cap,
            max_json_depth=args.max_json_depth,
            workers=args.workers,
            retain_ended_s=args.retain_ended,
            inflight=inflight,
            otlp_endpoint=endpoint,
            otlp_interval_s=interval_s,
            **_limits(args),
            keep_rows=args.keep_rows,
            snapshot_every_events=args.snapshot_every_events,
            snapshot_every_s=args.snapshot_every_seconds,
            snapshot_keep=args.snapshot_keep,
        )
        follower = _start_follower(args, settings)
        try:
            run_service(settings, follower=follower)
        finally:
            if follower is not None:
                follower.stop()
    except (SettingsError, JournalError) as exc:
        print(f"rollout-sidecar serve: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


def _otlp(cli_endpoint: str | None) -> tuple[str | None, float]:
    """The OTLP metrics URL and interval; ``--otlp-endpoint`` without the ``otel`` extra is an error,
    the NeMo Gym environment switch without it only a warning (the job must still run)."""
    from sidecar.otlp import otlp_available, resolve_endpoint, resolve_interval

    endpoint = resolve_endpoint(cli_endpoint)
    if endpoint is None:
        return None, resolve_interval()
    if not otlp_available():
        message = "OTLP export needs the otel extra: pip install 'rollout-sidecar[otel]'"
        if cli_endpoint:
            raise SettingsError(f"--otlp-endpoint: {message}")
        structlog.get_logger("sidecar.otlp").warning("otlp push off", reason=message, endpoint=endpoint)
        return None, resolve_interval()
    return endpoint, resolve_interval()


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
    from sidecar.web.saved import HtmlError, fetch_page, write_html

    if args.out is None and args.html is None:
        print("rollout-sidecar report: pass --out DIR, --html FILE or both", file=sys.stderr)  # noqa: T201
        return 2
    try:
        token = load_token(args.token_file)
        secret = token.get() if token else None
        if args.out is not None:
            files = fetch_report(args.sidecar, args.run_id, args.out, token=secret)
            print(f"Report written: {files.summary}, {files.verdicts}, {files.report}")  # noqa: T201
        if args.html is not None:
            page, timeline = fetch_page(args.sidecar, args.run_id, token=secret)
            print(f"Page written: {write_html(args.html, page, timeline)}")  # noqa: T201
    except (SettingsError, ReportError, HtmlError) as exc:
        print(f"rollout-sidecar report: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    return 0
