"""The API event dicts both clients build, and their encoding."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from dispatcher_client.client import completed_event, encode_event, run_started_event
from sidecar.wire import row_identity as identity


def _nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


class TestEvents:
    def test_identity_takes_only_valid_keys(self) -> None:
        row = {"_ng_task_index": 3, "_ng_rollout_index": "r", "_ng_attempt_index": True}
        assert identity(row) == {"task_index": 3, "rollout_index": "r"}
        assert identity({"_ng_task_index": 1, "_ng_attempt_index": 2}) == {"task_index": 1, "attempt": 2}
        assert identity(None) == {}

    def test_run_started_leaves_out_what_was_not_given(self) -> None:
        event = run_started_event(
            plan={0: 4, "a": 1},
            dispatch_budget_s=None,
            drain_margin_s=0.0,
            materialized_inputs=None,
            fields={},
        )
        assert event == {"kind": "run_started", "plan": {"0": 4, "a": 1}, "drain_margin_s": 0.0}

    def test_deep_rows_are_encoded_past_orjsons_writer_limit(self) -> None:
        row = {"_ng_task_index": 0, "deep": _nested(400)}
        with pytest.raises(orjson.JSONEncodeError):
            orjson.dumps(row)
        data = encode_event(completed_event(row, row, 1.0, None))
        assert json.loads(data)["row"] == row
        assert orjson.loads(data)["row"] == row  # the sidecar reads it back with orjson

    def test_what_is_not_json_still_raises(self) -> None:
        with pytest.raises(orjson.JSONEncodeError):
            encode_event({"kind": "completed", "row": {"x": object()}})
