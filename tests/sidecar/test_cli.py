"""The entry point: every subcommand is reachable, and only the chosen one is imported."""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from health.cli_types import Ranged
from sidecar.cli import COMMANDS, build_parser, main
from tests.dispatcher_client.support import free_port
from tests.signals import interruptible_process


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
    assert completed.stdout.splitlines() == [f"rollout-sidecar {version('rollout-sidecar')}"]


def _ranged_options() -> list[tuple[str, str, Ranged]]:
    return [
        (command, action.option_strings[0], action.type)
        for command, parser in _subcommands().items()
        for action in parser._actions
        if isinstance(action.type, Ranged)
    ]


def _out_of_range(kind: Ranged) -> list[str]:
    """Values just past each end of the range, and the ones no range holds."""
    below = kind.low if kind.open_low else kind.low - 1
    above = kind.high * 10 if kind.kind != "int" else kind.high + 1
    return [
        repr(below) if kind.kind == "float" else str(int(below)),
        str(int(above)),
        "nan",
        "inf",
        "-inf",
        "1e400",
    ]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_numeric_option_has_a_range(command: str) -> None:
    """A numeric default means a numeric flag: it must parse through a ranged type holding the default."""
    for action in _subcommands()[command]._actions:
        numeric = isinstance(action.default, int | float) and not isinstance(action.default, bool)
        if action.type in (int, float) or numeric:
            where = f"{command} {action.option_strings[0]}"
            assert isinstance(action.type, Ranged), f"{where} has no range"
            assert action.type(str(action.default)) == action.default, where


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_gives_each_range(command: str) -> None:
    parser = _subcommands()[command]
    text = " ".join(parser.format_help().split())  # unwrapped
    for action in parser._actions:
        if isinstance(action.type, Ranged):
            assert f"[{action.type.describe()}]" in text, action.option_strings


@pytest.mark.parametrize(("command", "flag", "kind"), _ranged_options())
def test_values_past_a_range_are_refused_in_one_line(
    command: str, flag: str, kind: Ranged, capsys: pytest.CaptureFixture[str]
) -> None:
    for value in _out_of_range(kind):
        with pytest.raises(SystemExit) as exited:
            main([command, f"{flag}={value}"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rollout-sidecar {command}: error: argument {flag}: "), (value, err)
        assert err.count("\n") == 1 and "usage:" in err and "[-h]" not in err, err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unknown_option_shows_the_subcommands_usage(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    required = {
        "health-check": ["X"],
        "follow": ["X", "--sidecar", "http://h"],
        "report": ["--sidecar", "http://h", "--run-id", "r", "--out", "o"],
    }
    with pytest.raises(SystemExit) as exited:
        main([command, *required.get(command, []), "--bogus"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"rollout-sidecar {command}: error: unrecognized arguments: --bogus "
        f"(usage: rollout-sidecar {command} --help)\n"
    )


@pytest.mark.parametrize("command", ["follow", "report"])
@pytest.mark.parametrize(
    "url", ["127.0.0.1:9400", "localhost:9400", "ftp://h", "http://:9400", "http://h:99999"]
)
def test_sidecar_without_a_usable_url_is_refused_at_once(
    command: str, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--sidecar", url])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rollout-sidecar {command}: error: argument --sidecar: ") and url in err
    assert err.count("\n") == 1


def test_a_url_without_scheme_names_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--sidecar", "127.0.0.1:9400"])
    assert "(give the scheme, e.g. http://127.0.0.1:9400)" in capsys.readouterr().err


class TestServeFollow:
    def test_a_missing_run_dir_is_refused_before_the_service_starts(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        missing = tmp_path / "nonexistent" / "run"
        argv = ["serve", "--port", "0", "--journal", str(tmp_path / "j.sqlite3"), "--follow", str(missing)]
        assert main(argv) == 2
        assert capsys.readouterr().err == (
            f"rollout-sidecar serve: --follow: run directory not found: {missing} (pass the directory "
            "NeMo Gym writes rollouts.jsonl into; it may be empty, the follower waits for the files)\n"
        )
        assert not (tmp_path / "j.sqlite3").exists()

    def test_a_file_is_refused_naming_its_directory(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        rollouts = tmp_path / "rollouts.jsonl"
        rollouts.write_text("")
        argv = ["serve", "--port", "0", "--journal", str(tmp_path / "j.sqlite3"), "--follow", str(rollouts)]
        assert main(argv) == 2
        assert f"(pass --follow {tmp_path})" in capsys.readouterr().err

    def test_it_logs_one_line_naming_what_it_follows(self, tmp_path: Path) -> None:
        run_dir = tmp_path / "run-5"
        run_dir.mkdir()
        argv = [sys.executable, "-m", "sidecar.cli", "serve", "--port", str(free_port())]
        argv += ["--journal", str(tmp_path / "j.sqlite3"), "--follow", str(run_dir)]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
            assert process.stdout is not None
            try:
                lines = []
                for line in process.stdout:  # the service logs JSON lines; read until it is ready
                    lines.append(line)
                    if '"service ready"' in line:
                        break
            finally:
                process.terminate()
                process.wait(30)
        following = [json.loads(line) for line in lines if '"event": "following"' in line]
        assert len(following) == 1, lines
        assert following[0]["run_dir"] == str(run_dir) and following[0]["run_id"] == "run-5"
        assert following[0]["rollouts"] == str(run_dir / "rollouts.jsonl")


def test_ctrl_c_during_report_exits_130_in_one_line(tmp_path: Path) -> None:
    """A real process and a real SIGINT, sent while it waits on a 'sidecar' that accepts and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        argv = [sys.executable, "-m", "sidecar.cli", "report", "--sidecar", f"http://127.0.0.1:{port}"]
        argv += ["--run-id", "r", "--out", str(tmp_path / "out")]
        with interruptible_process(argv) as process:
            connection, _ = silent.accept()  # the request is on its way: the process waits for an answer
            with connection:
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=30)
    assert process.returncode == 130
    assert (out, err) == ("", "rollout-sidecar report: interrupted\n")
    assert not (tmp_path / "out").exists()


def test_serve_follow_refuses_port_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run").mkdir()
    argv = [
        "serve",
        "--port",
        "0",
        "--journal",
        str(tmp_path / "j.sqlite3"),
        "--follow",
        str(tmp_path / "run"),
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "rollout-sidecar serve: --follow needs a fixed --port (with --port 0 the follower cannot know where "
        "to post)\n"
    )
