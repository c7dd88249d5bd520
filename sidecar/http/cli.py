"""The ``serve`` and ``report`` subcommands of ``rollout-sidecar``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import structlog

from health.cli_types import number, seconds, sidecar_url, size, whole
from sidecar.export.trackers.cli import add_serve_flags, tracker_settings
from sidecar.http.settings import (
    DEFAULT_BODY_CAP,
    DEFAULT_JOURNAL_PATH,
    DEFAULT_MAX_JSON_DEPTH,
    READ_TOKEN_ENV_VAR,
    TOKEN_ENV_VAR,
    ServiceSettings,
    SettingsError,
    load_token,
)
from sidecar.state.inflight import InflightRules

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="run the sidecar service",
        description="Run the ingest / drain margin / metrics / report service.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=whole(0, 65535), default=9400, help="port (default 9400)")
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
        "--read-token-file",
        type=Path,
        default=None,
        help=f"file holding the token reads need (run list, reports, pages, metrics; the ingest token "
        f"works too; /healthz and /readyz stay open) (default: ${READ_TOKEN_ENV_VAR}, else reads are open)",
    )
    serve.add_argument(
        "--open-metrics",
        action="store_true",
        help="with --read-token-file, leave /metrics readable without a token (default: off)",
    )
    serve.add_argument(
        "--body-cap",
        type=size(1024, 16 << 30),
        default=DEFAULT_BODY_CAP,
        help="max request body (default 64M)",
    )
    serve.add_argument(
        "--max-json-depth",
        type=whole(8, 1024),
        default=DEFAULT_MAX_JSON_DEPTH,
        help=f"max JSON nesting of a request (default {DEFAULT_MAX_JSON_DEPTH})",
    )
    serve.add_argument(
        "--retain-ended",
        type=seconds(1e9, open_low=False),
        default=None,
        metavar="SECONDS",
        help="forget runs this long after they ended (default: keep them)",
    )
    serve.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="also push metrics over OTLP/HTTP (http/protobuf) to URL/v1/metrics (e.g. "
        "http://127.0.0.1:4318; needs the otel extra: pip install '.[otel]' in the clone). On without "
        "the flag with NEMO_GYM_OTEL_ENABLED=1 (as in a gym eval submit job), to "
        "OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT; interval OTEL_METRIC_EXPORT_INTERVAL ms (default "
        "15000), total deadline per push OTEL_EXPORTER_OTLP_TIMEOUT s (default 10); see docs/operations.md",
    )
    rules = InflightRules()
    serve.add_argument(
        "--straggler-factor",
        type=number(1e6),
        default=rules.straggler_factor,
        help="in-flight rollouts older than this many times the run's p95 task duration straggle "
        f"(default {rules.straggler_factor:g}; the run's task_timeout_s caps the threshold)",
    )
    serve.add_argument(
        "--straggler-min-samples",
        type=whole(1, 10**9),
        default=rules.min_samples,
        help=f"latency samples before the p95 rule applies (default {rules.min_samples})",
    )
    serve.add_argument(
        "--stall-after",
        type=seconds(1e7),
        default=rules.stall_after_s,
        metavar="SECONDS",
        help=f"a heartbeating rollout stalls after this long without one (default {rules.stall_after_s:g})",
    )
    serve.add_argument(
        "--inflight-interval",
        type=seconds(86400),
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
        type=whole(0, 10**12),
        default=100_000,
        metavar="N",
        help="snapshot the state after N journaled events (default 100000; 0: not by count)",
    )
    serve.add_argument(
        "--snapshot-every-seconds",
        type=seconds(1e9, open_low=False),
        default=300.0,
        metavar="S",
        help="... or S seconds after the last snapshot (default 300; 0: not by time)",
    )
    serve.add_argument(
        "--snapshot-keep",
        type=whole(1, 100),
        default=2,
        metavar="K",
        help="snapshots kept; journal records older than the oldest are compacted (default 2)",
    )
    _add_limits(serve)
    add_serve_flags(serve)
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
    report.add_argument(
        "--sidecar", type=sidecar_url, required=True, help="base URL, e.g. http://127.0.0.1:9400 (required)"
    )
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
        type=size(1024, 4 << 30),
        default=d.max_input_line_bytes,
        metavar="SIZE",
        help="longest materialized-inputs line read (default 16M)",
    )
    limits.add_argument(
        "--max-plan-tasks",
        type=whole(1, 10**9),
        default=d.max_plan_tasks,
        help=f"tasks per plan (default {d.max_plan_tasks})",
    )
    limits.add_argument(
        "--max-runs",
        type=whole(1, 10**6),
        default=d.max_runs,
        help=f"runs held at once (default {d.max_runs})",
    )
    limits.add_argument(
        "--max-identity-chars",
        type=whole(1, 1 << 20),
        default=d.max_identity_chars,
        help="longest task / rollout identity, explicit or in a row or line "
        f"(default {d.max_identity_chars})",
    )
    limits.add_argument(
        "--max-inflight",
        type=whole(1, 10**8),
        default=d.max_inflight,
        metavar="N",
        help="in-flight rollouts tracked over all runs; later starts are counted as untracked "
        f"(default {d.max_inflight})",
    )
    limits.add_argument(
        "--max-body-bytes-in-flight",
        type=size(1024, 1 << 40),
        default=d.max_body_bytes_in_flight,
        metavar="SIZE",
        help="request body bytes held at once over all requests (default 256M)",
    )
    limits.add_argument(
        "--header-timeout",
        type=seconds(86400),
        default=d.header_timeout_s,
        metavar="SECONDS",
        help=f"close a connection without complete headers after this long (default {d.header_timeout_s:g})",
    )
    limits.add_argument(
        "--body-timeout",
        type=seconds(86400),
        default=d.body_timeout_s,
        metavar="SECONDS",
        help=f"close a connection whose request body stalls this long (default {d.body_timeout_s:g})",
    )
    limits.add_argument(
        "--write-timeout",
        type=seconds(86400),
        default=d.write_timeout_s,
        metavar="SECONDS",
        help="drop a connection whose client reads nothing of a response this long "
        f"(default {d.write_timeout_s:g})",
    )
    limits.add_argument(
        "--max-connections-per-peer",
        type=whole(1, 10**6),
        default=d.max_connections_per_peer,
        help=f"open connections per client address (default {d.max_connections_per_peer})",
    )
    limits.add_argument(
        "--metrics-retain-ended",
        type=seconds(1e9),
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
        "max_inflight": args.max_inflight,
        "write_timeout_s": args.write_timeout,
        "max_body_bytes_in_flight": max(args.max_body_bytes_in_flight, args.body_cap),
        "header_timeout_s": args.header_timeout,
        "body_timeout_s": args.body_timeout,
        "max_connections_per_peer": args.max_connections_per_peer,
        "metrics_retain_ended_s": args.metrics_retain_ended,
    }


def _serve(args: argparse.Namespace) -> int:
    from health.process_tuning import own_process
    from sidecar.http.logging import configure_logging
    from sidecar.http.server import run_service
    from sidecar.journal import JournalError

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
            trackers = tracker_settings(args)
        except ValueError as exc:  # InflightRules / OtlpConfigError / trackers name the value
            raise SettingsError(str(exc)) from exc
        settings = ServiceSettings(
            host=args.host,
            port=args.port,
            journal_path=args.journal,
            token=load_token(args.token_file),
            read_token=load_token(args.read_token_file, variable=READ_TOKEN_ENV_VAR),
            open_metrics=args.open_metrics,
            body_cap=args.body_cap,
            max_json_depth=args.max_json_depth,
            retain_ended_s=args.retain_ended,
            inflight=inflight,
            otlp_endpoint=endpoint,
            otlp_interval_s=interval_s,
            trackers=trackers,
            **_limits(args),
            keep_rows=args.keep_rows,
            snapshot_every_events=args.snapshot_every_events,
            snapshot_every_s=args.snapshot_every_seconds,
            snapshot_keep=args.snapshot_keep,
        )
        follower = _start_follower(args, settings)
        try:
            # the entry point owns the process: the collector threshold and switch interval
            # the service is tuned for (health.process_tuning), restored when it returns
            with own_process("serve"):
                run_service(settings, follower=follower)
        finally:
            if follower is not None:
                follower.stop()
        if trackers is not None:
            _exit_past_hung_trackers()
    except (SettingsError, JournalError) as exc:
        reason = " ".join(str(exc).split())  # one line, whatever the cause's text holds
        print(f"rollout-sidecar serve: {reason}", file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


def _exit_past_hung_trackers() -> None:
    """End the process now if a tracker hung through shutdown: the journal is closed and
    snapshotted, and a hung tracker library's exit hook would otherwise hold the exit."""
    import logging
    import os

    from sidecar.export.trackers.export import abandoned_trackers

    hung = abandoned_trackers()
    if hung:
        structlog.get_logger("sidecar.export.trackers").warning(
            "exiting past hung trackers", trackers=sorted(hung)
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _otlp(cli_endpoint: str | None) -> tuple[str | None, float]:
    """The OTLP metrics URL and interval; ``--otlp-endpoint`` without the ``otel`` extra is an error,
    the NeMo Gym environment switch without it only a warning (the job must still run). A protocol,
    header, timeout or TLS file the push cannot use is refused here, before the service starts."""
    from sidecar.export.otlp import http_settings, otlp_available, resolve_endpoint, resolve_interval

    endpoint = resolve_endpoint(cli_endpoint)
    if endpoint is None:
        return None, resolve_interval()
    if not otlp_available():
        message = (
            "OTLP export needs the otel extra: pip install '.[otel]' in the rollout-sidecar clone "
            "(it is not on PyPI)"
        )
        if cli_endpoint:
            raise SettingsError(f"--otlp-endpoint: {message}")
        structlog.get_logger("sidecar.export.otlp").warning(
            "otlp push off", reason=message, endpoint=endpoint
        )
        return None, resolve_interval()
    http_settings(endpoint)
    return endpoint, resolve_interval()


def _start_follower(args: argparse.Namespace, settings: ServiceSettings) -> Any:
    """``serve --follow RUN_DIR``: dispatcher_client's follower on a thread, posting to this service."""
    if getattr(args, "follow", None) is None:
        return None
    from dispatcher_client.follow import FollowerThread
    from dispatcher_client.follow_cli import refuse_run_dir

    refused = refuse_run_dir(args.follow, None, serve=True)
    if refused is not None:
        raise SettingsError(f"--follow: {refused}")
    if settings.port == 0:  # the follower posts to the port given; it cannot learn the one picked
        raise SettingsError(
            "--follow needs a fixed --port (with --port 0 the follower cannot know where to post)"
        )
    host = "127.0.0.1" if settings.host in ("", "0.0.0.0", "::") else settings.host
    url = f"http://[{host}]:{settings.port}" if ":" in host else f"http://{host}:{settings.port}"
    token = settings.token.get() if settings.token is not None else None
    try:
        thread = FollowerThread(args.follow, url, token=token)
    except ValueError as exc:
        raise SettingsError(f"--follow {str(args.follow)!r}: {exc}") from exc
    thread.start()
    structlog.get_logger("sidecar.follow").info(
        "following",
        run_dir=str(args.follow),
        rollouts=str(thread.follower.paths.rollouts),
        run_id=thread.follower.run_id,
        sidecar=url,
    )
    return thread


def _report(args: argparse.Namespace) -> int:
    from sidecar.http.report_files import ReportError, fetch_report
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
