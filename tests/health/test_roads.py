"""The per-record step's two roads give one digest: a line decoded straight from its bytes
(``health.line_record``) digests as the same line parsed by orjson and validated by the contract."""

from __future__ import annotations

import copy
import functools
from typing import Any

import orjson
import pytest

from health.compact import compact_digest
from health.contract import check_trajectory
from health.digest import digest_line, digest_line_compact, digest_record
from health.line_record import Refusal, decode_line, line_inputs
from health.parse import parse_line
from health.types import RolloutDigest
from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

_AT = {"source_path": "r.jsonl", "source_index": 0, "line_number": 3, "ordinal": 2}
_MARK = '"__edge__"'


@functools.cache
def _template() -> dict[str, Any]:
    config = SyntheticConfig(num_tasks=1, repeats_per_task=1, faults=FaultRates())
    return next(iter(generate_rows(config, 1)))


def _record(**changes: Any) -> dict[str, Any]:
    """The template with ``changes`` applied: ``a.b.0.c`` paths; the value ``...`` deletes."""
    record = copy.deepcopy(_template())
    for path, value in changes.items():
        *head, last = path.split(".")
        node: Any = record
        for key in head:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key: Any = int(last) if isinstance(node, list) else last
        if value is ...:
            del node[key]
        else:
            node[key] = value
    return record


def _full(line: bytes) -> RolloutDigest:
    record, error = parse_line(line)
    return digest_record(record, parse_error=error, **_AT)


def _fast(line: bytes) -> bool:
    decoded = decode_line(line.strip())
    return not isinstance(decoded, Refusal) and line_inputs(decoded, 2) is not None


def _agree(line: bytes) -> bool:
    """The step's digest equals the full road's (compact forms too); whether the fast road read it."""
    digest = digest_line(line, **_AT)
    assert digest == _full(line)
    assert digest_line_compact(line, **_AT)[0] == compact_digest(digest)
    return _fast(line)


def test_the_template_takes_the_fast_road_and_is_healthy() -> None:
    line = orjson.dumps(_template())
    assert _agree(line)
    assert digest_line(line, **_AT).verdict == "healthy"


@pytest.mark.parametrize(
    ("raw", "fast"),
    [
        (b'"plain"', True),
        (b'"\xff"', False),  # invalid UTF-8: orjson refuses the line
        (b'"\\ud800"', False),  # a lone surrogate escape
        (b"1e400", False),  # overflows to infinity
        (b"1e-400", True),  # underflows to 0.0
        (b"18446744073709551616", False),  # orjson reads a float: the full road decides
        (b"[" * 300 + b"]" * 300, False),  # deeper than the fast road vouches for
        (b"NaN", False),
    ],
)
@pytest.mark.parametrize("where", ["task_name", "ng_trajectory.model_calls.0.request"])
def test_edge_json_values(raw: bytes, fast: bool, where: str) -> None:
    line = orjson.dumps(_record(**{where: "__edge__"})).replace(_MARK.encode(), raw, 1)
    assert _agree(line) is fast


@pytest.mark.parametrize(
    "changes",
    [
        {"_ng_task_index": 2.0},  # coerced to 2, id from the raw "2.0"
        {"_ng_task_index": "5"},
        {"_ng_task_index": True},
        {"_ng_task_index": None},  # invalid identity
        {"_ng_task_index": ...},  # the ordinal stands in
        {"_ng_rollout_index": [1]},
        {"stage_index": 3},
        {"_ng_rollout_id": ""},
        {"ng_trajectory": None},
        {"ng_trajectory": ...},
        {"ng_trajectory": []},
        {"response": "text"},
        {"response.usage": {"input_tokens": 1, "output_tokens": True}},
        {"ng_trajectory.turns.0.turn_no": "1"},  # lax: the contract coerces
        {"ng_trajectory.turns.0.turn_no": 0},  # below the bound
        {"ng_trajectory.turns.0.timestamp": 3},
        {"ng_trajectory.turns.0.task_id": "other"},  # the record's rule
        {"ng_trajectory.model_calls.0.token_stats.prompt_tokens": -1},
        {"ng_trajectory.model_calls.0.response_metadata.status_code": 500},
        {"ng_trajectory.model_calls.0.response_metadata.finish_reason": "length"},
        {
            "ng_trajectory.model_calls.0.response_metadata.finish_reason": "length",
            "ng_trajectory.model_calls.0.response": None,
        },
        {"ng_trajectory.model_calls.0.colour": 1},  # a key the contract forbids
        {"ng_trajectory.model_calls.0.response_metadata.model_ref.extra": 1},  # dropped there
        {"ng_trajectory.tool_calls.0.completed_at": 0.0},  # before started_at
        {"ng_trajectory.invocations.0.model_calls": [{}]},  # a reference without a join key
        {"ng_trajectory.invocations.0.conversation": [{"type": "nonsense"}]},
        {"ng_trajectory.invocations.0.conversation": [{"role": ["unhashable"], "content": "x"}]},
        {"ng_trajectory.gaps": [{"code": "turns_unavailable"}]},
        {"ng_trajectory.schema_version": "2.0"},
    ],
)
def test_record_variants(changes: dict[str, Any]) -> None:
    _agree(orjson.dumps(_record(**changes)))


@pytest.mark.parametrize(
    "conversation",
    [
        [{"role": "user", "content": "hi"}],  # untyped: the contract validates the whole conversation
        [{"type": "reasoning", "id": "r", "summary": [], "status": "completed"}],  # an ignored key
        [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "prompt_token_ids": []}],
        [{"type": "message", "role": "assistant", "id": "m", "content": [{"type": "refusal", "refusal": 0}]}],
    ],
)
def test_conversations_outside_the_strict_forms(conversation: list[Any]) -> None:
    """A conversation the derived structs refuse is decoded again for the contract: valid ones
    still take the fast road, and both roads agree."""
    record = _record(**{"ng_trajectory.invocations.0.conversation": conversation})
    valid = check_trajectory(record["ng_trajectory"])[0] is not None
    assert _agree(orjson.dumps(record)) is valid


def test_duplicate_keys_read_the_last() -> None:
    line = orjson.dumps(_record())
    assert _agree(b'{"_ng_task_index": 99, "ng_trajectory": null, ' + line[1:])
    assert _agree(line[:-1] + b', "_ng_task_index": 7}')


@pytest.mark.parametrize(
    "line",
    [b"", b"[]", b"not json", b'"text"', b"\xef\xbb\xbf{}", b"{}", b'{"ng_trajectory": {}}'],
)
def test_lines_that_are_not_everyday_records(line: bytes) -> None:
    _agree(line)


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"ng_trajectory.turns.0.turn_no": "1"}, Refusal.TRAJECTORY),  # the contract coerces it still
        ({"ng_trajectory.model_calls.0.colour": 1}, Refusal.TRAJECTORY),
        ({"ng_trajectory.invocations.0.conversation": [{"type": "nonsense"}]}, Refusal.TRAJECTORY),
        ({"response": "text"}, Refusal.LINE),  # the trajectory may still be sound
    ],
)
def test_the_refusal_says_whether_the_derived_structs_refused_the_trajectory(
    changes: dict[str, Any], refusal: Refusal
) -> None:
    """After ``TRAJECTORY`` the full road goes straight to the contract; both roads still agree."""
    line = orjson.dumps(_record(**changes))
    assert decode_line(line) is refusal
    assert decode_line(line[:-9]) is Refusal.LINE
    _agree(line)
