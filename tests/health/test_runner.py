"""The batch runner and API: parallel == serial, several files, fallbacks, argument errors."""

from __future__ import annotations

import os
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path

import orjson
import pytest

from health import check_rollout_files, run_health_checks
from health.runner import map_into_reducer

from .shard_corpus import GOOD_CALL


def _record(task: object, rollout: object, answer: str = "a", status: int = 200) -> bytes:
    call = dict(GOOD_CALL, response_metadata=dict(GOOD_CALL["response_metadata"], status_code=status))  # type: ignore[arg-type]
    trajectory = {
        "task_id": "t",
        "rollout_id": "r",
        "turns": [
            {
                "invocation_id": "main",
                "task_id": "t",
                "rollout_id": "r",
                "turn_no": 1,
                "timestamp": 1.0,
                "step_count": 1,
                "answer": answer,
                "model_calls": [{"model_call_id": "c1"}],
            }
        ],
        "model_calls": [call],
    }
    row = {
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "response": {"usage": {"input_tokens": 10, "output_tokens": 5}},
    }
    row["ng_trajectory"] = trajectory
    return orjson.dumps(row)


def _corpus(tmp_path: Path) -> list[Path]:
    first = tmp_path / "a" / "part-0.jsonl"
    second = tmp_path / "b" / "part-1.jsonl"
    first.parent.mkdir()
    second.parent.mkdir()
    lines_a = [
        _record(t, r, "" if (t + r) % 3 == 0 else "a", 500 if t == 4 else 200)
        for t in range(6)
        for r in range(3)
    ]
    lines_a[4:4] = [b"", b"  \t", b"{torn", b"[1]"]
    first.write_bytes(b"\n".join(lines_a) + b"\n")
    lines_b = [b'{"_ng_rollout_index": 1}', _record(2, 1), b"", _record("x", 0), b'{"_ng_task_index": null}']
    second.write_bytes(b"\r\n".join(lines_b))
    return [first, second]


def _reports(directory: Path) -> tuple[bytes, bytes]:
    return (directory / "quality_summary.json").read_bytes(), (
        directory / "rollout_verdicts.jsonl"
    ).read_bytes()


class TestParallelMatchesSerial:
    def test_two_files_any_worker_count(self, tmp_path: Path) -> None:
        paths = _corpus(tmp_path)
        outputs = []
        for workers in (1, 2, 3):
            out = tmp_path / f"out{workers}"
            result = run_health_checks(paths, output_dir=out, workers=workers)
            outputs.append(_reports(out))
            assert [d.ordinal for d in result.rollouts] == list(range(len(result.rollouts)))
        assert outputs[0] == outputs[1] == outputs[2]
        summary = orjson.loads(outputs[0][0])
        assert summary["run"]["artifacts"]["records"] == 18 + 2 + 4
        assert summary["run"]["issues"]["rollout_duplicate_identity"] == 2
        rows = [orjson.loads(line) for line in outputs[0][1].splitlines()]
        locators = [
            f["locator"] for row in rows for f in row["findings"] if f["check"] == "record_unreadable"
        ]
        assert {"source_file": str(paths[0]), "line": 7} in locators
        assert {"source_file": str(paths[1]), "line": 5} in locators
        # The line without a task index takes its ordinal, counted across both files.
        assert any(row["_ng_task_index"] == 20 and row["rollout_id"] == "20-1" for row in rows)

    def test_default_output_dir_is_the_first_inputs_parent(self, tmp_path: Path) -> None:
        paths = _corpus(tmp_path)
        result = run_health_checks(paths[0], workers=2)
        assert result.summary_path == paths[0].parent / "quality_summary.json"
        assert result.verdicts_path.is_file()


def _unavailable(workers: int) -> Executor:
    raise OSError(f"no semaphores for {workers} workers")


def _crash_worker() -> None:
    os._exit(3)


def _broken(workers: int) -> Executor:
    return ProcessPoolExecutor(max_workers=workers, initializer=_crash_worker)


class TestFallbacks:
    def test_pool_unavailable_runs_serially_with_warning(self, tmp_path: Path) -> None:
        paths = [str(p) for p in _corpus(tmp_path)]
        serial = map_into_reducer(paths, workers=1, ignored_checks=frozenset())
        with pytest.warns(
            RuntimeWarning, match=r"^Process pool unavailable \(no semaphores for 2 workers\); "
        ):
            fallback = map_into_reducer(
                paths, workers=2, ignored_checks=frozenset(), pool_factory=_unavailable
            )
        assert fallback.summary_bytes() == serial.summary_bytes()
        assert list(fallback.iter_verdict_lines()) == list(serial.iter_verdict_lines())

    def test_broken_pool_reruns_everything_serially(self, tmp_path: Path) -> None:
        paths = [str(p) for p in _corpus(tmp_path)]
        serial = map_into_reducer(paths, workers=1, ignored_checks=frozenset({"agent_turn_hollow"}))
        with pytest.warns(
            RuntimeWarning, match=r"^Process pool failed \(.*\); running rollout health checks serially\.$"
        ):
            fallback = map_into_reducer(
                paths, workers=2, ignored_checks=frozenset({"agent_turn_hollow"}), pool_factory=_broken
            )
        assert fallback.summary_bytes() == serial.summary_bytes()
        assert list(fallback.iter_verdict_lines()) == list(serial.iter_verdict_lines())

    def test_a_single_line_never_starts_a_pool(self, tmp_path: Path) -> None:
        path = tmp_path / "one.jsonl"
        path.write_bytes(b"\n" + _record(0, 0) + b"\n\n")
        reducer = map_into_reducer(
            [str(path)], workers=4, ignored_checks=frozenset(), pool_factory=_unavailable
        )
        assert len(reducer) == 1

    @pytest.mark.parametrize(("size", "workers", "splits"), [(3 << 30, 2, 58), (100 << 20, 2, 11), (7, 4, 7)])
    def test_splits_are_at_most_64_mib_and_shrink_to_4_mib_at_the_end(
        self, tmp_path: Path, size: int, workers: int, splits: int
    ) -> None:
        """Each split costs the parent a pool round trip whatever its size, and the last ones
        decide how evenly the workers finish: a large input is cut into 64 MiB splits while
        much is left, then into smaller ones down to 4 MiB (a tiny input into about four per
        worker)."""
        from health.runner import _plan

        path = tmp_path / "sparse.jsonl"
        with open(path, "wb") as handle:
            handle.truncate(size)  # planning reads sizes only
        planned = _plan([str(path)], workers, size)
        lengths = [split.end - split.start for split in planned]
        assert len(planned) == splits
        assert max(lengths) <= 64 << 20
        assert lengths == sorted(lengths, reverse=True)
        assert max(lengths[-4:]) <= 4 << 20
        assert planned[-1].end == size


class TestArguments:
    def test_empty_sequence(self) -> None:
        with pytest.raises(ValueError, match=r"^at least one rollout JSONL path is required$"):
            run_health_checks([])

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match=f"^Rollout JSONL not found: {tmp_path / 'nope.jsonl'}$"):
            run_health_checks(tmp_path / "nope.jsonl")

    def test_a_plain_string_is_iterated_like_nemo_gym(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match=r"^Rollout JSONL not found: /$"):
            run_health_checks(str(tmp_path))

    def test_workers_below_one(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        path.write_bytes(_record(0, 0))
        with pytest.raises(ValueError, match=r"^workers must be at least 1$"):
            run_health_checks(path, workers=0)
        assert not (tmp_path / "quality_summary.json").exists()

    def test_unknown_check_ids_are_sorted_in_the_message(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        path.write_bytes(_record(0, 0))
        with pytest.raises(ValueError, match=r"^Unknown rollout health check\(s\): a,b, zz$"):
            run_health_checks(path, ignored_checks=["zz", " a,b ", "model_call_failed"])

    def test_string_ignored_checks_are_split_and_deduplicated(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        path.write_bytes(_record(0, 0, answer=""))
        run = check_rollout_files([path], workers=1, ignored_checks=" agent_turn_hollow,,agent_turn_hollow ")
        assert run.summary["run"]["ignored_checks"] == ["agent_turn_hollow"]
        assert run.summary["run"]["verdicts"]["healthy"] == 1

    def test_empty_input_writes_empty_reports(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        path.write_bytes(b"\n  \n")
        result = run_health_checks(path, workers=2)
        assert result.verdicts_path.read_bytes() == b""
        assert result.summary["run"]["artifacts"]["records"] == 0
        assert result.rollouts == []
