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
from pathlib import Path
from typing import Any, NoReturn, cast

from health.cli_types import Ranged

__all__ = ["COMMANDS", "build_parser", "main"]

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

#: Subcommand name -> the module whose ``register`` adds it, in ``--help`` order.
COMMANDS: dict[str, str] = {
    "health-check": "sidecar.cli:register_health_check",
    "serve": "sidecar.http.cli",
    "report": "sidecar.http.cli",
    "follow": "sidecar.http.follow",
    "demo": "sidecar.demo.cli",
    "attach": "sidecar.http.attach",
}


def register_health_check(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``health.cli``'s ``health-check``, plus ``--html`` (``sidecar.web``'s page of its reports) and
    the tracker flags of ``sidecar.export``: ``health`` imports neither, nor they each other."""
    from health import cli as health_cli
    from sidecar.export.trackers.cli import add_health_check_flags

    health_cli.register(subparsers)
    parser = subparsers.choices["health-check"]
    parser.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the run's page (health and ng_perf) as one self-contained HTML file (default none)",
    )
    checked: Callable[[argparse.Namespace], int] = parser.get_default("handler")
    parser.set_defaults(handler=lambda args: _with_html(checked, args))
    add_health_check_flags(parser)


def _with_html(checked: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """The check unchanged (same files, same stdout); once it succeeded, the page from the reports it
    wrote (plus one pass over the rows for their ``ng_perf``). Imports no HTTP client or server."""
    prog, html = "rollout-sidecar health-check", args.html
    if html is not None and (html.is_dir() or not html.parent.is_dir()):
        sys.stderr.write(f"{prog}: --html {str(html)!r}: not a file in an existing directory\n")
        return 2
    status = checked(args)
    if status != 0 or html is None:
        return status
    from health.api import resolve_rollout_path
    from health.shards import resolve_shard_paths
    from sidecar.web.saved import HtmlError, batch_page, write_html

    if args.globs:
        run_dir, paths = resolve_shard_paths(args.run_dir, args.globs)
    else:
        run_dir, path = resolve_rollout_path(args.run_dir, args.rollouts_file)
        paths = [path]
    try:
        write_html(html, batch_page(run_dir.name or str(run_dir), run_dir, paths), None)
    except HtmlError as exc:
        sys.stderr.write(f"{prog}: {exc}\n")
        return 2
    sys.stderr.write(f"{prog}: page written to {html}\n")
    return 0


def _registrars(command: str | None) -> list[Register]:
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    registrars = []
    for name in modules:
        module, _, function = name.partition(":")
        registrars.append(getattr(importlib.import_module(module), function or "register"))
    return registrars


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (its first non-option word), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (``importlib.metadata`` is slow to load)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from sidecar.export import version

        sys.stdout.write(f"{parser.prog} {version()}\n")
        parser.exit()


class _Help(argparse.HelpFormatter):
    """Help that also gives each numeric option's range (``[in 0..65535]``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text and isinstance(action.type, Ranged):
            text += f" [{action.type.describe()}]"
        return text


class _Parser(argparse.ArgumentParser):
    """Argument errors in one line naming the (sub)command and where its usage is, not the
    whole usage text (subparsers are made of this class too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


def _subcommand_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``name`` (where its own errors belong)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            chosen: argparse.ArgumentParser = action.choices[name]
            return chosen
    return parser


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rollout-sidecar",
        description=(
            "Latency, drain margin, ng_perf, metrics and rollout health beside a NeMo Gym dispatcher."
        ),
    )
    shown = "show program's version number and exit"
    parser.add_argument("--version", action=_VersionAction, nargs=0, default=argparse.SUPPRESS, help=shown)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars(command):  # each adds a _Parser; registrars only need the base API
        register(cast("argparse._SubParsersAction[argparse.ArgumentParser]", sub))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen_command(arguments))
    args, unknown = parser.parse_known_args(arguments)
    if unknown:  # the subcommand's words: its usage, not the top-level one, says what it takes
        _subcommand_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:  # any subcommand without its own answer (report, ...): one line, 130
        sys.stderr.write(f"{parser.prog} {args.command}: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
