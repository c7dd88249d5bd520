"""The ``demo`` subcommand of ``rollout-sidecar``: the whole mission on one machine in ~30 s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from health.cli_types import number, seconds, whole

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run a sidecar, a fake agent and a dispatcher locally, live, then print the report",
        description="Start the sidecar, a fake agent server with long-tailed task durations and a dispatcher "
        "with a dispatch budget; show the run live; print its report. Durations, budget and drain margin "
        "are simulated: one minute per 0.1 s real.",
    )
    add = demo.add_argument
    add("--duration", type=seconds(86400), default=30.0, metavar="S", help="real s of budget (default 30)")
    add("--tasks", type=whole(1, 10**6), help="tasks of 4 rollouts (default: 10%% more than fit the budget)")
    add("--concurrency", type=whole(1, 1024), default=8, help="rollouts in flight at once (default 8)")
    add("--task-timeout", type=number(1e6), default=60.0, metavar="MIN", help="simulated min (default 60)")
    add("--seed", type=whole(0, 2**32 - 1), default=2026, help="seed of the synthetic agent (default 2026)")
    add("--out", type=Path, metavar="DIR", help="run directory, journal, report (default: a new temp dir)")
    demo.set_defaults(handler=_demo)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()  # live lines reach a pipe as they happen


def _demo(args: argparse.Namespace) -> int:
    import httpx

    from sidecar.demo.run import DemoConfig, run_demo
    from sidecar.http.logging import configure_logging

    configure_logging("warning")
    try:
        run_demo(
            DemoConfig(
                args.duration, args.tasks, args.concurrency, args.task_timeout * 60, args.seed, args.out
            ),
            _say,
        )
    except (RuntimeError, OSError, httpx.HTTPError) as exc:
        sys.stderr.write(f"rollout-sidecar demo: {exc}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("rollout-sidecar demo: interrupted\n")
        return 130
    return 0
