"""Event models: strict, closed, and idempotency keys that tell retries from second records."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sidecar.http.errors import RequestError
from sidecar.http.ingest_handlers import parse_events
from sidecar.ingest.events import (
    MAX_SECONDS,
    EventBatch,
    content_hash,
    event_identity,
    idempotency_key,
    loads_in_pieces,
)


def _one(body: dict[str, Any]) -> Any:
    return EventBatch.validate_python([body])[0]


class TestValidation:
    @pytest.mark.parametrize(
        "body",
        [
            {"kind": "completed", "seconds": "3", "row": {}},  # strict: no numeric strings
            {"kind": "completed", "seconds": 3.0},  # neither row nor line
            {"kind": "completed", "seconds": 3.0, "row": {}, "line": "{}"},  # both
            {"kind": "completed", "seconds": 3.0, "line": "  \n"},  # blank line
            {"kind": "completed", "seconds": 3.0, "row": []},
            {"kind": "failed", "terminal": "yes"},
            {"kind": "run_started", "plan": {"0": 0}},
            {"kind": "run_started", "dispatch_budget_s": -1},
            {"kind": "run_started", "plan": {"0": 1}, "materialized_inputs": "x.jsonl"},
            {"kind": "run_started", "ignored_checks": ["no_such_check"]},
            {"kind": "drained", "task_index": 1.5},
            {"kind": "run_ended", "extra": True},
        ],
    )
    def test_rejected(self, body: dict[str, Any]) -> None:
        with pytest.raises(ValidationError):
            _one(body)

    def test_batch_bounds(self) -> None:
        with pytest.raises(ValidationError):
            EventBatch.validate_python([])
        assert len(EventBatch.validate_python([{"kind": "run_ended"}] * 3)) == 3


class TestIdentity:
    def test_identity_defaults_to_the_row(self) -> None:
        row = {"_ng_task_index": 4, "_ng_rollout_index": 2, "_ng_attempt_index": 1}
        assert event_identity(_one({"kind": "completed", "seconds": 1.0, "row": row})) == (4, 2, 1)
        explicit = _one({"kind": "failed", "task_index": "t", "rollout_index": 0, "attempt": 3, "row": row})
        assert event_identity(explicit) == ("t", 0, 3)
        line = _one({"kind": "completed", "seconds": 1.0, "line": '{"_ng_task_index": 9}'})
        assert event_identity(line) == (9, 0, 0)


class TestComputedOnce:
    def test_identity_is_worked_out_once_and_equality_ignores_it(self) -> None:
        body = {"kind": "completed", "seconds": 1.0, "row": {"_ng_task_index": 4, "_ng_attempt_index": 2}}
        event, twin = _one(body), _one(body)
        assert event.identity == (4, 0, 2)
        assert event.identity is event.identity  # kept, not worked out again
        assert event == twin  # twin never worked it out: only the fields are compared
        with pytest.raises(ValidationError):  # still frozen
            event.seconds = 2.0


class TestKeys:
    def test_retry_is_a_duplicate_but_a_different_row_is_not(self) -> None:
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0, "x": 1}
        first = idempotency_key("r", _one({"kind": "completed", "seconds": 1.0, "row": row}))
        retry = idempotency_key("r", _one({"kind": "completed", "seconds": 2.0, "row": dict(row)}))
        other = idempotency_key("r", _one({"kind": "completed", "seconds": 1.0, "row": {**row, "x": 2}}))
        assert first == retry != other
        assert first.startswith("r|1|0|0|completed|")

    def test_the_content_part_is_a_128_bit_hash_of_the_bytes_as_sent(self) -> None:
        sent = b'{"_ng_task_index": 1,  "x": "\\u00e9"}'  # not orjson's formatting
        (event,) = parse_events(b'[{"kind":"completed","row":' + sent + b"}]")
        key = idempotency_key("r", event)
        head, _, digest = key.rpartition("|")
        assert head == "r|1|0|0|completed"
        assert digest == content_hash(sent)
        assert len(digest) == 32 and int(digest, 16) >= 0  # 128 bits, hex
        # one byte apart, or the same bytes re-spaced, is another content
        assert content_hash(sent.replace(b"1", b"2")) != digest
        assert content_hash(sent.replace(b",  ", b",")) != digest

    def test_kinds_runs_and_attempts_are_distinct(self) -> None:
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0}
        keys = {
            idempotency_key("r", _one({"kind": "failed", "row": row})),
            idempotency_key("r", _one({"kind": "failed", "attempt": 1, "row": row})),
            idempotency_key("r", _one({"kind": "drained", "row": row})),
            idempotency_key("s", _one({"kind": "drained", "row": row})),
            idempotency_key("r", _one({"kind": "failed", "row": {**row, "_ng_task_index": "1"}})),
            idempotency_key("r", _one({"kind": "run_started"})),
            idempotency_key("r", _one({"kind": "run_ended"})),
        }
        assert len(keys) == 7


class TestNumberRanges:
    @pytest.mark.parametrize(
        ("event", "field"),
        [
            ({"kind": "run_started", "dispatch_budget_s": 1e300}, "dispatch_budget_s"),
            ({"kind": "completed", "row": {}, "seconds": -1.0}, "seconds"),
            ({"kind": "completed", "row": {}, "latency_ms": 1e308}, "latency_ms"),
            ({"kind": "run_started", "plan": {"1": 10**7}}, "plan"),
            ({"kind": "latency", "op": "record", "seconds": 1.0, "source": "s", "seq": 2**63}, "seq"),
        ],
    )
    def test_past_the_range_is_refused_naming_the_field(self, event: dict[str, Any], field: str) -> None:
        with pytest.raises(ValidationError) as caught:
            EventBatch.validate_python([event])
        assert field in caught.value.errors()[0]["loc"]

    def test_the_bounds_themselves_are_accepted(self) -> None:
        events = EventBatch.validate_python(
            [
                {"kind": "run_started", "dispatch_budget_s": MAX_SECONDS, "plan": {"1": 1_000_000}},
                {"kind": "completed", "row": {}, "seconds": 0, "latency_ms": MAX_SECONDS * 1000},
            ]
        )
        assert events[0].dispatch_budget_s == MAX_SECONDS  # type: ignore[union-attr]


class TestLargeBodies:
    """A large bare array is split a piece at a time: the events are those of the whole body."""

    @staticmethod
    def _body(count: int) -> bytes:
        # rows that hold what a cut is tried before (``,{"kind":"completed"``), in a nested
        # object and in a string, so some cuts land inside an event
        decoy = {"kind": "completed", "text": ',{"kind":"completed"' * 20}
        events = [
            {
                "kind": "completed",
                "seconds": 1.0 + index,
                "row": {
                    "pad": "x" * 3000,
                    "calls": [decoy, decoy],
                    "_ng_task_index": index,
                    "_ng_rollout_index": 0,
                },
            }
            for index in range(count)
        ]
        return orjson.dumps(events)

    def test_events_equal_the_body_split_in_one_call(self) -> None:
        body = self._body(400)
        assert len(body) > 1_000_000
        events = parse_events(body)
        assert [getattr(event, "seconds", None) for event in events] == [1.0 + i for i in range(400)]
        assert events == parse_events(orjson.dumps({"events": orjson.loads(body)}))

    def test_a_broken_large_body_is_refused_as_one_body(self) -> None:
        body = self._body(400)
        with pytest.raises(RequestError) as cut:
            parse_events(body[:-1])
        with pytest.raises(RequestError) as trailing:
            parse_events(body + b"x")
        assert cut.value.status == trailing.value.status == 400


class TestLoadsInPieces:
    """A large row is parsed a container member at a time, to the same value as one orjson call."""

    @settings(max_examples=200, deadline=None)
    @given(
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(2**70), 2**70)
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=50),
            lambda inner: (
                st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=3), inner, max_size=5)
            ),
            max_leaves=60,
        ),
        st.sampled_from([1, 16, 64]),
    )
    def test_the_same_value_as_one_call(self, value: object, piece_bytes: int) -> None:
        data = json.dumps(value).encode()
        assert loads_in_pieces(memoryview(data), piece_bytes) == orjson.loads(data)

    def test_a_large_row_with_duplicate_keys_and_escapes(self) -> None:
        member = '"k\\u00e9\\"y":' + json.dumps(["x" * 1000] * 100)
        inner = "{" + ",".join([member, '"a":1', member.replace("k", "m"), '"a":[2]']) + "}"
        data = ('{"big":' + inner + ',"list":[' + ",".join([inner] * 3) + "]}").encode()
        assert len(data) > 256 * 1024
        assert loads_in_pieces(memoryview(data)) == orjson.loads(data)
        assert list(loads_in_pieces(memoryview(data))["big"]) == list(orjson.loads(data)["big"])  # key order
