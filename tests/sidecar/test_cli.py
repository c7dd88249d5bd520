"""The entry point: every subcommand is reachable, and only the chosen one is imported."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

import pytest

from sidecar.cli import COMMANDS, build_parser


class TestCli:
    def test_help_lists_every_command(self) -> None:
        help_text = build_parser().format_help()
        for command in COMMANDS:
            assert command in help_text

    def test_health_check_does_not_import_the_service_or_the_client(self) -> None:
        code = (
            "import sys\n"
            "from sidecar.cli import main\n"
            "try:\n"
            "    main(['health-check', '--help'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "heavy = ('httpx', 'uvicorn', 'starlette', 'prometheus_client', 'dispatcher_client')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n"
        )
        completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert completed.stdout.strip().splitlines()[-1] == "[]"

    def test_unknown_command_is_a_usage_error(self) -> None:
        completed = subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "bogus"], capture_output=True, text=True, check=False
        )
        assert completed.returncode == 2
        assert "invalid choice: 'bogus'" in completed.stderr


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_has_help_that_shows_its_default(command: str) -> None:
    """Flags are off unless given; every other optional names its default (or says it is required)."""
    for action in _subcommands()[command]._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        where = f"{command} {action.option_strings or action.dest}"
        assert action.help, f"{where} has no help"
        if action.option_strings and action.nargs != 0:
            assert "default" in action.help or "required" in action.help, f"{where}: {action.help!r}"


def test_version() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0
    first, vetter = completed.stdout.splitlines()
    assert first == f"rollout-sidecar {version('rollout-sidecar')}"
    assert vetter.startswith("JSON vetter: ")  # which one: tests/health/test_native.py
