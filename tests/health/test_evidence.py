"""Evidence read from validated models equals what the canonical dump holds; no line raises."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from health.contract import canonical_trajectory, check_trajectory
from health.digest import digest_line, digest_record
from health.evidence import build_evidence

POLICY = {"type": "responses_api_models", "name": "policy"}

_ints = st.one_of(st.none(), st.integers(0, 600), st.sampled_from(["500", " 2 ", "1_0", "2.0", True, 3.0]))
_floats = st.one_of(st.none(), st.floats(0, 10, allow_nan=False), st.sampled_from(["1.5", "inf", 2, True]))
_strs = st.one_of(st.none(), st.sampled_from(["", "c1", "c2", "r1", "x:y"]))
_refs = st.one_of(st.none(), st.just(POLICY), st.just({**POLICY, "name": "judge", "extra": 1}))


@st.composite
def _calls(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "model_call_id": draw(st.one_of(st.none(), st.just(""))),
        "started_at": draw(_floats),
        "response": draw(st.one_of(st.none(), st.just({"output_text": "x"}))),
        "response_metadata": {
            "response_id": draw(_strs),
            "model_ref": draw(_refs),
            "status_code": draw(_ints),
            "response_status": draw(st.sampled_from([None, "failed", "completed"])),
            "finish_reason": draw(st.sampled_from([None, "length", "stop"])),
            "error_category": draw(st.sampled_from([None, "", "timeout"])),
        },
        "token_stats": {"prompt_tokens": draw(_ints), "completion_tokens": draw(_ints)},
    }


@st.composite
def _trajectories(draw: st.DrawFn) -> dict[str, Any]:
    calls = draw(st.lists(_calls(), max_size=4))
    for position, call in enumerate(calls):
        if draw(st.booleans()):
            call["model_call_id"] = f"c{position}"
    refs = [{"model_call_id": f"c{n}"} for n in draw(st.lists(st.integers(0, 4), max_size=4))]
    turn = {
        "invocation_id": "m",
        "task_id": "t",
        "rollout_id": "r",
        "turn_no": 1,
        "timestamp": 0,
        "step_count": 0,
    }
    return {"task_id": "t", "rollout_id": "r", "turns": [{**turn, "model_calls": refs}], "model_calls": calls}


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_trajectories())
def test_call_view_matches_the_canonical_dump(raw: dict[str, Any]) -> None:
    canonical, error = canonical_trajectory(raw)
    model, model_error = check_trajectory(raw)
    assert model_error == error
    if canonical is None or model is None:
        return
    calls = build_evidence(model, {}).calls
    assert len(calls) == len(canonical["model_calls"])
    for call, dumped in zip(calls, canonical["model_calls"], strict=True):
        metadata, stats = dumped["response_metadata"], dumped["token_stats"]
        ref = metadata["model_ref"]
        assert call.model_call_id == dumped["model_call_id"]
        assert call.started_at == dumped["started_at"]
        assert call.response == dumped["response"]
        assert call.response_id == metadata["response_id"]
        assert call.model_ref == (None if ref is None else (ref["type"], ref["name"]))
        assert call.status_code == metadata["status_code"]
        assert type(call.status_code) is type(metadata["status_code"])
        assert call.response_status == metadata["response_status"]
        assert call.finish_reason == metadata["finish_reason"]
        assert call.error_category == metadata["error_category"]
        assert (call.tokens_in, call.tokens_out) == (stats["prompt_tokens"], stats["completion_tokens"])


_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_keys = st.sampled_from(
    ["_ng_task_index", "_ng_rollout_index", "_ng_rollout_id", "stage_index", "ng_trajectory", "response"]
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(_keys, _json, max_size=6),
    st.frozensets(st.sampled_from(["record_unreadable", "check_execution_error"])),
)
def test_no_record_raises(record: dict[str, Any], ignored: frozenset[str]) -> None:
    digest = digest_record(record, source_path="p", line_number=1, ignored_checks=ignored)
    assert digest.verdict in ("healthy", "unhealthy", "unobserved")
    line = orjson.dumps(record)
    assert (
        digest_line(line, source_path="p", source_index=0, line_number=1, ordinal=0, ignored_checks=ignored)
        == digest
    )


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_no_line_raises(data: bytes) -> None:
    digest = digest_line(data, source_path="p", source_index=0, line_number=1, ordinal=0)
    assert digest.rollout_id
