"""``rollout-sidecar attach [options] -- COMMAND [ARGS...]``: a NeMo Gym command observed live
(docs/operations.md); without ``--sidecar`` the service runs in-process and writes the report."""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dispatcher_client.attach import say as _say
from health.cli_types import sidecar_url
from sidecar.http.settings import TOKEN_ENV_VAR, SettingsError, load_token
from sidecar.wire import RUN_ID_PATTERN

__all__ = ["register"]

_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2}


def _run_id(value: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"run id {value!r} must match {RUN_ID_PATTERN.pattern}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    attach = subparsers.add_parser(
        "attach",
        help="run a NeMo Gym command with the sidecar attached",
        description="Run COMMAND (e.g. ng_collect_rollouts +...) with its rollout collection reported live "
        "to a sidecar: its own for the job's life, or --sidecar URL.",
    )
    attach.add_argument(
        "--sidecar",
        type=sidecar_url,
        default=None,
        help="a running sidecar's base URL (default: start one in this process for the job's life)",
    )
    attach.add_argument(
        "--run-id",
        type=_run_id,
        default=None,
        help="the run's id (default: $NEMO_GYM_OTEL_RUN_ID, else $SLURM_JOB_ID-<output stem>, else "
        "<output stem>-<time>)",
    )
    attach.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"bearer token file (default: ${TOKEN_ENV_VAR}, else none; the own sidecar requires it too)",
    )
    attach.add_argument(
        "--pooled",
        action="store_true",
        help="the drain margin is the run's p75 pooled over every process attached under this run id "
        "(needs --sidecar; the run gets no plan and no run_ended)",
    )
    attach.add_argument(
        "--keep-serving",
        action="store_true",
        help="without --sidecar: keep the page up after the job until Ctrl-C",
    )
    attach.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="without --sidecar: the journal, report files and page.html (default: <output>.sidecar "
        "beside the command's output_jsonl_fpath or --output, else ./rollout-sidecar.sidecar)",
    )
    attach.add_argument(
        "job",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARGS...]",
        help="the command to run, as without attach",
    )
    attach.set_defaults(handler=_attach)


def _output(command: list[str]) -> Path | None:
    """The job's output file, as NeMo Gym's command line gives it (a Hydra override or ``--output``)."""
    for i, word in enumerate(command[1:], start=1):
        key, equals, value = word.lstrip("+").partition("=")
        if equals and key == "output_jsonl_fpath":
            return Path(value)
        if word.startswith("--output="):
            return Path(word.partition("=")[2])
        if word in ("--output", "-o") and i + 1 < len(command):
            return Path(command[i + 1])
    return None


def _attach(args: argparse.Namespace) -> int:
    command: list[str] = args.job[1:] if args.job[:1] == ["--"] else args.job
    refusal = (
        "give the command to run after --"
        if not command
        else "--pooled needs --sidecar (the sidecar every process of the run reports to)"
        if args.pooled and args.sidecar is None
        else "--keep-serving and --out are for the own sidecar: drop them or --sidecar"
        if args.sidecar is not None and (args.keep_serving or args.out is not None)
        else None
    )
    try:
        if refusal is not None:
            raise SettingsError(refusal)
        token = load_token(args.token_file)
    except SettingsError as exc:
        _say(str(exc))
        return 2
    output = _output(command)
    out = args.out or (Path(f"{output}.sidecar") if output is not None else Path("rollout-sidecar.sidecar"))
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS | {signal.SIGCHLD})  # threads inherit it
    try:
        own = None if args.sidecar is not None else _own_sidecar(out, token)
        before = _runs(own.url) if own is not None else {}
        url = args.sidecar or (own.url if own is not None else None)
        status = _run(command, _child_env(args, url), previous)
        if own is not None:
            _finish(own, before, out, token.get() if token else None, args.keep_serving)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return status


def _child_env(args: argparse.Namespace, url: str | None) -> dict[str, str]:
    from dispatcher_client import attach

    env = {key: value for key, value in os.environ.items() if not key.startswith("ROLLOUT_SIDECAR_ATTACH_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(attach.BOOTSTRAP_DIR), env.get("PYTHONPATH")]))
    if url is not None:
        env[attach.URL_ENV] = url
    if args.run_id is not None:
        env[attach.RUN_ID_ENV] = args.run_id
    if args.token_file is not None:
        env[attach.TOKEN_FILE_ENV] = str(args.token_file.resolve())
    if args.pooled:
        env[attach.POOLED_ENV] = "1"
    return env


def _own_sidecar(out: Path, token: Any) -> Any:
    """The service on 127.0.0.1 in this process, journal in ``out``; ``None`` (said) if it cannot start:
    the job then runs unobserved."""
    from sidecar.http.logging import configure_logging
    from sidecar.http.server import ServiceThread
    from sidecar.http.settings import ServiceSettings

    configure_logging("warning")
    try:
        out.mkdir(parents=True, exist_ok=True)
        thread = ServiceThread(ServiceSettings(journal_path=out / "journal.sqlite", token=token))
        thread.start()
    except Exception as exc:
        _say(f"cannot start a sidecar in {out} ({type(exc).__name__}: {exc}); the job runs unobserved")
        return None
    return thread


def _runs(url: str) -> dict[str, Any]:
    """``GET /v1/runs`` of the own sidecar (waiting while it replays its journal), by run id."""
    import time

    import httpx

    deadline = time.monotonic() + 60.0
    while True:
        answer = httpx.get(f"{url}/v1/runs", timeout=30.0)
        if answer.status_code != 503 or time.monotonic() > deadline:
            return {run["run_id"]: run for run in answer.json().get("runs", [])}
        time.sleep(0.05)


def _run(command: list[str], env: dict[str, str], mask: Iterable[int]) -> int:
    """Spawn COMMAND with the caller's signal mask, forward signals until it exits; its exit code."""
    try:
        pid = os.posix_spawnp(command[0], command, env, setsigmask=mask)
    except OSError as exc:
        _say(f"cannot run {command[0]!r}: {exc.strerror or exc}")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    while True:
        info = signal.sigtimedwait(_SIGNALS | {signal.SIGCHLD}, 1.0)
        if info is not None and info.si_signo != signal.SIGCHLD:
            # si_code > 0: sent by the kernel (the terminal's Ctrl-C, Ctrl-\, hangup) to our whole
            # process group, the child included; any other sender (kill) aimed at us alone.
            shared = info.si_code > 0 and os.getpgid(pid) == os.getpgrp()
            if not shared:
                os.kill(pid, info.si_signo)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


def _finish(own: Any, before: dict[str, Any], out: Path, token: str | None, keep_serving: bool) -> None:
    """Write each run this job made into ``out`` (``out/<run id>`` when several), serve on if asked."""
    from sidecar.http.report_files import ReportError, fetch_page, fetch_report
    from sidecar.web.saved import HtmlError, write_html

    try:
        runs = [run_id for run_id, run in _runs(own.url).items() if before.get(run_id) != run]
        for run_id in runs:
            where = out if len(runs) == 1 else out / run_id
            fetch_report(own.url, run_id, where, token=token)
            write_html(where / "page.html", *fetch_page(own.url, run_id, token=token))
        _say(f"report files and page.html of {', '.join(runs) or 'no run'} written to {out}")
        if keep_serving:
            _say(f"serving {own.url}/ until Ctrl-C")
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except (ReportError, HtmlError, OSError, ValueError) as exc:
        _say(f"the report could not be written ({exc})")
    finally:
        own.stop()
