"""``rollout-sidecar follow RUN_DIR --sidecar URL`` and ``serve --follow``'s :class:`FollowerThread`: the
command line and the server's side of :class:`dispatcher_client.follow.Follower`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from dispatcher_client.follow import Follower, FollowerError
from health.cli_types import seconds, sidecar_url, size
from sidecar.http.settings import ServiceSettings, SettingsError, load_token
from sidecar.wire import FollowerState

__all__ = ["FollowerThread", "refuse_run_dir", "register"]

_PROG = "rollout-sidecar follow"
_log = logging.getLogger("dispatcher_client.follow")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "follow",
        help="follow a NeMo Gym run directory into a sidecar",
        description="Tail RUN_DIR's rollouts JSONL, its _failures.jsonl and its materialized inputs, "
        "and post them to a sidecar as events. The read position is checkpointed in a state file, "
        "so a restarted follower neither skips nor repeats a line. On a terminal, a status line on "
        "stderr shows lines sent, acknowledged and the bytes not yet acknowledged (lag).",
    )
    add = parser.add_argument
    add("run_dir", type=Path, metavar="RUN_DIR", help="the run directory (must exist)")
    add("--rollouts-file", default=None, metavar="PATH",
        help="rollouts JSONL, relative to RUN_DIR (default: rollouts.jsonl)")
    add("--sidecar", type=sidecar_url, required=True, help="base URL, e.g. http://127.0.0.1:9400 (required)")
    add("--run-id", default=None, help="run id (default: the run directory's name)")
    add("--token-file", type=Path, default=None,
        help="bearer token file (default: $ROLLOUT_SIDECAR_TOKEN, else no token)")
    add("--poll-interval", type=seconds(60.0, low=0.001, open_low=False), default=0.2, metavar="SECONDS",
        help="seconds between polls (default: 0.2)")
    ending = parser.add_mutually_exclusive_group()
    ending.add_argument("--until-idle", type=seconds(1e7), default=None, metavar="SECONDS",
                        help="end the run and exit once no file grew for SECONDS "
                        "(default: follow until interrupted)")
    ending.add_argument("--once", action="store_true",
                        help="send what is there now, end the run, exit (default: keep following)")
    add("--no-latency", action="store_true",
        help="do not derive durations from rows' ng_perf (a RemoteLatencyTracker feeds the run) "
        "(default: derive them)")
    add("--ignore-checks", "--ignore", dest="ignore_checks", action="append", default=None,
        metavar="CHECK[,CHECK...]",
        help="comma-separated check IDs to skip, as health-check's option (repeatable; default: none)")
    add("--max-line", type=size(1024, 4 << 30), default=ServiceSettings().body_cap, metavar="SIZE",
        help="longest line sent; a longer one (a runaway generation) is reported record_unreadable and "
        "skipped (default 64M, the sidecar's default --body-cap)")
    add("--give-up-after", type=seconds(1e7), default=60.0, metavar="SECONDS",
        help="with --once or --until-idle: exit 1 once the sidecar has been unreachable this long "
        "(default 60; following without them retries for ever)")
    parser.set_defaults(handler=_follow)


def refuse_run_dir(run_dir: Path, rollouts_file: str | None, *, serve: bool = False) -> str | None:
    """The message for a RUN_DIR that cannot be followed, naming the fix; else None
    (``follow`` and ``serve --follow`` refuse alike; ``serve`` words the fix for its flag)."""
    if run_dir.is_file():
        if serve:
            return f"a file, not a run directory: {run_dir} (pass --follow {run_dir.parent})"
        fix = f"{_PROG} {run_dir.parent}"
        if run_dir.name != "rollouts.jsonl":
            fix += f" --rollouts-file {run_dir.name}"
        return f"RUN_DIR is a file, not a directory: {run_dir} (pass its run directory: {fix} ...)"
    if not run_dir.is_dir():
        waits = "it may be empty" if serve else "without --once it may be empty"
        return (f"run directory not found: {run_dir} (pass the directory NeMo Gym writes rollouts.jsonl "
                f"into; {waits}, the follower waits for the files)")
    return None


class _Status:
    """One self-rewriting status line on a terminal: lines sent, acknowledged, lag."""

    def __init__(self, follower: Follower, stream: TextIO) -> None:
        self.follower, self.stream, self.width = follower, stream, 0

    def line(self) -> str:
        follower = self.follower
        stats = follower.client.stats
        lag = 0
        for name, path in (("rollouts", follower.paths.rollouts), ("failures", follower.paths.failures)):
            with contextlib.suppress(OSError):
                lag += max(0, os.stat(path).st_size - follower.positions[name].offset)
        state = "" if stats.connected else f", sidecar unreachable ({stats.last_error})"
        return (f"follow {follower.run_id}: {stats.submitted} event(s) sent, {stats.sent} acknowledged, "
                f"lag {lag} byte(s){state}")

    def show(self, text: str | None = None) -> None:
        text = self.line() if text is None else text
        self.stream.write("\r" + text.ljust(self.width) + ("\r" if not text else ""))
        self.stream.flush()
        self.width = len(text)

    async def run(self, interval_s: float = 0.5) -> None:
        while True:
            self.show()
            await asyncio.sleep(interval_s)


async def _main(args: argparse.Namespace, token: str | None) -> int:
    # The follower reports refusals and outages itself, in one line; the client's warnings would repeat them.
    logging.getLogger("dispatcher_client").setLevel(logging.ERROR)
    logging.getLogger("dispatcher_client.follow").setLevel(logging.WARNING)
    package = logging.getLogger("dispatcher_client")
    if not any(isinstance(handler, _Stderr) for handler in package.handlers):
        package.addHandler(_Stderr(logging.WARNING))
    follower = Follower(
        args.run_dir, sidecar_url=args.sidecar, run_id=args.run_id, rollouts_file=args.rollouts_file,
        token=token, poll_interval_s=args.poll_interval,
        latency_from_rows=not args.no_latency, max_line_bytes=args.max_line,
        ignored_checks=[check for value in args.ignore_checks or () for check in value.split(",")],
        give_up_s=args.give_up_after if (args.once or args.until_idle is not None) else None,
    )
    paths = follower.paths
    if args.once and not (paths.rollouts.exists() or paths.failures.exists()):  # would end an empty run
        raise ValueError(f"Rollout JSONL not found: {paths.rollouts} (nor {paths.failures.name}; --once "
                         "sends what is there now: check RUN_DIR and --rollouts-file, or drop --once to "
                         "wait for the files)")
    status = _Status(follower, sys.stderr) if sys.stderr.isatty() else None
    shown = asyncio.ensure_future(status.run()) if status is not None else None
    try:
        if args.once:
            await follower.client.open()
            try:
                await follower.end_run()
            finally:
                await follower.client.aclose(1.0)  # what is unacknowledged is re-read next run
        else:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, stop.set)
            await follower.run(stop, idle_exit_s=args.until_idle)
    finally:
        if shown is not None and status is not None:
            shown.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await shown
            status.show("")
    print(  # noqa: T201
        f"Followed {paths.source_path} into run {follower.run_id!r}: {follower.lines_sent} line(s); "
        f"its page: {follower.client.base_url}/runs/{follower.run_id}"
    )
    return 0


class _Stderr(logging.Handler):
    """Bare messages to whatever ``sys.stderr`` is when one is logged."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # logging's contract: a failing handler reports, never raises
            self.handleError(record)


def _error(message: str, code: int = 2) -> int:
    print(f"{_PROG}: {message}", file=sys.stderr)  # noqa: T201
    return code


def _follow(args: argparse.Namespace) -> int:
    refused = refuse_run_dir(args.run_dir, args.rollouts_file)
    if refused is not None:
        return _error(refused)
    try:
        secret = load_token(args.token_file)
    except SettingsError as exc:
        return _error(str(exc))
    token = secret.get() if secret is not None else None
    try:
        return asyncio.run(_main(args, token))
    except ValueError as exc:
        return _error(str(exc))
    except FollowerError as exc:  # the checkpoint was left in place: a restart loses nothing
        return _error(str(exc), 1)
    except KeyboardInterrupt:  # --once has no signal handler: Ctrl-C ends it as it ends health-check
        return _error("interrupted (the checkpoint holds what the sidecar acknowledged)", 130)


class FollowerThread:
    """A :class:`Follower` on its own thread and loop beside a server (``serve --follow``): restarted
    from its checkpoint after an ``OSError``, stopped by a :class:`FollowerError`."""

    def __init__(self, run_dir: str | os.PathLike[str], sidecar_url: str, **options: Any) -> None:
        self._run_dir, self._url, self._options = run_dir, sidecar_url, options
        self.follower = Follower(run_dir, sidecar_url=sidecar_url, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="sidecar-follower", daemon=True)
        self.state = FollowerState.STARTING
        self.last_error: str | None = None
        self.retries = 0

    def status(self) -> dict[str, Any]:
        return {"state": self.state, "last_error": self.last_error, "retries": self.retries,
                "lines_sent": self.follower.lines_sent}

    async def _follow(self, stop: asyncio.Event) -> None:
        delay = 0.5
        while not stop.is_set():
            self.state = FollowerState.FOLLOWING
            try:
                await self.follower.run(stop)
                return
            except FollowerError as exc:
                self.state, self.last_error = FollowerState.STOPPED, str(exc)
                _log.error("follower stopped: %s", exc)
                return
            except OSError as exc:
                self.state, self.last_error = FollowerState.RETRYING, f"{type(exc).__name__}: {exc}"
                self.retries += 1
                _log.warning("follower error, restarting from its checkpoint in %.1f s: %s", delay, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(30.0, delay * 2)
            try:
                self.follower = Follower(self._run_dir, sidecar_url=self._url, **self._options)
            except (OSError, ValueError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._follow(self._stop)

        try:
            asyncio.run(main())
        except BaseException as exc:  # said in status() and the log
            self.state, self.last_error = FollowerState.STOPPED, f"{type(exc).__name__}: {exc}"
            _log.exception("follower thread failed")
        finally:
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10.0)

    def stop(self, timeout: float = 10.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)
