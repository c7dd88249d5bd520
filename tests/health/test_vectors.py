"""Every conformance vector, byte for byte, through the real CLI and the public API.

Each example is copied under the same folder name into a scratch directory that becomes
the working directory, so ``run_dir`` is relative exactly as when the vectors were made
(it appears in unreadable-line locators and in the printed summary path).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from health import health_check_run_dir
from health.explain import explain_unobserved
from sidecar.cli import main
from tests.vectors import health_example_names

# Parametrization happens at collection, before fixtures exist; ``test_examples_are_discovered``
# cross-checks this list against the ``spec_examples`` fixture.
EXAMPLES = health_example_names()


def _stage(spec_examples: Path, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    source = spec_examples / "health" / name
    shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("expected"))
    for path in (tmp_path / name).rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    (tmp_path / name).chmod(0o755)
    monkeypatch.chdir(tmp_path)
    args: dict[str, Any] = json.loads((source / "args.json").read_text())
    assert args["run_dir"] == name
    return args


def _assert_reports(spec_examples: Path, name: str, tmp_path: Path) -> None:
    expected = spec_examples / "health" / name / "expected"
    for report in ("quality_summary.json", "rollout_verdicts.jsonl"):
        assert (tmp_path / name / report).read_bytes() == (expected / report).read_bytes(), (name, report)


def test_examples_are_discovered(spec_examples: Path) -> None:
    manifest = json.loads((spec_examples / "health" / "manifest.json").read_text())
    assert sorted(entry["name"] for entry in manifest) == EXAMPLES
    assert len(EXAMPLES) == 19


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", EXAMPLES)
def test_cli_matches_vector(
    name: str,
    workers: int,
    spec_examples: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _stage(spec_examples, name, tmp_path, monkeypatch)
    argv = ["health-check", name, "--workers", str(workers)]
    if args["ignored_checks"]:
        argv += ["--ignore-checks", ",".join(args["ignored_checks"])]
    if args["rollout_file"] is not None:
        argv += ["--rollouts-file", args["rollout_file"]]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.out == (spec_examples / "health" / name / "expected" / "stdout.txt").read_text()
    summary = json.loads((spec_examples / "health" / name / "expected" / "quality_summary.json").read_text())
    reason = explain_unobserved(summary)  # the only stderr: why an all-unobserved run is so
    assert out.err == ("" if reason is None else f"rollout-sidecar health-check: {reason}\n")
    _assert_reports(spec_examples, name, tmp_path)


@pytest.mark.parametrize("name", EXAMPLES)
def test_api_matches_vector(
    name: str,
    spec_examples: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _stage(spec_examples, name, tmp_path, monkeypatch)
    result = health_check_run_dir(
        args["run_dir"],
        rollout_file=args["rollout_file"],
        workers=args["workers"],
        ignored_checks=args["ignored_checks"],
        json_output=args["json_output"],
    )
    assert (
        capsys.readouterr().out == (spec_examples / "health" / name / "expected" / "stdout.txt").read_text()
    )
    _assert_reports(spec_examples, name, tmp_path)
    assert result.summary_path == Path(name) / "quality_summary.json"
    assert result.verdicts_path == Path(name) / "rollout_verdicts.jsonl"
    assert len(result.rollouts) == result.summary["run"]["artifacts"]["records"]
    assert [digest.ordinal for digest in result.rollouts] == list(range(len(result.rollouts)))
    verdicts = result.summary["run"]["verdicts"]
    assert [d.verdict for d in result.rollouts].count("unhealthy") == verdicts["unhealthy"]


def _cases(spec_examples: Path) -> list[dict[str, Any]]:
    lines = (spec_examples / "health_cases.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_health_cases_jsonl(
    spec_examples: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _cases(spec_examples)
    assert len(cases) == 19
    monkeypatch.chdir(tmp_path)
    for case in cases:
        run_dir = tmp_path / case["run_dir"]
        run_dir.mkdir()
        (run_dir / (case["rollout_file"] or "rollouts.jsonl")).write_text(
            case["input_jsonl"], encoding="utf-8"
        )
        health_check_run_dir(
            case["run_dir"],
            rollout_file=case["rollout_file"],
            workers=case["workers"],
            ignored_checks=case["ignored_checks"],
        )
        expected = case["expected"]
        assert capsys.readouterr().out == expected["stdout"], case["id"]
        assert (run_dir / "quality_summary.json").read_text(encoding="utf-8") == expected[
            "quality_summary_json"
        ]
        assert (run_dir / "rollout_verdicts.jsonl").read_text(encoding="utf-8") == expected[
            "rollout_verdicts_jsonl"
        ], case["id"]


@pytest.mark.parametrize(
    "name", ["03_unreadable_lines", "16_duplicates_and_stages", "19_identity_and_sorting"]
)
def test_json_output_is_the_compact_summary(
    name: str,
    spec_examples: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _stage(spec_examples, name, tmp_path, monkeypatch)
    assert main(["health-check", name, "--json", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    expected = (spec_examples / "health" / name / "expected" / "quality_summary.json").read_bytes()
    assert printed == json.dumps(json.loads(expected), separators=(",", ":"), ensure_ascii=False) + "\n"
    _assert_reports(spec_examples, name, tmp_path)
