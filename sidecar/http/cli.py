"""The ``serve`` and ``report`` subcommands of ``rollout-sidecar``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

import structlog

from health.cli_types import number, seconds, sidecar_url, whole
from sidecar.export.trackers.cli import add_serve_flags, tracker_settings
from sidecar.http.settings import (
    READ_TOKEN_ENV_VAR,
    TOKEN_ENV_VAR,
    ServiceSettings,
    SettingsError,
    add_options,
    load_token,
    options_of,
)
from sidecar.state.inflight import InflightRules

__all__ = ["register"]


#: ``serve``'s options of the in-flight rules: flag, ``InflightRules`` field, type, metavar, help.
_INFLIGHT: Final = (
    ("--straggler-factor", "straggler_factor", number(1e6), None, "in-flight rollouts older than this "
     "many times the run's p95 task duration straggle (the run's task_timeout_s caps the threshold)"),
    ("--straggler-min-samples", "min_samples", whole(1, 10**9), "N",
     "latency samples before the p95 rule applies"),
    ("--stall-after", "stall_after_s", seconds(1e7), "SECONDS",
     "a heartbeating rollout stalls after this long without one"),
    ("--inflight-interval", "eval_interval_s", seconds(86400), "SECONDS",
     "seconds between straggler/stall evaluations"),
)  # fmt: skip


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="run the sidecar service",
        description="Run the ingest / drain margin / metrics / report service.",
    )
    add_options(serve)
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
    for flag, name, kind, metavar, text in _INFLIGHT:
        default = getattr(rules, name)
        help_ = f"{text} (default {default:g})"
        serve.add_argument(flag, dest=name, type=kind, default=default, metavar=metavar, help=help_)
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


def _serve(args: argparse.Namespace) -> int:
    from health.process_tuning import own_process
    from sidecar.http.logging import configure_logging
    from sidecar.http.server import run_service
    from sidecar.journal import JournalError

    configure_logging(args.log_level)
    try:
        try:
            inflight = InflightRules(**{option[1]: getattr(args, option[1]) for option in _INFLIGHT})
            endpoint, interval_s = _otlp(args.otlp_endpoint)
            trackers = tracker_settings(args)
        except ValueError as exc:  # InflightRules / OtlpConfigError / trackers name the value
            raise SettingsError(str(exc)) from exc
        options = options_of(args)  # a larger --body-cap alone raises the in-flight cap with it
        options["max_body_bytes_in_flight"] = max(args.max_body_bytes_in_flight, args.body_cap)
        settings = ServiceSettings(
            token=load_token(args.token_file),
            read_token=load_token(args.read_token_file, variable=READ_TOKEN_ENV_VAR),
            inflight=inflight,
            otlp_endpoint=endpoint,
            otlp_interval_s=interval_s,
            trackers=trackers,
            **options,
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
    """The OTLP metrics URL and interval, refused here if unusable; without the ``otel`` extra the
    flag is an error, the NeMo Gym environment switch only a warning (the job must still run)."""
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
    from sidecar.http.follow import FollowerThread, refuse_run_dir

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
        thread = FollowerThread(args.follow, url, token=token, max_line_bytes=settings.body_cap)
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
    from sidecar.http.report_files import ReportError, fetch_page, fetch_report
    from sidecar.web.saved import HtmlError, write_html

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
