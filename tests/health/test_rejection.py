"""``health.rejection``: a definite rejection agrees with the full path (orjson + pydantic), or defers.

Every case goes through :func:`assert_paths_agree`, which also checks that whatever the
rejection path refused, the contract itself refuses with ``ValidationError``.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from health.contract import check_trajectory
from health.digest import _parsed_dependence, digest_line_placed
from health.evidence import transcript_usage
from health.fast_path import read_stripped_line
from health.payload_spans import NATIVE, decode_strict_from_copy
from health.rejection import RejectedRecord, read_rejected_record
from tests.health.fast_path_support import (
    DELETE,
    DupObject,
    KeyPath,
    assert_paths_agree,
    base_record,
    encode,
    full_path_digest,
    synthetic_corpus,
    with_changes,
)

CALL: KeyPath = ("ng_trajectory", "model_calls", 0)
METADATA: KeyPath = (*CALL, "response_metadata")


def _line(*changes: tuple[KeyPath, Any]) -> bytes:
    return orjson.dumps(with_changes(base_record(), *changes))


def _rejected(line: bytes) -> bool:
    return isinstance(read_stripped_line(line), RejectedRecord)


WITNESSES = {
    "negative duration_ms": ((*CALL, "duration_ms"), -1),
    "negative float duration_ms": ((*CALL, "duration_ms"), -0.5),
    "unknown token-stats key": ((*CALL, "token_stats", "audio_tokens"), 3),
    "negative token count": ((*CALL, "token_stats", "prompt_tokens"), -3),
    "other server-ref type": ((*METADATA, "model_ref", "type"), "openai_models"),
    "server ref without type": ((*METADATA, "model_ref", "type"), DELETE),
    "unknown metadata key": ((*METADATA, "provider"), "x"),
    "negative time to first token": ((*METADATA, "latency_ttft_ms"), -5.0),
}


@pytest.mark.parametrize("change", WITNESSES.values(), ids=list(WITNESSES))
def test_each_witness_is_rejected_as_the_contract_rejects_it(change: tuple[KeyPath, Any]) -> None:
    line = _line(change)
    assert _rejected(line)
    assert_paths_agree(line)
    unreadable = [f for f in full_path_digest(line).findings if f.check == "record_unreadable"]
    assert [f.detail["error"] for f in unreadable] == ["ValidationError"]


@pytest.mark.parametrize(
    "change",
    [((*CALL, "duration_ms"), -0.0), ((*CALL, "duration_ms"), None), ((*METADATA, "model_ref"), None)],
    ids=["negative zero", "null duration", "null server ref"],
)
def test_values_the_contract_accepts_are_no_witness(change: tuple[KeyPath, Any]) -> None:
    line = _line(change)
    assert check_trajectory(orjson.loads(line)["ng_trajectory"])[1] is None
    assert not _rejected(line)
    assert_paths_agree(line)


def _with_duplicate_call_key(first: Any, last: Any) -> bytes:
    record = base_record()
    call = record["ng_trajectory"]["model_calls"][0]
    pairs = [(key, value) for key, value in call.items() if key != "duration_ms"]
    record["ng_trajectory"]["model_calls"][0] = DupObject(
        (("duration_ms", first), *pairs, ("duration_ms", last))
    )
    return encode(record)


def test_a_repeated_key_counts_by_its_last_value_as_orjson_reads_it() -> None:
    good_last = _with_duplicate_call_key(-1, 5.0)
    assert not _rejected(good_last)
    assert check_trajectory(orjson.loads(good_last)["ng_trajectory"])[1] is None
    assert_paths_agree(good_last)

    bad_last = _with_duplicate_call_key(5.0, -1)
    assert _rejected(bad_last)
    assert_paths_agree(bad_last)


def test_a_repeated_model_calls_list_counts_by_its_last_value() -> None:
    record = base_record()
    trajectory = record["ng_trajectory"]
    calls = trajectory["model_calls"]
    broken = [dict(calls[0], duration_ms=-1), *calls[1:]]
    pairs = [(key, value) for key, value in trajectory.items() if key != "model_calls"]
    record["ng_trajectory"] = DupObject((("model_calls", broken), *pairs, ("model_calls", calls)))
    line = encode(record)
    assert not _rejected(line)
    assert_paths_agree(line)


def test_a_conversation_whose_routing_raises_defers_to_the_full_path() -> None:
    line = _line(
        ((*CALL, "duration_ms"), -1),
        (("ng_trajectory", "invocations", 0, "conversation"), [{"role": [], "content": "x"}]),
    )
    assert check_trajectory(orjson.loads(line)["ng_trajectory"])[1] == "TypeError"
    assert not _rejected(line)
    assert_paths_agree(line)


def test_an_invalid_identity_defers_to_the_full_path() -> None:
    line = _line(((*CALL, "duration_ms"), -1), (("_ng_task_index",), [1]))
    assert_paths_agree(line)


@pytest.mark.parametrize(
    "changes",
    [
        ((("_ng_task_index",), DELETE),),
        ((("_ng_task_index",), DELETE), (("ng_trajectory", "rollout_id"), "")),
        ((("_ng_task_index",), DELETE), (("_ng_rollout_id",), "own"), (("_ng_rollout_index",), 4)),
    ],
    ids=["trajectory rollout id", "no rollout id", "own rollout id"],
)
def test_a_rejected_record_without_task_index_depends_on_its_position_as_the_full_path_says(
    changes: tuple[tuple[KeyPath, Any], ...],
) -> None:
    line = _line(((*CALL, "duration_ms"), -1), *changes)
    assert _rejected(line)
    assert_paths_agree(line)
    dependence = digest_line_placed(line, source_path="r.jsonl", source_index=0, line_number=1, ordinal=5)[1]
    assert dependence == _parsed_dependence(orjson.loads(line))


def test_the_synthetic_fault_corpus_agrees_and_uses_the_rejection_path() -> None:
    rejected = 0
    for item in synthetic_corpus():
        assert_paths_agree(item.line)
        rejected += _rejected(item.line.strip())
    assert rejected > 0


USAGE = {"input_tokens": 7, "output_tokens": 3}


@pytest.mark.parametrize(
    "response",
    [
        {"id": "r", "output": [{"type": "message", "content": "x" * 50}], "usage": USAGE},
        DupObject((("usage", {"input_tokens": 1}), ("output", []), ("usage", USAGE))),
        {"output": [], "usage": "not an object"},
        ["not", "an", "object"],
        None,
    ],
    ids=["usage among other members", "repeated usage key", "usage not an object", "a list", "null"],
)
def test_a_rejection_read_from_the_payload_free_copy_keeps_the_transcript_usage(response: Any) -> None:
    record = with_changes(base_record(), ((*CALL, "duration_ms"), -1))
    record["response"] = response
    line = encode(record)
    rejected, decoded = decode_strict_from_copy(line)
    assert rejected is None
    assert (decoded != line) is NATIVE  # the scan made a copy wherever it is built
    from_copy, from_line = read_rejected_record(decoded), read_rejected_record(line)
    assert from_copy is not None and from_line is not None
    assert from_copy[:5] == from_line[:5]
    usage = transcript_usage({"response": from_line.response})
    assert transcript_usage({"response": from_copy.response}) == usage
    assert _rejected(line)
    assert_paths_agree(line)


def test_the_witness_key_sets_are_the_contract_models_fields() -> None:
    from health import rejection
    from health.contract import TrajectoryResponseMetadata, TrajectoryTokenStats

    assert frozenset(TrajectoryTokenStats.model_fields) == rejection._TOKEN_STATS_KEYS
    assert frozenset(TrajectoryResponseMetadata.model_fields) == rejection._RESPONSE_METADATA_KEYS
