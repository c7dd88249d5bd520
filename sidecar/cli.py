"""The ``rollout-sidecar`` command line: one entry point, one subcommand per job.

Each subcommand lives beside the code it drives and registers itself through a
``register(subparsers)`` function returning nothing; ``main`` only dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

__all__ = ["main"]

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _registrars() -> list[Register]:
    from dispatcher_client.follow_cli import register as register_follow
    from health.cli import register as register_health_check
    from sidecar.demo_cli import register as register_demo
    from sidecar.service_cli import register as register_service

    return [register_health_check, register_service, register_follow, register_demo]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollout-sidecar",
        description=(
            "Latency, drain margin, ng_perf, metrics and rollout health beside a NeMo Gym dispatcher."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
