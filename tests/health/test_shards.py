"""``--glob``: shard files resolved like ``gym eval aggregate``, checked as one run."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from health import run_health_checks
from health.shards import resolve_shard_paths
from sidecar.cli import main

from .shard_corpus import write_shards

REPORTS = ("quality_summary.json", "rollout_verdicts.jsonl")


def _reports(directory: Path) -> list[bytes]:
    return [(directory / name).read_bytes() for name in REPORTS]


class TestResolve:
    def test_sorted_deduplicated_side_files_skipped(self, tmp_path: Path) -> None:
        paths = write_shards(tmp_path / "run")
        (tmp_path / "run" / "rollout_verdicts.jsonl").write_bytes(b"{}\n")
        run_dir, found = resolve_shard_paths(
            tmp_path / "run", ["rollouts-rs*.jsonl", "*.jsonl", "rollouts-rs1*"]
        )
        assert run_dir == tmp_path / "run"
        assert found == paths
        assert [str(path) for path in found] == sorted(str(path) for path in found)

    def test_recursive_pattern(self, tmp_path: Path) -> None:
        write_shards(tmp_path / "run" / "seed-1", shards=2)
        write_shards(tmp_path / "run" / "seed-0", shards=1)
        _, found = resolve_shard_paths(tmp_path / "run", ["**/rollouts-*.jsonl"])
        assert [path.relative_to(tmp_path / "run").as_posix() for path in found] == [
            "seed-0/rollouts-rs0-chunk0.jsonl",
            "seed-1/rollouts-rs0-chunk0.jsonl",
            "seed-1/rollouts-rs1-chunk1.jsonl",
        ]

    @pytest.mark.parametrize(
        ("patterns", "error", "message"),
        [
            (["nothing-*.jsonl"], FileNotFoundError, "matched no rollouts file"),
            (["*_failures.jsonl"], FileNotFoundError, "matched no rollouts file"),
            (["  "], ValueError, "--glob pattern is empty"),
            (["x" * 5000], ValueError, "at most 4096"),
            (["*.jsonl"] * 300, ValueError, "at most 256"),
            ([], ValueError, "at least one --glob"),
        ],
    )
    def test_bad_patterns(self, tmp_path: Path, patterns: list[str], error: type, message: str) -> None:
        write_shards(tmp_path / "run", shards=1)
        with pytest.raises(error, match=message):
            resolve_shard_paths(tmp_path / "run", patterns)


class TestCli:
    def test_glob_equals_the_api_over_sorted_paths(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "run"
        paths = write_shards(run_dir)
        expected = tmp_path / "expected"
        run_health_checks(paths, output_dir=expected, workers=1)
        for workers in ("1", "2"):
            assert (
                main(["health-check", str(run_dir), "--glob", "rollouts-rs*.jsonl", "--workers", workers])
                == 0
            )
            assert _reports(run_dir) == _reports(expected)
        out = capsys.readouterr().out
        assert out.endswith(f"Quality summary: {run_dir / 'quality_summary.json'}\n")

    def test_cross_shard_semantics(self, tmp_path: Path) -> None:
        run_dir = tmp_path / "run"
        paths = write_shards(run_dir)
        assert main(["health-check", str(run_dir), "--glob", "rollouts-*.jsonl", "--workers", "2"]) == 0
        summary, verdicts = _reports(run_dir)
        rows = [orjson.loads(line) for line in verdicts.splitlines()]
        # record(shard, 0) repeats an identity that another shard also holds.
        assert orjson.loads(summary)["run"]["issues"]["rollout_duplicate_identity"] >= 6
        # Unreadable lines name their input index and file; the third shard is input 2.
        locators = {
            (row["_ng_task_index"].split(":line-")[0], f["locator"]["source_file"])
            for row in rows
            for f in row["findings"]
            if f["check"] == "record_unreadable"
        }
        assert ("__unreadable_record__:input-2", str(paths[2])) in locators
        # A record without _ng_task_index takes its ordinal over all shards, not within one.
        before_third = sum(1 for path in paths[:2] for line in path.read_bytes().split(b"\n") if line.strip())
        fallback = [
            row["_ng_task_index"]
            for row in rows
            if row["_ng_rollout_index"] == 2
            and isinstance(row["_ng_task_index"], int)
            and row["_ng_task_index"] >= 12
        ]
        assert len(fallback) == 1
        assert fallback[0] >= before_third
        # Each task's repeats come from several shards and are reduced together.
        tasks = orjson.loads(summary)["tasks"]
        assert all(tasks[str(task)]["repeats"] >= 3 for task in range(12))

    def test_glob_with_rollouts_file_is_an_error(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        write_shards(tmp_path / "run", shards=1)
        argv = ["health-check", str(tmp_path / "run"), "--glob", "*.jsonl", "--rollouts-file", "x.jsonl"]
        assert main(argv) == 2
        assert "mutually exclusive" in capsys.readouterr().err

    def test_no_match_is_a_one_line_error(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        write_shards(tmp_path / "run", shards=1)
        assert main(["health-check", str(tmp_path / "run"), "--glob", "nope-*.jsonl"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "'nope-*.jsonl' matched no rollouts file" in err
