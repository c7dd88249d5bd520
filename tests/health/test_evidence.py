"""Evidence read from validated models equals what the canonical dump holds; no line raises."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from health.contract import canonical_trajectory, check_trajectory
from health.contract.strict import strict_trajectory
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


_ids = st.sampled_from([None, "", "c1", "c2"])
_response_ids = st.sampled_from([None, "", "r1", "r2"])
# an unknown key in a model_ref is dropped: it must not keep a reference from binding
_server_refs = st.sampled_from([None, POLICY, {**POLICY, "name": "judge"}, {**POLICY, "extra": 1}])


@st.composite
def _bound_trajectories(draw: st.DrawFn) -> dict[str, Any]:
    """Calls and references over a few shared ids, so references repeat, collide and miss."""
    calls = [
        {
            "model_call_id": draw(_ids),
            "response_metadata": {"response_id": draw(_response_ids), "model_ref": draw(_server_refs)},
        }
        for _ in range(draw(st.integers(0, 4)))
    ]
    ids = [call["model_call_id"] for call in calls if call["model_call_id"]]
    assume(len(ids) == len(set(ids)))  # the contract refuses a repeated non-empty call id

    def refs() -> list[dict[str, Any]]:
        drawn = st.fixed_dictionaries(
            {"model_call_id": _ids, "model_ref": _server_refs, "response_id": _response_ids}
        )
        drawn_refs = draw(st.lists(drawn, max_size=4))
        return [
            ref for ref in drawn_refs if ref["model_call_id"] or (ref["model_ref"] and ref["response_id"])
        ]

    base = {"task_id": "t", "rollout_id": "r", "timestamp": 0, "step_count": 0}
    turns = [{**base, "invocation_id": "m", "turn_no": n, "model_calls": refs()} for n in (1, 2)]
    # an invocation often repeats a turn's references exactly, or with ``None`` for ``""``
    invocation_refs = draw(
        st.sampled_from(
            [
                refs(),
                turns[1]["model_calls"],
                [{**ref, "response_id": ref["response_id"] or None} for ref in turns[0]["model_calls"]],
            ]
        )
    )
    invocations = [{"invocation_id": "m", "model_calls": invocation_refs}]
    return {
        "task_id": "t",
        "rollout_id": "r",
        "turns": turns,
        "invocations": invocations,
        "model_calls": calls,
    }


def _plain_binding(trajectory: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The binding rules applied literally: each distinct reference (None as "") is resolved by
    filtering the calls with its model_call_id by the ref's model_ref and response_id where
    given, or else by (model_ref, response_id); one match binds, none is missing, more are
    duplicated; the turn view is the turn references, the owned view adds the invocations'."""
    calls = trajectory["model_calls"]

    def server(ref: dict[str, Any] | None) -> tuple[str, str] | None:
        return None if ref is None else (ref["type"], ref["name"])

    seen: set[tuple[str, str, str, str]] = set()
    references: list[str] = []
    missing: list[str] = []
    duplicated: list[tuple[str, int]] = []
    matched: set[int] = set()
    views = []
    for owners in (trajectory["turns"], trajectory["invocations"]):
        for ref in (ref for owner in owners for ref in owner["model_calls"]):
            call_id, response_id, pair = ref["model_call_id"], ref["response_id"], server(ref["model_ref"])
            signature = (call_id or "", *(pair or ("", "")), response_id or "")
            if signature in seen:
                continue
            seen.add(signature)
            metadata = [(n, call["response_metadata"]) for n, call in enumerate(calls)]
            if call_id:
                key = f"call:{call_id}"
                found = [
                    n
                    for n, meta in metadata
                    if calls[n]["model_call_id"] == call_id
                    and (pair is None or server(meta["model_ref"]) == pair)
                    and (response_id is None or meta["response_id"] == response_id)
                ]
            else:
                key = f"response:{signature[1]}:{signature[2]}:{response_id}"
                found = [
                    n
                    for n, meta in metadata
                    if pair is not None
                    and response_id
                    and server(meta["model_ref"]) == pair
                    and meta["response_id"] == response_id
                ]
            references.append(key)
            if not found:
                missing.append(key)
            elif len(found) > 1:
                duplicated.append((key, len(found)))
            else:
                matched.add(found[0])
        views.append((tuple(references), tuple(sorted(matched)), tuple(missing), tuple(duplicated)))
    return views[0], views[1]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_bound_trajectories())
def test_bindings_follow_the_binding_rules(raw: dict[str, Any]) -> None:
    """Both the strict (fast path) and the contract trajectory bind as the rules say."""
    expected = _plain_binding(raw)
    strict = strict_trajectory(raw)
    checked, error = check_trajectory(raw)
    assert error is None and strict is not None
    for trajectory in (strict, checked):
        evidence = build_evidence(trajectory, {}, [None] * len(raw["model_calls"]))
        got = tuple(
            (
                tuple(binding.references),
                tuple(call.call_index for call in binding.matched_calls),
                tuple(binding.missing_references),
                tuple(binding.duplicated_references),
            )
            for binding in (evidence.turn_binding, evidence.owned_binding)
        )
        assert got == expected
