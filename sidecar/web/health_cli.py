"""``rollout-sidecar health-check ... --html FILE``: the batch check, then its page as one file.

``health/`` never imports ``sidecar``, so the option is added here, around ``health.cli``'s own
parser and handler: the check runs unchanged (same files, same stdout), and only after it
succeeded is the page written from the reports it wrote (plus one more pass over the rows for
their ``ng_perf``). Imports no HTTP client and no server.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from health import cli as health_cli

__all__ = ["register"]

_PROG = "rollout-sidecar health-check"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def _rollout_paths(args: argparse.Namespace) -> tuple[Path, list[Path]]:
    from health.api import resolve_rollout_path
    from health.shards import resolve_shard_paths

    if args.globs:
        return resolve_shard_paths(args.run_dir, args.globs)
    run_dir, path = resolve_rollout_path(args.run_dir, args.rollouts_file)
    return run_dir, [path]


def _with_html(checked: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    html: Path | None = args.html
    if html is not None and (html.is_dir() or not html.parent.is_dir()):
        sys.stderr.write(f"{_PROG}: --html {str(html)!r}: not a file in an existing directory\n")
        return 2
    status = checked(args)
    if status != 0 or html is None:
        return status
    from sidecar.web.saved import HtmlError, batch_page, write_html

    run_dir, paths = _rollout_paths(args)
    try:
        write_html(html, batch_page(run_dir.name or str(run_dir), run_dir, paths), None)
    except HtmlError as exc:
        sys.stderr.write(f"{_PROG}: {exc}\n")
        return 2
    sys.stderr.write(f"{_PROG}: page written to {html}\n")
    return 0
