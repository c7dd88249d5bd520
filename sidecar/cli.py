"""The ``rollout-sidecar`` command line: one entry point, one subcommand per job.

Each subcommand lives beside the code it drives and registers itself through a
``register(subparsers)`` function; ``main`` only dispatches. Only the chosen subcommand's
module is imported (``health-check`` on a big run should not pay for httpx or uvicorn);
``--help`` without a command imports them all to list them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["COMMANDS", "build_parser", "main"]

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

#: Subcommand name -> the module whose ``register`` adds it, in ``--help`` order.
COMMANDS: dict[str, str] = {
    "health-check": "sidecar.web.health_cli",  # health.cli plus --html
    "serve": "sidecar.service_cli",
    "report": "sidecar.service_cli",
    "follow": "dispatcher_client.follow_cli",
    "demo": "sidecar.demo_cli",
}


def _registrars(command: str | None) -> list[Register]:
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    return [importlib.import_module(name).register for name in modules]


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (its first non-option word), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def _version() -> str:
    """The installed distribution's version (a source tree that was never installed says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rollout-sidecar")
    except PackageNotFoundError:
        return "(not installed)"


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (``importlib.metadata`` is slow to load)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{parser.prog} {_version()}\n")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollout-sidecar",
        description=(
            "Latency, drain margin, ng_perf, metrics and rollout health beside a NeMo Gym dispatcher."
        ),
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars(command):
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen_command(arguments))
    args = parser.parse_args(arguments)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
