"""The wire contract both sides import: one plan reading, one row dump, one run-id rule."""

from __future__ import annotations

import io
import json
from pathlib import Path

import orjson
import pytest

from dispatcher_client.follow import FollowerError, _plan
from sidecar.ingest.plans import MATERIALIZED_REFUSED, PlanError, plan_from_materialized
from sidecar.wire import (
    RUN_ID_PATTERN,
    MaterializedInputsError,
    TooManyTasks,
    dump_row,
    materialized_lines,
    plan_from_lines,
    row_identity,
)

GOOD = b'{"_ng_task_index": 0}\n\n  \n{"_ng_task_index": 1}\n{"_ng_task_index": 0}'
BAD = [
    b'{"_ng_task_index": 0}\nnot json\n',
    b'{"_ng_task_index": 0}\n{"other": 1}\n',
    b'{"_ng_task_index": 0}\n[1, 2]\n',
]


def test_plan_counts_repeats_and_skips_blank_lines() -> None:
    assert plan_from_lines(materialized_lines(io.BytesIO(GOOD))) == {"0": 2, "1": 1}


def test_plan_lines_split_on_newline_only() -> None:
    # a form feed is no line break: the line holding one is not JSON
    data = b'{"_ng_task_index": 3}\x0c{"_ng_task_index": 4}\n{"_ng_task_index": 5}\r\n'
    with pytest.raises(MaterializedInputsError, match="line 1 is not JSON"):
        plan_from_lines(materialized_lines(io.BytesIO(data)))
    assert plan_from_lines(materialized_lines(io.BytesIO(data[22:]))) == {"4": 1, "5": 1}


@pytest.mark.parametrize("data", BAD)
def test_plan_refuses_a_line_without_a_task(data: bytes) -> None:
    with pytest.raises(MaterializedInputsError, match="line 2"):
        plan_from_lines(materialized_lines(io.BytesIO(data)))


def test_plan_caps_tasks_and_lines() -> None:
    with pytest.raises(TooManyTasks, match="more than 1 tasks"):
        plan_from_lines(materialized_lines(io.BytesIO(GOOD)), max_tasks=1)
    with pytest.raises(MaterializedInputsError, match="over the 10-byte cap"):
        list(materialized_lines(io.BytesIO(b"x" * 11 + b"\n"), 10))


@pytest.mark.parametrize(
    "data", [GOOD, b"", b"\n\n", b'{"_ng_task_index": 1}\x0c\n{"_ng_task_index": 2}', *BAD]
)
def test_follower_and_service_read_the_same_plan(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "r_materialized_inputs.jsonl"
    path.write_bytes(data)
    try:
        served: dict[str, int] | None = plan_from_materialized(str(path))
    except PlanError as exc:
        assert str(exc) == MATERIALIZED_REFUSED
        served = None
    if served is None:
        with pytest.raises(FollowerError, match="line"):
            _plan(path)
    else:
        assert _plan(path) == served


def test_follower_without_materialized_inputs_sends_no_plan(tmp_path: Path) -> None:
    assert _plan(tmp_path / "absent_materialized_inputs.jsonl") is None


def test_dump_row_writes_rows_deeper_than_orjson_can() -> None:
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    row = {"x": deep, "s": "é"}
    assert orjson.loads(dump_row(row)) == row
    assert dump_row({"a": 1}) == b'{"a":1}'
    assert json.loads(dump_row({1: 2}, orjson.OPT_NON_STR_KEYS)) == {"1": 2}
    with pytest.raises(orjson.JSONEncodeError):
        dump_row({"x": object()})


def test_row_identity_keeps_only_well_typed_keys() -> None:
    row = {"_ng_task_index": 3, "_ng_rollout_index": True, "_ng_attempt_index": -1}
    assert row_identity(row) == {"task_index": 3}
    assert row_identity({"_ng_task_index": "a", "_ng_rollout_index": 2, "_ng_attempt_index": 1}) == {
        "task_index": "a",
        "rollout_index": 2,
        "attempt": 1,
    }
    assert row_identity(None) == {}


@pytest.mark.parametrize(
    ("run_id", "ok"), [("run-1", True), ("a" * 128, True), ("a" * 129, False), ("-x", False)]
)
def test_run_id_pattern(run_id: str, ok: bool) -> None:
    assert bool(RUN_ID_PATTERN.fullmatch(run_id)) is ok
