"""Evidence and check rules on hand-made trajectories: binding, gaps, chains, runaway, usage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from health.checks import chains_ended_on_failure
from health.content import _CONTENT_KEYS_BY_USE, CONTENT_KEYS, has_tool_call, nonempty, response_has_content
from health.digest import digest_record
from health.evidence import Call
from health.types import RolloutDigest

POLICY = {"type": "responses_api_models", "name": "policy"}
JUDGE = {"type": "responses_api_models", "name": "judge"}
OK = {"output_text": "ok"}


def _turn(
    no: int, refs: list[dict[str, Any]] | None = None, answer: Any = "a", inv: str = "main"
) -> dict[str, Any]:
    turn: dict[str, Any] = {
        "invocation_id": inv,
        "task_id": "t",
        "rollout_id": "r",
        "turn_no": no,
        "timestamp": 1.0,
        "step_count": no,
        "answer": answer,
    }
    if refs is not None:
        turn["model_calls"] = refs
    return turn


def _call(
    call_id: str | None,
    status: int | None = 200,
    *,
    ref: dict[str, str] | None = POLICY,
    tokens: tuple[int | None, int | None] = (10, 5),
    response: Any = OK,
    **metadata: Any,
) -> dict[str, Any]:
    started_at = metadata.pop("started_at", None)
    meta: dict[str, Any] = {"model_ref": ref, "status_code": status, **metadata}
    call: dict[str, Any] = {
        "started_at": started_at,
        "response_metadata": meta,
        "token_stats": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]},
        "response": response,
    }
    if call_id is not None:
        call["model_call_id"] = call_id
    return call


def _run(
    turns: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    *,
    invocations: list[dict[str, Any]] | None = None,
    gaps: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    ignored: frozenset[str] = frozenset(),
) -> RolloutDigest:
    trajectory: dict[str, Any] = {"task_id": "t", "rollout_id": "r", "turns": turns, "model_calls": calls}
    if invocations is not None:
        trajectory["invocations"] = invocations
    if gaps is not None:
        trajectory["gaps"] = gaps
    record: dict[str, Any] = {"_ng_task_index": 0, "ng_trajectory": trajectory}
    if usage is not None:
        record["response"] = {"usage": usage}
    return digest_record(record, ignored_checks=ignored)


def _findings(digest: RolloutDigest, check: str) -> list[tuple[Any, Any]]:
    return [(f.locator, f.detail) for f in digest.findings if f.check == check]


USAGE = {"input_tokens": 10, "output_tokens": 5}


class TestBinding:
    def test_id_reference_with_disagreeing_model_ref_is_missing(self) -> None:
        digest = _run([_turn(1, [{"model_call_id": "ns:call-9", "model_ref": JUDGE}])], [_call("ns:call-9")])
        assert _findings(digest, "trajectory_capture_mismatch") == [
            ({"call_id": "call-9"}, {"kind": "missing_captured_call"})
        ]
        assert not digest.policy_calls_observed

    def test_empty_response_id_filters(self) -> None:
        ref = {"model_call_id": "c1", "response_id": ""}
        missing = _run([_turn(1, [ref])], [_call("c1", response_id="r1")])
        assert _findings(missing, "trajectory_capture_mismatch") == [
            ({"call_id": "c1"}, {"kind": "missing_captured_call"})
        ]
        bound = _run([_turn(1, [ref])], [_call("c1", response_id="")], usage=USAGE)
        assert bound.verdict == "healthy" and bound.successful_model_calls == 1

    def test_response_pair_matching_two_calls_is_duplicated(self) -> None:
        ref = {"model_ref": POLICY, "response_id": "r1"}
        digest = _run([_turn(1, [ref])], [_call(None, response_id="r1"), _call(None, response_id="r1")])
        assert _findings(digest, "trajectory_capture_mismatch") == [
            ({"call_id": "r1"}, {"kind": "duplicated_captured_call", "count": 2})
        ]
        assert digest.duplicated_calls == 1
        assert "model_call_failed" in digest.unobserved

    def test_turn_and_invocation_reference_bind_once(self) -> None:
        calls = [_call("c1", tokens=(10, 0)), _call("c2", 500)]
        invocations = [
            {"invocation_id": "i", "model_calls": [{"model_call_id": "c1"}, {"model_call_id": "c2"}]}
        ]
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            calls,
            invocations=invocations,
            usage={"input_tokens": 10, "output_tokens": 0},
        )
        assert _findings(digest, "model_call_zero_completion_tokens") == [
            ({"call_id": "c1"}, {"completion_tokens": 0})
        ]
        assert _findings(digest, "model_call_failed") == [
            ({"call_id": "c2"}, {"status": 500, "error_category": None, "terminal": True})
        ]
        assert _findings(digest, "rollout_token_count_mismatch") == []
        assert digest.successful_model_calls == 1

    def test_token_comparison_uses_turn_bound_calls_only(self) -> None:
        calls = [_call("c1"), _call("c2", tokens=(3, 2))]
        invocations = [{"invocation_id": "i", "model_calls": [{"model_call_id": "c2"}]}]
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            calls,
            invocations=invocations,
            usage={"input_tokens": 13, "output_tokens": 7},
        )
        assert _findings(digest, "rollout_token_count_mismatch") == [
            (
                None,
                {
                    "transcript_prompt": 13,
                    "transcript_completion": 7,
                    "capture_prompt": 10,
                    "capture_completion": 5,
                },
            )
        ]
        assert (digest.capture_prompt_tokens, digest.capture_completion_tokens) == (13, 7)

    def test_terminal_is_positional(self) -> None:
        calls = [_call("c2", started_at=2.0), _call("c1", 500, started_at=1.0)]
        refs = [{"model_call_id": "c1"}, {"model_call_id": "c2"}]
        digest = _run([_turn(1, refs)], calls, usage={"input_tokens": 20, "output_tokens": 10})
        assert _findings(digest, "rollout_ended_on_failed_model_call") == []
        assert _findings(digest, "model_call_failed") == [
            ({"call_id": "c1"}, {"status": 500, "error_category": None, "terminal": True})
        ]
        assert not digest.ended_on_error and digest.model_call_errors == 1


class TestChains:
    def test_unreferenced_judge_failing_last_in_its_chain(self) -> None:
        calls = [
            _call("c1", started_at=1.0),
            _call("j1", None, ref=JUDGE, error_category="rate_limit", started_at=2.0),
        ]
        digest = _run([_turn(1, [{"model_call_id": "c1"}])], calls, usage=USAGE)
        assert _findings(digest, "rollout_ended_on_failed_model_call") == [
            (
                {"call_id": "j1"},
                {
                    "model_ref": "responses_api_models/judge",
                    "status": None,
                    "error_category": "rate_limit",
                    "observed_calls": 1,
                    "successful_calls": 0,
                },
            )
        ]
        assert digest.errors_by_status == {"unknown": 1} and digest.ended_on_error

    def test_no_model_chain_falls_back_to_list_index(self) -> None:
        calls = [_call(None, 502, ref=None), _call(None, None, ref=None, error_category="connection")]
        digest = _run([_turn(1)], calls)
        assert _findings(digest, "rollout_ended_on_failed_model_call")[0][0] == {"call_id": "1"}
        assert _findings(digest, "rollout_ended_on_failed_model_call")[0][1]["model_ref"] is None

    def test_mixed_chain_without_timestamps_never_fires(self) -> None:
        digest = _run([_turn(1)], [_call("p1", 500), _call("p2", 200)])
        assert _findings(digest, "rollout_ended_on_failed_model_call") == []
        assert not digest.ended_on_error

    def test_all_failed_chain_orders_missing_start_as_zero(self) -> None:
        calls = [_call("a", 500, started_at=5.0), _call("b", 503)]
        digest = _run([_turn(1)], calls)
        assert _findings(digest, "rollout_ended_on_failed_model_call")[0][0] == {"call_id": "a"}

    @pytest.mark.parametrize(("statuses", "fires"), [((200, 500), True), ((500, 200), False)])
    def test_equal_start_times_end_on_the_later_call(self, statuses: tuple[int, int], fires: bool) -> None:
        calls = [_call(f"c{n}", status, started_at=1.0) for n, status in enumerate(statuses)]
        digest = _run([_turn(1)], calls)
        expected = [{"call_id": "c1"}] if fires else []
        assert [locator for locator, _ in _findings(digest, "rollout_ended_on_failed_model_call")] == expected

    @settings(max_examples=300)
    @given(
        st.lists(
            st.tuples(
                st.sampled_from([None, ("responses_api_models", "policy")]),
                st.sampled_from([None, 0.0, 1.0, 2.0]),
                st.integers(0, 2),
                st.booleans(),
            ),
            max_size=6,
        )
    )
    def test_chains_end_on_their_last_call_in_start_order(
        self, drawn: list[tuple[tuple[str, str] | None, float | None, int, bool]]
    ) -> None:
        """Each chain's last call is the last of the chain stably sorted by (start, index),
        ties (equal keys, which distinct calls may have here) included."""
        calls = [
            Call(n, started, None, None, ref, None, None, None, None, 1, 1, None, bad, not bad, bad)
            for ref, started, n, bad in drawn
        ]
        expected = []
        for ref in dict.fromkeys(call.model_ref for call in calls):
            chain = [call for call in calls if call.model_ref == ref]
            last = sorted(chain, key=lambda call: (call.started_at or 0.0, call.call_index))[-1]
            timed = all(call.started_at is not None for call in chain)
            failed = [call.failed for call in chain]
            if any(failed) and (all(failed) or (timed and last.failed)):
                expected.append((chain, last))
        assert chains_ended_on_failure(calls) == expected

    def test_status_below_200_is_neither(self) -> None:
        digest = _run([_turn(1, [{"model_call_id": "c1"}])], [_call("c1", 100)], usage=USAGE)
        assert digest.verdict == "healthy"
        assert digest.successful_model_calls == 0 and digest.model_call_errors == 0


class TestGaps:
    def test_projection_failed_hides_everything(self) -> None:
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            [_call("c1", 500)],
            gaps=[{"code": "trajectory_projection_failed"}],
        )
        assert len(digest.unobserved) == 9 and digest.model_calls == 0 and not digest.capture_observed

    def test_capture_gap_keeps_stats(self) -> None:
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            [_call("c1", 500)],
            gaps=[{"code": "model_call_capture_incomplete"}],
            usage=USAGE,
        )
        assert digest.verdict == "unobserved" and digest.ended_on_error and digest.policy_calls_observed
        assert "rollout_ended_on_failed_model_call" in digest.unobserved

    def test_turn_scope_gap(self) -> None:
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            [_call("c1")],
            gaps=[{"code": "turn_model_call_scope_incomplete"}],
            usage={"input_tokens": 99, "output_tokens": 5},
        )
        assert digest.unobserved == ["rollout_token_count_mismatch"] and not digest.policy_calls_observed

    def test_contradiction_gaps(self) -> None:
        gaps = [
            {"code": "model_call_reference_conflict", "detail": "model_calls:x2", "invocation_id": "main"},
            {"code": "model_call_reference_conflict", "detail": "model_calls:x2", "invocation_id": "main"},
            {"code": "model_call_reference_unmatched"},
            {"code": "model_call_reference_unmatched", "detail": "a:zz"},
            {"code": "model_call_ownership_unavailable"},
        ]
        digest = _run([_turn(1, [{"model_call_id": "zz"}])], [_call("c1")], gaps=gaps)
        assert _findings(digest, "trajectory_capture_mismatch") == [
            ({"call_id": "zz"}, {"kind": "missing_captured_call"}),
            (
                {"call_id": "x2"},
                {
                    "kind": "conflicting_call_ownership",
                    "observation_gap": "model_call_reference_conflict",
                    "invocation_id": "main",
                },
            ),
            (
                {"call_id": "x2"},
                {
                    "kind": "conflicting_call_ownership",
                    "observation_gap": "model_call_reference_conflict",
                    "invocation_id": "main",
                },
            ),
            (
                {"call_id": "unknown"},
                {
                    "kind": "missing_captured_call",
                    "observation_gap": "model_call_reference_unmatched",
                    "invocation_id": None,
                },
            ),
        ]

    def test_contradiction_gap_alone_makes_capture_check_observable(self) -> None:
        digest = _run(
            [_turn(1)], [_call("c1")], gaps=[{"code": "model_call_reference_ambiguous", "detail": "q"}]
        )
        assert _findings(digest, "trajectory_capture_mismatch")[0][1]["kind"] == "duplicated_captured_call"


class TestRunaway:
    @pytest.mark.parametrize(
        ("response", "fires"),
        [
            ({}, True),
            ({"output": [{"type": "reasoning", "summary": [{"text": "s"}]}]}, False),
            ({"content": [{"type": "thinking", "thinking": "t"}]}, True),
            ({"choices": [{"message": {"content": "", "tool_calls": [{"id": "x"}]}}]}, True),
            ({"choices": [{"message": {"content": "hi"}}]}, False),
            ({"choices": "abc"}, True),
            ("just text", True),
        ],
    )
    def test_length_limited_content(self, response: Any, fires: bool) -> None:
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            [_call("c1", finish_reason="length", response=response)],
            usage=USAGE,
        )
        assert bool(_findings(digest, "model_call_runaway_generation")) is fires

    def test_unsaved_response_is_unobserved(self) -> None:
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            [_call("c1", finish_reason="max_tokens", response=None)],
            usage=USAGE,
        )
        assert digest.unobserved == ["model_call_runaway_generation"]

    @pytest.mark.parametrize(
        ("response", "error"),
        [({"choices": 5}, "TypeError"), ({"choices": [{"message": "x"}]}, "AttributeError")],
    )
    def test_malformed_choices_raise(self, response: Any, error: str) -> None:
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            [_call("c1", finish_reason="length", response=response)],
            usage=USAGE,
        )
        assert _findings(digest, "check_execution_error") == [
            (
                None,
                {
                    "reason": "check raised an unexpected exception",
                    "failed_check": "model_call_runaway_generation",
                    "error": error,
                },
            )
        ]
        assert digest.unobserved == ["model_call_runaway_generation"] and digest.verdict == "unhealthy"
        quiet = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            [_call("c1", finish_reason="length", response=response)],
            usage=USAGE,
            ignored=frozenset({"check_execution_error"}),
        )
        assert quiet.findings == [] and quiet.verdict == "unobserved"

    def test_other_finish_reasons_do_not_inspect_content(self) -> None:
        digest = _run(
            [_turn(1, [{"model_call_id": "c1"}])],
            [_call("c1", finish_reason="LENGTH", response={"choices": 5})],
            usage=USAGE,
        )
        assert digest.verdict == "healthy"


class TestTurns:
    def test_unhashable_type_crashes_both_turn_checks(self) -> None:
        digest = _run([_turn(1, answer="hi"), _turn(2, answer={"type": ["x"]})], [])
        assert [f.detail.get("failed_check") for f in digest.findings] == [
            "rollout_missing_agent_turns",
            "agent_turn_hollow",
        ]

    def test_reference_only_turn_is_active_but_hollow(self) -> None:
        digest = _run([_turn(1, [{"model_call_id": "c1"}], answer="")], [_call("c1")], usage=USAGE)
        assert [f.check for f in digest.findings] == ["agent_turn_hollow"]

    def test_empty_turns(self) -> None:
        digest = _run([], [])
        assert [f.check for f in digest.findings] == ["rollout_missing_agent_turns"]


class TestContent:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("\u00a0\u2003", False),
            ("\u200b", True),
            ([None, {"text": " x"}], True),
            ({"foo": "bar"}, False),
            ({"summary": [{"text": "s"}]}, True),
            ({"content": {"content": {"refusal": "no"}}}, True),
            (5, False),
            (True, False),
        ],
    )
    def test_nonempty(self, value: Any, expected: bool) -> None:
        assert nonempty(value) is expected

    def test_content_keys_are_tried_in_an_order_of_their_own(self) -> None:
        assert sorted(_CONTENT_KEYS_BY_USE) == sorted(CONTENT_KEYS)
        assert nonempty({"summary": "", "text": " ", "reasoning": "r"})
        assert not nonempty({"summary": "", "text": " ", "reasoning": [{"other": "x"}]})

    def test_nonempty_text_is_text_left_after_strip(self) -> None:
        """Every code point, alone and between whitespace: visible exactly when ``strip`` leaves
        something, as the reference tests it."""
        for code in range(0x110000):
            char = chr(code)
            for text in (char, f" {char}\t", char * 3):
                assert nonempty(text) is bool(text.strip()), hex(code)
        assert nonempty("") is False

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ([{"type": "function_call"}], True),
            ({"tool_calls": "x"}, True),
            ({"tool_calls": []}, False),
            ({"message": {"tool_calls": [1]}}, False),
            ({"type": "tool_use"}, True),
            ("function_call", False),
        ],
    )
    def test_has_tool_call(self, value: Any, expected: bool) -> None:
        assert has_tool_call(value) is expected

    def test_response_has_content_order(self) -> None:
        assert response_has_content({"output_text": "x", "choices": 5})
        with pytest.raises(TypeError):
            response_has_content({"output": [], "choices": 5})


def test_every_rollout_check_has_exactly_one_rule() -> None:
    from health.checks import ROLLOUT_RULES
    from health.registry import ROLLOUT_CHECK_IDS

    assert tuple(ROLLOUT_RULES) == ROLLOUT_CHECK_IDS
