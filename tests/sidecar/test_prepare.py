"""``prepare_row`` (the worker pool's per-row step) equals the stand-alone functions, validating once."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from health.compact import compact_digest
from health.contract import TrajectoryRecord
from health.digest import digest_record
from sidecar.prepare import prepare_row, rebase_digest
from sidecar.rollout_perf import build_ng_perf
from sidecar.synthetic import FaultRates, SyntheticConfig, generate_rows


def _rows() -> list[dict[str, Any]]:
    config = SyntheticConfig(
        num_tasks=30, repeats_per_task=2, payload_bytes_per_call=256, faults=FaultRates.mixed(0.06)
    )
    rows = list(generate_rows(config, 11))
    valid = next(row for row in rows if isinstance(row.get("ng_trajectory"), dict))
    rows.append({"_ng_task_index": None, "ng_trajectory": valid["ng_trajectory"]})  # invalid identity
    rows.append({"_ng_task_index": 1, "ng_trajectory": [1, 2]})
    rows.append({"_ng_task_index": 2, "ng_trajectory": {"task_id": "t"}})
    rows.append({"_ng_task_index": 3})
    return rows


@pytest.mark.parametrize("latency_ms", [None, 12.5, 7])
def test_prepare_row_equals_the_stand_alone_functions(latency_ms: float | None) -> None:
    ignored = frozenset({"tool_call_failed"})
    for row in _rows():
        prepared = prepare_row(orjson.dumps(row), "r.jsonl", ignored, latency_ms)
        expected_perf = build_ng_perf(row, latency_ms)
        assert orjson.dumps(prepared.ng_perf) == orjson.dumps(expected_perf)
        expected = compact_digest(
            digest_record(row, source_path="r.jsonl", line_number=0, ordinal=0, ignored_checks=ignored)
        )
        assert prepared.digest == expected
        assert (prepared.source_path, prepared.ignored_checks) == ("r.jsonl", ignored)


def test_prepare_row_validates_each_trajectory_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    original = TrajectoryRecord.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[TrajectoryRecord], obj: Any, *args: Any, **kwargs: Any) -> TrajectoryRecord:
        calls.append(obj)
        return original(cls, obj, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(TrajectoryRecord, "model_validate", classmethod(counting))
    rows = [row for row in _rows() if isinstance(row.get("_ng_task_index"), int)]
    with_trajectory = [row for row in rows if "ng_trajectory" in row]
    for row in rows:
        prepare_row(orjson.dumps(row), "", frozenset(), 1.0)
    assert len(calls) == len(with_trajectory)
    assert any(prepare_row(orjson.dumps(row), "", frozenset(), 1.0).ng_perf for row in with_trajectory)


def test_rebase_digest_moves_the_position_or_refuses() -> None:
    prepared = prepare_row(orjson.dumps(_rows()[0]), "", frozenset(), None)
    rebased = rebase_digest(prepared.digest, 9)
    assert rebased is not None and rebased.ordinal == 9
    assert rebase_digest({"not": "a digest"}, 9) is None
