"""``rollout-sidecar health-check``: arguments, exit codes, stdout/stderr, progress bar."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from health.progress import terminal_progress
from sidecar.cli import main

ROW = (
    b'{"_ng_task_index":0,"_ng_rollout_index":0,"ng_trajectory":{"task_id":"t","rollout_id":"r","turns":'
    b'[{"invocation_id":"main","task_id":"t","rollout_id":"r","turn_no":1,"timestamp":1.0,"step_count":1,'
    b'"answer":"","model_calls":[]}]}}'
)


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "rollouts.jsonl").write_bytes(ROW + b"\nnot json\n")
    monkeypatch.chdir(tmp_path)
    return directory


def _report(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    captured = capsys.readouterr()
    return captured.out, captured.err


class TestReport:
    def test_prints_the_two_line_report(self, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["health-check", "run", "--workers", "1"]) == 0
        out, err = _report(capsys)
        assert out == (
            "Rollout health: 2 checked, 0 healthy, 2 unhealthy, 0 unobserved\n"
            "Quality summary: run/quality_summary.json\n"
        )
        assert err == ""

    def test_ignore_aliases_accumulate(self, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        argv = [
            "health-check",
            "run",
            "--ignore",
            "record_unreadable",
            "--ignore-checks",
            " agent_turn_hollow,",
        ]
        assert main(argv) == 0
        out, _ = _report(capsys)
        assert out.startswith("Rollout health: 2 checked, 0 healthy, 1 unhealthy, 1 unobserved ")
        assert "(ignored: agent_turn_hollow, record_unreadable)\n" in out

    def test_json_prints_compact_summary_only(
        self, run_dir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["health-check", "run", "--json"]) == 0
        out, _ = _report(capsys)
        assert out.endswith("}\n") and "\n" not in out[:-1]
        assert orjson.loads(out) == orjson.loads((run_dir / "quality_summary.json").read_bytes())

    def test_rollouts_file_relative_and_absolute(
        self, run_dir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        (run_dir / "other.jsonl").write_bytes(b"oops\n")
        assert main(["health-check", "run", "--rollouts-file", "other.jsonl"]) == 0
        rows = (run_dir / "rollout_verdicts.jsonl").read_bytes()
        assert b'"source_file":"run/other.jsonl"' in rows
        absolute = str((run_dir / "other.jsonl").resolve())
        assert main(["health-check", "run", "--rollouts-file", absolute]) == 0
        assert f'"source_file":"{absolute}"'.encode() in (run_dir / "rollout_verdicts.jsonl").read_bytes()
        _report(capsys)


class TestErrors:
    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (
                ["health-check", "missing"],
                "Run directory not found: missing (pass the directory that holds rollouts.jsonl)",
            ),
            (
                ["health-check", "run", "--rollouts-file", "x.jsonl"],
                "Rollout JSONL not found: run/x.jsonl (relative to RUN_DIR)",
            ),
            (
                ["health-check", "run/rollouts.jsonl"],
                "RUN_DIR is a file, not a directory: run/rollouts.jsonl"
                " (pass its run directory: rollout-sidecar health-check run)",
            ),
            (["health-check", "run", "--ignore", "nope,zap"], "Unknown rollout health check(s): nope, zap"),
        ],
    )
    def test_one_line_error_exit_two(
        self, run_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
    ) -> None:
        assert main(argv) == 2
        out, err = _report(capsys)
        assert out == ""
        assert err == f"rollout-sidecar health-check: error: {message}\n"
        assert not (run_dir / "quality_summary.json").exists()

    def test_workers_out_of_range_is_refused_by_the_parser_in_one_line(
        self, run_dir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as exited:
            main(["health-check", "run", "--workers", "0"])
        assert exited.value.code == 2
        assert _report(capsys)[1] == (
            "rollout-sidecar health-check: error: argument --workers: must be in 1..256, got '0' "
            "(usage: rollout-sidecar health-check --help)\n"
        )
        assert not (run_dir / "quality_summary.json").exists()

    def test_a_file_for_the_directory_names_the_flag_too(
        self, run_dir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        (run_dir / "other.jsonl").write_bytes(ROW + b"\n")
        assert main(["health-check", "run/other.jsonl"]) == 2
        fix = "rollout-sidecar health-check run --rollouts-file other.jsonl"
        assert _report(capsys)[1].endswith(f"(pass its run directory: {fix})\n")

    def test_an_empty_directory_names_the_default_file(
        self, run_dir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        (run_dir / "empty").mkdir()
        assert main(["health-check", "run/empty"]) == 2
        assert _report(capsys)[1] == (
            "rollout-sidecar health-check: error: Rollout JSONL not found: run/empty/rollouts.jsonl"
            " (the default; --rollouts-file names another)\n"
        )
        assert list((run_dir / "empty").iterdir()) == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class TestProgress:
    def test_no_bar_for_pipes_or_small_inputs(self) -> None:
        with terminal_progress(10**12, io.StringIO()) as progress:
            assert progress is None
        with terminal_progress(10, _Terminal()) as progress:
            assert progress is None

    def test_bar_on_a_terminal_for_large_inputs(self) -> None:
        stream = _Terminal()
        with terminal_progress(1000, stream, min_bytes=100) as progress:
            assert progress is not None
            progress(500, 1000)
            progress(1000, 1000)
        assert "health-check" in stream.getvalue()


def test_console_script_runs_as_a_process(run_dir: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "health-check", "run", "--workers", "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("Rollout health: 2 checked")
    assert completed.stderr == ""


def test_importing_the_cli_does_not_import_the_pipeline() -> None:
    code = (
        "import sys, health.cli, sidecar.cli; "
        "print(sorted(m for m in ('health.digest', 'health.contract', 'rich') if m in sys.modules))"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "[]"


def _many_small_rollouts(count: int) -> list[bytes]:
    """``count`` small rollouts over ``count // 4`` tasks, with a torn line and a string task index."""
    row = orjson.loads(ROW)
    lines = []
    for number in range(count):
        row["_ng_task_index"], row["_ng_rollout_index"] = number // 4, number % 4
        lines.append(orjson.dumps(row))
    lines[1] = lines[1][: len(lines[1]) // 2]  # torn: record_unreadable
    lines[2] = lines[2].replace(b'"_ng_task_index":0', b'"_ng_task_index":"task-0"')
    return lines


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_local_check_runs_without_collector_passes_and_restores_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    """The check's digests hold no cycles: the only pass is the one before the pipeline's import."""
    import gc

    lines = _many_small_rollouts(3000)
    (tmp_path / "rollouts.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.chdir(tmp_path)
    passes: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(record)
    try:
        assert main(["health-check", ".", "--workers", workers]) == 0
    finally:
        gc.callbacks.remove(record)
    assert capsys.readouterr().out.startswith(f"Rollout health: {len(lines)} checked")
    assert passes == [2]
    assert gc.isenabled()


def test_a_serial_check_leaves_no_cyclic_garbage(tmp_path: Path) -> None:
    """What makes running a check without collector passes safe: everything it drops is freed by
    reference counting alone."""
    import gc

    from health.api import check_rollout_files
    from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

    config = SyntheticConfig(num_tasks=30, repeats_per_task=4, faults=FaultRates.mixed(0.05))
    lines = [orjson.dumps(row) for row in generate_rows(config, 5)] + _many_small_rollouts(200)
    (tmp_path / "rollouts.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    check_rollout_files(tmp_path / "rollouts.jsonl", workers=1)  # imports, caches
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    try:
        run = check_rollout_files(tmp_path / "rollouts.jsonl", workers=1)
        assert len(run.reducer) == len(lines)
        del run
        assert gc.collect() == 0
    finally:
        if collecting:
            gc.enable()
