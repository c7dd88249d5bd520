"""The ``demo`` subcommand of ``rollout-sidecar``: run the whole mission locally in under a minute."""

from __future__ import annotations

import argparse
from pathlib import Path

from health.cli_types import number, seconds, whole
from sidecar.demo.config import DEFAULT_DURATION_S, DEFAULT_TIME_SCALE

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run a sidecar, a fake agent and a dispatcher locally, live, then print the report",
        description=(
            "Start the sidecar service, a fake agent server with long-tailed task durations, and a "
            "dispatcher with a dispatch budget; show live progress; print the post-run report. "
            "Time is compressed: durations, latencies, budget and drain margin are simulated "
            f"seconds, {DEFAULT_TIME_SCALE:g} per real second by default."
        ),
    )
    demo.add_argument(
        "--duration",
        type=seconds(86400),
        default=DEFAULT_DURATION_S,
        metavar="SECONDS",
        help=f"real seconds of dispatch budget (default {DEFAULT_DURATION_S:g}); "
        "in-flight tasks finish after it, within one task timeout",
    )
    demo.add_argument(
        "--tasks",
        type=whole(1, 10**6),
        default=None,
        help="tasks to dispatch (default: 10%% more than the budget can take, so some are drained)",
    )
    demo.add_argument("--repeats", type=whole(1, 10**4), default=4, help="rollouts per task (default 4)")
    demo.add_argument(
        "--concurrency", type=whole(1, 10**4), default=8, help="rollouts in flight at once (default 8)"
    )
    demo.add_argument(
        "--time-scale",
        type=number(1e6),
        default=DEFAULT_TIME_SCALE,
        metavar="FACTOR",
        help=f"simulated seconds per real second (default {DEFAULT_TIME_SCALE:g}: 1 minute = 0.1 s)",
    )
    demo.add_argument(
        "--task-timeout",
        type=number(1e6),
        default=60.0,
        metavar="MINUTES",
        help="simulated minutes after which the agent gives up on a task (default 60)",
    )
    demo.add_argument(
        "--seed", type=whole(0, 2**32 - 1), default=2026, help="seed of the synthetic agent (default 2026)"
    )
    demo.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the run directory, journal and report go (default: a new temporary directory)",
    )
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from sidecar.demo import DemoConfig, DemoConfigError, TimeScale
    from sidecar.demo.report_view import report_lines
    from sidecar.demo.run import DemoError, run_demo
    from sidecar.http.logging import configure_logging

    console = Console(highlight=False)
    errors = Console(stderr=True, highlight=False)
    configure_logging("warning")
    try:
        config = DemoConfig(
            duration_s=args.duration,
            tasks=args.tasks,
            repeats=args.repeats,
            concurrency=args.concurrency,
            time_scale=TimeScale(args.time_scale),
            task_timeout_s=args.task_timeout * 60.0,
            seed=args.seed,
            out_dir=args.out,
        )
    except DemoConfigError as exc:
        errors.print(f"rollout-sidecar demo: {exc}", soft_wrap=True)
        return 2
    scale = config.time_scale.describe()
    console.print(
        f"rollout-sidecar demo: {config.num_tasks} tasks x {config.repeats} repeats, concurrency "
        f"{config.concurrency}, dispatch budget {config.budget_s / 3600:.2f} simulated hours "
        f"({config.duration_s:g} s real); {scale}",
        soft_wrap=True,
    )
    try:
        result = run_demo(config, console)
    except (DemoError, OSError) as exc:
        errors.print(f"rollout-sidecar demo: {exc}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        errors.print("rollout-sidecar demo: interrupted", soft_wrap=True)
        return 130
    console.print()
    for line in report_lines(
        result.report,
        result.summary,
        result.stats,
        result.paths,
        sidecar_url=result.sidecar_url,
        scale_text=scale,
        straggler=result.straggler,
        stragglers_flagged=result.stragglers_flagged,
    ):
        console.print(line, soft_wrap=True, markup=False)
    console.print(f"\nDemo finished in {result.real_seconds:.1f} s.", soft_wrap=True)
    return 0
