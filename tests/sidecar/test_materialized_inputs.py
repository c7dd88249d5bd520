"""Deriving a plan from a client-named materialized-inputs file: only NeMo Gym's file name,
regular and not a symlink, optionally under a root, streamed with a line cap; one answer for
every refusal."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from sidecar.ingest.plans import MATERIALIZED_REFUSED, PlanError, plan_from_materialized

NAME = "rollouts_materialized_inputs.jsonl"


def _inputs(path: Path, tasks: list[int]) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"_ng_task_index": t, "prompt": "p"}) + b"\n" for t in tasks))
    return path


def _refused(path: str | Path, **options: object) -> str:
    with pytest.raises(PlanError) as caught:
        plan_from_materialized(str(path), **options)  # type: ignore[arg-type]
    assert caught.value.field == "materialized_inputs"
    return str(caught.value)


class TestPlanFromMaterialized:
    def test_counts_repeats_per_task(self, tmp_path: Path) -> None:
        path = _inputs(tmp_path / NAME, [0, 0, 3, 0, 3])
        assert plan_from_materialized(str(path)) == {"0": 3, "3": 2}

    def test_a_last_line_without_newline_counts(self, tmp_path: Path) -> None:
        path = tmp_path / NAME
        path.write_bytes(b'{"_ng_task_index": 1}\n{"_ng_task_index": 2}')
        assert plan_from_materialized(str(path)) == {"1": 1, "2": 1}

    def test_every_refusal_gives_the_same_message(self, tmp_path: Path) -> None:
        fifo = tmp_path / f"fifo{NAME}"
        os.mkfifo(fifo)
        (tmp_path / f"dir{NAME}").mkdir()
        link = tmp_path / f"link{NAME}"
        link.symlink_to(_inputs(tmp_path / f"target{NAME}", [1]))
        garbage = tmp_path / f"garbage{NAME}"
        garbage.write_bytes(b"root:x:0:0\n")
        no_index = tmp_path / f"noindex{NAME}"
        no_index.write_bytes(b'{"a": 1}\n')
        messages = {
            _refused(path)
            for path in (
                "/etc/passwd",
                "/proc/self/environ",
                "/dev/zero",
                "/",
                fifo,
                tmp_path / f"dir{NAME}",
                link,
                garbage,
                no_index,
                tmp_path / f"missing{NAME}",
                _inputs(tmp_path / "other.jsonl", [1]),
            )
        }
        assert messages == {MATERIALIZED_REFUSED}

    def test_a_root_confines_reads(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        root.mkdir()
        inside = _inputs(root / NAME, [4])
        outside = _inputs(tmp_path / NAME, [4])
        assert plan_from_materialized(str(inside), root=root) == {"4": 1}
        assert _refused(outside, root=root) == MATERIALIZED_REFUSED
        assert _refused(root / ".." / NAME, root=root) == MATERIALIZED_REFUSED

    def test_a_line_over_the_cap_is_refused_without_reading_it_whole(self, tmp_path: Path) -> None:
        path = tmp_path / NAME
        path.write_bytes(b'{"_ng_task_index": 1, "p": "' + b"x" * 5_000_000 + b'"}\n')
        assert _refused(path, max_line_bytes=1 << 20) == MATERIALIZED_REFUSED
        assert plan_from_materialized(str(path), max_line_bytes=8 << 20) == {"1": 1}

    def test_a_file_over_the_size_limit_is_refused(self, tmp_path: Path) -> None:
        path = _inputs(tmp_path / NAME, list(range(100)))
        assert _refused(path, max_bytes=64) == MATERIALIZED_REFUSED

    def test_more_tasks_than_the_cap_name_the_option(self, tmp_path: Path) -> None:
        path = _inputs(tmp_path / NAME, [1, 2, 3])
        assert "--max-plan-tasks" in _refused(path, max_tasks=2)
        assert plan_from_materialized(str(path), max_tasks=3) == {"1": 1, "2": 1, "3": 1}
