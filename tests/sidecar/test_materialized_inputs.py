"""Deriving a plan from a client-named materialized-inputs file: only bounded regular files."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from sidecar.ingest import PlanError, plan_from_materialized


def _inputs(path: Path, tasks: list[int]) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"_ng_task_index": t, "prompt": "p"}) + b"\n" for t in tasks))
    return path


class TestPlanFromMaterialized:
    def test_counts_repeats_per_task(self, tmp_path: Path) -> None:
        path = _inputs(tmp_path / "rollouts_materialized_inputs.jsonl", [0, 0, 3, 0, 3])
        assert plan_from_materialized(str(path)) == {"0": 3, "3": 2}

    def test_a_fifo_is_refused_without_blocking(self, tmp_path: Path) -> None:
        fifo = tmp_path / "inputs.fifo"
        os.mkfifo(fifo)
        with pytest.raises(PlanError, match="not a regular file") as caught:
            plan_from_materialized(str(fifo))
        assert caught.value.field == "materialized_inputs"

    @pytest.mark.parametrize("path", ["/dev/zero", "/"])
    def test_devices_and_directories_are_refused(self, path: str) -> None:
        with pytest.raises(PlanError, match="not a regular file"):
            plan_from_materialized(path)

    def test_a_file_over_the_limit_is_refused(self, tmp_path: Path) -> None:
        path = _inputs(tmp_path / "big.jsonl", list(range(100)))
        with pytest.raises(PlanError, match="over the 64-byte limit"):
            plan_from_materialized(str(path), max_bytes=64)

    def test_a_missing_file_names_the_path(self, tmp_path: Path) -> None:
        missing = tmp_path / "nope.jsonl"
        with pytest.raises(PlanError, match="cannot read materialized inputs"):
            plan_from_materialized(str(missing))
