"""``rollout-sidecar follow`` arguments: refusals up front, one line each, nothing created."""

from __future__ import annotations

import io
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dispatcher_client.follow import Follower
from sidecar.cli import build_parser
from sidecar.cli import main as cli_main
from sidecar.http.follow import _Status
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.dispatcher_client.support import free_port
from tests.sidecar.service_support import generate_run
from tests.signals import interruptible_process


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[str]:
    with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")) as url:
        yield url


def _runs(url: str) -> list[str]:
    response = httpx.get(f"{url}/v1/runs")
    assert response.status_code == 200
    return [run["run_id"] for run in response.json()["runs"]]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _write_run(run_dir: Path) -> int:
    run = generate_run(num_tasks=3, repeats=2, failure_rate=0.0, drained_fraction=0.0)
    run.write_rollouts(run_dir)
    return sum(1 for line in run.main_lines if line.strip())


class TestRefusals:
    def test_a_missing_directory(
        self, sidecar: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        missing = tmp_path / "does-not-exist"
        assert cli_main(["follow", str(missing), "--sidecar", sidecar, "--once"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert err.startswith(
            f"rollout-sidecar follow: run directory not found: {missing} (pass the directory"
        )
        assert not missing.exists()
        assert _runs(sidecar) == []

    def test_a_file_for_the_directory(
        self, sidecar: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "run"
        _write_run(run_dir)
        rollouts = run_dir / "rollouts.jsonl"
        assert cli_main(["follow", str(rollouts), "--sidecar", sidecar]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"rollout-sidecar follow: RUN_DIR is a file, not a directory: {rollouts} "
            f"(pass its run directory: rollout-sidecar follow {run_dir} ...)\n"
        )
        assert sorted(p.name for p in run_dir.iterdir()) == ["rollouts.jsonl"]
        assert _runs(sidecar) == []

    def test_once_over_an_empty_directory_ends_no_empty_run(
        self, sidecar: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        empty = tmp_path / "emptydir"
        empty.mkdir()
        assert cli_main(["follow", str(empty), "--sidecar", sidecar, "--once"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rollout-sidecar follow: Rollout JSONL not found: {empty / 'rollouts.jsonl'} ")
        assert "drop --once to wait for the files" in err
        assert list(empty.iterdir()) == []
        assert _runs(sidecar) == []


class TestOptions:
    def test_ignore_checks_is_one_option_under_health_checks_name(self) -> None:
        parser = build_parser("follow")
        for flag in ("--ignore-checks", "--ignore"):
            args = parser.parse_args(["follow", "r", "--sidecar", "http://u", flag, "a,b", flag, "c"])
            assert args.ignore_checks == ["a,b", "c"]
        follow_help = parser._subparsers._group_actions[0].choices["follow"].format_help()  # type: ignore[union-attr]
        assert "--ignore-checks" in follow_help

    def test_an_unknown_check_is_refused_by_the_sidecar_naming_it(
        self, sidecar: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "run"
        _write_run(run_dir)
        argv = ["follow", str(run_dir), "--sidecar", sidecar, "--once", "--ignore-checks", "nope"]
        assert cli_main(argv) == 1
        err = capsys.readouterr().err
        assert "refused the run's start" in err and "unknown check id(s): nope" in err


class TestStatus:
    def test_quiet_off_a_terminal(
        self, sidecar: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "run"
        rows = _write_run(run_dir)
        assert cli_main(["follow", str(run_dir), "--sidecar", sidecar, "--once"]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        assert f"{rows} line(s)" in out and "generation" not in out  # nothing internal
        assert out.rstrip().endswith(f"its page: {sidecar}/runs/run")
        assert _runs(sidecar) == ["run"]  # what the refusals above compare against

    def test_a_status_line_on_a_terminal(
        self, sidecar: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        run_dir = tmp_path / "run"
        _write_run(run_dir)
        terminal = _Terminal()
        monkeypatch.setattr("sys.stderr", terminal)
        assert cli_main(["follow", str(run_dir), "--sidecar", sidecar, "--once"]) == 0
        shown = terminal.getvalue()
        assert shown.startswith("\rfollow run: ") and "acknowledged, lag " in shown
        assert shown.endswith("\r")  # the status line is wiped before the final report

    async def test_the_status_counts_sent_acknowledged_and_lag(self, sidecar: str, tmp_path: Path) -> None:
        run_dir = tmp_path / "run"
        rows = _write_run(run_dir)
        follower = Follower(run_dir, sidecar_url=sidecar)
        status = _Status(follower, io.StringIO())
        size = (run_dir / "rollouts.jsonl").stat().st_size
        assert status.line() == f"follow run: 0 event(s) sent, 0 acknowledged, lag {size} byte(s)"
        async with follower.client:
            await follower.end_run()
        events = rows + 2  # run_started and run_ended around the rows
        assert status.line() == f"follow run: {events} event(s) sent, {events} acknowledged, lag 0 byte(s)"


class TestRanges:
    @pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "1e9"])
    def test_a_poll_interval_that_would_spin_or_never_poll_is_refused(
        self, tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as exited:
            cli_main(["follow", str(tmp_path), "--sidecar", "http://127.0.0.1:9", f"--poll-interval={value}"])
        assert exited.value.code == 2
        assert capsys.readouterr().err == (
            f"rollout-sidecar follow: error: argument --poll-interval: must be in 0.001..60 s, got {value!r} "
            "(usage: rollout-sidecar follow --help)\n"
        )

    def test_once_and_until_idle_exclude_each_other(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as exited:
            cli_main(
                ["follow", str(tmp_path), "--sidecar", "http://127.0.0.1:9", "--once", "--until-idle", "3"]
            )
        assert exited.value.code == 2
        assert capsys.readouterr().err == (
            "rollout-sidecar follow: error: argument --until-idle: not allowed with argument --once "
            "(usage: rollout-sidecar follow --help)\n"
        )


def test_ctrl_c_during_once_exits_130_in_one_line(tmp_path: Path) -> None:
    """A real process and a real SIGINT, sent once the follower is retrying an absent sidecar."""
    run_dir = tmp_path / "run"
    _write_run(run_dir)
    argv = [sys.executable, "-m", "sidecar.cli", "follow", str(run_dir), "--once"]
    argv += ["--sidecar", f"http://127.0.0.1:{free_port()}"]  # nothing listens there
    with interruptible_process(argv) as process:
        assert process.stderr is not None and process.stdout is not None
        retrying = process.stderr.readline()  # the follower's one line about the outage
        process.send_signal(signal.SIGINT)
        rest = process.stderr.read()
        code = process.wait(30)
        out = process.stdout.read()
    assert "not answering" in retrying
    assert code == 130
    assert (
        rest == "rollout-sidecar follow: interrupted (the checkpoint holds what the sidecar acknowledged)\n"
    )
    assert out == ""
