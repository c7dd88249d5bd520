"""The ``follow`` subcommand: ``rollout-sidecar follow RUN_DIR --sidecar URL [--run-id ID]``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "follow",
        help="follow a NeMo Gym run directory into a sidecar",
        description="Tail RUN_DIR's rollouts JSONL, its _failures.jsonl and its materialized inputs, "
        "and post them to a sidecar as events. The read position is checkpointed in a state file, "
        "so a restarted follower neither skips nor repeats a line.",
    )
    parser.add_argument("run_dir", type=Path, help="the run directory")
    parser.add_argument("--rollouts-file", default=None, help="rollouts JSONL (default rollouts.jsonl)")
    parser.add_argument("--sidecar", required=True, help="base URL, e.g. http://127.0.0.1:9400")
    parser.add_argument("--run-id", default=None, help="run id (default: the run directory's name)")
    parser.add_argument(
        "--token-file", type=Path, default=None, help="bearer token file (else $ROLLOUT_SIDECAR_TOKEN)"
    )
    parser.add_argument("--state-file", type=Path, default=None, help="checkpoint file (default in RUN_DIR)")
    parser.add_argument("--poll-interval", type=float, default=0.2, help="seconds between polls")
    parser.add_argument(
        "--until-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="end the run and exit once no file grew for SECONDS",
    )
    parser.add_argument("--once", action="store_true", help="send what is there now, end the run, exit")
    parser.add_argument(
        "--no-latency",
        action="store_true",
        help="do not derive durations from rows' ng_perf (a RemoteLatencyTracker feeds the run)",
    )
    parser.add_argument("--ignored-checks", default="", help="comma-separated check ids to ignore")
    parser.add_argument(
        "--give-up-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --once or --until-idle: exit 1 once the sidecar has been unreachable this long "
        "(default 60; following without them retries for ever)",
    )
    parser.set_defaults(handler=_follow)


async def _main(args: argparse.Namespace, token: str | None) -> int:
    from dispatcher_client.follow import Follower

    # The follower reports refusals and outages itself, in one line; the client's own warnings
    # about the same events would only repeat them.
    logging.getLogger("dispatcher_client").setLevel(logging.ERROR)
    logging.getLogger("dispatcher_client.follow").setLevel(logging.WARNING)

    follower = Follower(
        args.run_dir,
        sidecar_url=args.sidecar,
        run_id=args.run_id,
        rollouts_file=args.rollouts_file,
        token=token,
        state_path=args.state_file,
        poll_interval_s=args.poll_interval,
        latency_from_rows=not args.no_latency,
        ignored_checks=args.ignored_checks.split(","),
        give_up_s=args.give_up_after if (args.once or args.until_idle is not None) else None,
    )
    if args.once:
        await follower.client.open()
        try:
            await follower.end_run()
        finally:
            await follower.client.aclose(1.0)  # acknowledged or not, what is unsent is re-read next run
    else:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await follower.run(stop, idle_exit_s=args.until_idle)
    print(  # noqa: T201
        f"Followed {follower.paths.source_path} into run {follower.run_id!r}: "
        f"{follower.lines_sent} line(s), generation {follower.generation}"
    )
    return 0


def _follow(args: argparse.Namespace) -> int:
    from sidecar.settings import SettingsError, load_token

    try:
        secret = load_token(args.token_file)
    except SettingsError as exc:
        print(f"rollout-sidecar follow: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    from dispatcher_client.follow import FollowerError

    try:
        return asyncio.run(_main(args, secret.get() if secret is not None else None))
    except ValueError as exc:
        print(f"rollout-sidecar follow: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except FollowerError as exc:  # the checkpoint was left in place: a restart loses nothing
        print(f"rollout-sidecar follow: {exc}", file=sys.stderr)  # noqa: T201
        return 1
