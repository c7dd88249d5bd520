"""The one-line reason for a mostly unobserved run: on stderr, never in stdout or the report files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from health.explain import TRAJECTORY_CHECK_IDS, explain_unobserved
from sidecar.cli import main


def _summary(spec_examples: Path, name: str) -> dict[str, object]:
    data: dict[str, object] = orjson.loads(
        (spec_examples / "health" / name / "expected" / "quality_summary.json").read_bytes()
    )
    return data


def test_the_nine_trajectory_checks() -> None:
    assert len(TRAJECTORY_CHECK_IDS) == 9
    assert TRAJECTORY_CHECK_IDS[0] == "rollout_missing_agent_turns"


def test_rows_without_a_trajectory(spec_examples: Path) -> None:
    reason = explain_unobserved(_summary(spec_examples, "02_no_trajectory"))
    assert reason is not None and reason.startswith("2 unobserved: no ng_trajectory in these rows")


def test_rows_whose_trajectory_lacks_the_calls_name_the_blind_checks(spec_examples: Path) -> None:
    reason = explain_unobserved(_summary(spec_examples, "12_capture_gaps"))
    assert reason is not None and reason.startswith("3 unobserved: the rows' ng_trajectory lacks")
    assert "model_call_failed" in reason and "rollout_missing_agent_turns" not in reason


def test_most_rows_unobserved_says_how_many_of_all(spec_examples: Path) -> None:
    reason = explain_unobserved(_summary(spec_examples, "19_identity_and_sorting"))  # 6 of 7
    assert reason is not None and reason.startswith("6 of 7 unobserved: no ng_trajectory in these rows")


@pytest.mark.parametrize("name", ["01_healthy", "03_unreadable_lines"])
def test_silent_unless_most_rows_are_unobserved(spec_examples: Path, name: str) -> None:
    assert explain_unobserved(_summary(spec_examples, name)) is None


def test_the_cli_says_it_on_stderr_and_keeps_stdout_identical(
    spec_examples: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = spec_examples / "health" / "02_no_trajectory"
    shutil.copyfile(source / "rollouts.jsonl", tmp_path / "rollouts.jsonl")
    (tmp_path / "02_no_trajectory").mkdir()
    shutil.move(tmp_path / "rollouts.jsonl", tmp_path / "02_no_trajectory" / "rollouts.jsonl")
    assert json.loads((source / "args.json").read_text())["ignored_checks"] == []
    monkeypatch.chdir(tmp_path)
    assert main(["health-check", "02_no_trajectory", "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert out == (source / "expected" / "stdout.txt").read_text()
    assert err.startswith("rollout-sidecar health-check: 2 unobserved: no ng_trajectory in these rows")
    assert err.count("\n") == 1
