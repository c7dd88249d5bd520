"""build_ng_perf / attach_ng_perf: vectors byte for byte, reference-checked edge cases, invariants."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from health.contract import validate_trajectory
from health.digest import digest_everyday_compact
from sidecar.perf import NG_PERF_KEY, attach_ng_perf, build_ng_perf, ng_perf_for_trajectory

POLICY = {"type": "responses_api_models", "name": "policy_model"}


@pytest.fixture(scope="module")
def ng_perf_cases(spec_examples: Path) -> list[dict[str, Any]]:
    lines = (spec_examples / "ng_perf_cases.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _row(
    invocations: list[dict[str, Any]], calls: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    trajectory: dict[str, Any] = {"task_id": "t", "rollout_id": "t-0", "invocations": invocations}
    if calls is not None:
        trajectory["model_calls"] = calls
    trajectory.update(extra)
    return {"ng_trajectory": trajectory}


def _turn(invocation_id: str, turn_no: int) -> dict[str, Any]:
    return {
        "invocation_id": invocation_id,
        "task_id": "t",
        "rollout_id": "t-0",
        "turn_no": turn_no,
        "timestamp": 1.0,
        "step_count": 0,
    }


class TestVectors:
    def test_build_and_attach_cases_are_byte_identical(self, ng_perf_cases: list[dict[str, Any]]) -> None:
        functions = set()
        for case in ng_perf_cases:
            functions.add(case["function"])
            where = f"ng_perf case {case['id']!r}"
            given_input, expected = case["input"], case["expected"]
            if case["function"] == "_build_ng_perf":
                built = build_ng_perf(given_input["result"], given_input["rollout_latency_ms"])
                assert orjson.dumps(built) == orjson.dumps(expected["ng_perf"]), where
            else:
                assert case["function"] == "_attach_ng_perf", where
                result = copy.deepcopy(given_input["result"])
                attach_ng_perf(
                    result,
                    observability_enabled=given_input["observability_enabled"],
                    rollout_latency_ms=given_input["rollout_latency_ms"],
                )
                assert (NG_PERF_KEY in result) is expected["ng_perf_key_present"], where
                assert orjson.dumps(result.get(NG_PERF_KEY)) == orjson.dumps(expected["ng_perf"]), where
        assert functions == {"_build_ng_perf", "_attach_ng_perf"}
        assert len(ng_perf_cases) >= 22


# Hand-made edge cases; each expectation was obtained by running the reference on the input.
EDGE_CASES: list[tuple[str, dict[str, Any], Any, dict[str, Any] | None]] = [
    (
        "empty_response_id_on_ref_matches_only_empty",
        _row(
            [{"invocation_id": "root", "model_calls": [{"model_call_id": "c1", "response_id": ""}]}],
            [
                {
                    "model_call_id": "c1",
                    "response_metadata": {"response_id": ""},
                    "token_stats": {"prompt_tokens": 4},
                }
            ],
        ),
        None,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 1.0, "prompt_tokens": 4},
    ),
    (
        "empty_response_id_on_ref_rejects_null",
        _row(
            [{"invocation_id": "root", "model_calls": [{"model_call_id": "c1", "response_id": ""}]}],
            [{"model_call_id": "c1", "token_stats": {"prompt_tokens": 4}}],
        ),
        None,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 0.0},
    ),
    (
        "ref_model_ref_rejects_call_without_model_ref",
        _row(
            [{"invocation_id": "root", "model_calls": [{"model_call_id": "c1", "model_ref": POLICY}]}],
            [{"model_call_id": "c1", "token_stats": {"prompt_tokens": 4}}],
        ),
        None,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 0.0},
    ),
    (
        "lax_token_coercion",
        _row(
            [{"invocation_id": "root", "model_calls": [{"model_call_id": "c1"}]}],
            [
                {
                    "model_call_id": "c1",
                    "token_stats": {
                        "prompt_tokens": "7",
                        "completion_tokens": 3.0,
                        "reasoning_tokens": True,
                        "cached_tokens": " 2 ",
                    },
                }
            ],
        ),
        None,
        {
            "num_turns": 1,
            "num_tool_calls": 0,
            "token_observability_coverage": 1.0,
            "prompt_tokens": 7,
            "cached_prompt_tokens": 2,
            "completion_tokens": 3,
            "reasoning_tokens": 1,
        },
    ),
    (
        "negative_token_count_fails_validation",
        _row(
            [{"invocation_id": "root", "model_calls": [{"model_call_id": "c1"}]}],
            [{"model_call_id": "c1", "token_stats": {"prompt_tokens": -1}}],
        ),
        None,
        None,
    ),
    (
        "unknown_model_ref_type_fails_validation",
        _row(
            [
                {
                    "invocation_id": "root",
                    "model_calls": [{"model_call_id": "c1", "model_ref": {"type": "x", "name": "y"}}],
                }
            ],
            [{"model_call_id": "c1"}],
        ),
        None,
        None,
    ),
    (
        "model_ref_extra_keys_dropped",
        _row(
            [
                {
                    "invocation_id": "root",
                    "model_calls": [{"model_ref": {**POLICY, "extra": 1}, "response_id": "r1"}],
                }
            ],
            [
                {
                    "response_metadata": {"response_id": "r1", "model_ref": {**POLICY, "junk": [1]}},
                    "token_stats": {"completion_tokens": 9},
                }
            ],
        ),
        None,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 1.0, "completion_tokens": 9},
    ),
    (
        "pair_key_includes_model_name",
        _row(
            [{"invocation_id": "root", "model_calls": [{"model_ref": POLICY, "response_id": "r1"}]}],
            [
                {
                    "response_metadata": {"response_id": "r1", "model_ref": POLICY},
                    "token_stats": {"completion_tokens": 9},
                },
                {
                    "response_metadata": {"response_id": "r1", "model_ref": {**POLICY, "name": "judge"}},
                    "token_stats": {"completion_tokens": 100},
                },
            ],
        ),
        None,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 1.0, "completion_tokens": 9},
    ),
    (
        "tool_calls_not_deduplicated",
        _row(
            [{"invocation_id": "root"}],
            tool_calls=[
                {"invocation_id": "root", "tool_call_id": "a"},
                {"invocation_id": "root", "tool_call_id": "a"},
            ],
        ),
        None,
        {"num_turns": 1, "num_tool_calls": 2, "token_observability_coverage": 0.0},
    ),
    (
        "second_owner_with_explicit_turns",
        _row(
            [
                {"invocation_id": "root", "model_calls": [{"model_call_id": "c1"}]},
                {"invocation_id": "sub", "model_calls": [{"model_call_id": "c1"}]},
            ],
            [{"model_call_id": "c1", "token_stats": {"prompt_tokens": 1}}],
            turns=[_turn("sub", 1), _turn("sub", 2)],
        ),
        None,
        {
            "num_turns": 3,
            "num_tool_calls": 0,
            "token_observability_coverage": 0.3333333333333333,
            "prompt_tokens": 1,
        },
    ),
    (
        "bool_latency_copied",
        _row([{"invocation_id": "root"}]),
        True,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 0.0, "total_latency_ms": True},
    ),
    (
        "zero_float_latency_kept",
        _row([{"invocation_id": "root"}]),
        0.0,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 0.0, "total_latency_ms": 0.0},
    ),
    (
        "string_latency_dropped",
        _row([{"invocation_id": "root"}]),
        "12",
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 0.0},
    ),
    (
        "id_and_pair_both_consistent",
        _row(
            [
                {
                    "invocation_id": "root",
                    "model_calls": [{"model_call_id": "c1", "model_ref": POLICY, "response_id": "r9"}],
                }
            ],
            [
                {
                    "model_call_id": "c1",
                    "response_metadata": {"response_id": "r9", "model_ref": POLICY},
                    "token_stats": {"prompt_tokens": 4, "total_tokens": 99},
                }
            ],
        ),
        None,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 1.0, "prompt_tokens": 4},
    ),
    (
        "empty_call_ids_may_repeat",
        _row(
            [{"invocation_id": "root", "model_calls": [{"model_ref": POLICY, "response_id": "r1"}]}],
            [
                {
                    "model_call_id": "",
                    "response_metadata": {"response_id": "r1", "model_ref": POLICY},
                    "token_stats": {"prompt_tokens": 5},
                },
                {"model_call_id": "", "token_stats": {"prompt_tokens": 6}},
            ],
        ),
        None,
        {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 1.0, "prompt_tokens": 5},
    ),
]


class TestEdgeCases:
    @pytest.mark.parametrize(
        ("result", "latency", "expected"),
        [case[1:] for case in EDGE_CASES],
        ids=[case[0] for case in EDGE_CASES],
    )
    def test_matches_reference(
        self, result: dict[str, Any], latency: Any, expected: dict[str, Any] | None
    ) -> None:
        assert orjson.dumps(build_ng_perf(result, latency)) == orjson.dumps(expected)

    def test_strict_mirror_agrees(self, ng_perf_cases: list[dict[str, Any]]) -> None:
        """The live fast path hands ``ng_perf_for_trajectory`` the struct derived from the contract
        (``health.contract.strict``): where the fast road reads a row, the same object."""
        rows = [(result, latency) for _, result, latency, _ in EDGE_CASES]
        rows += [
            (case["input"]["result"], case["input"]["rollout_latency_ms"])
            for case in ng_perf_cases
            if case["function"] == "_build_ng_perf"
        ]
        vouched = 0
        for result, latency in rows:
            everyday = digest_everyday_compact(
                orjson.dumps(result), source_path="", source_index=0, line_number=1, ordinal=0
            )
            if everyday is None or everyday[1].ng_trajectory is None:
                continue
            vouched += 1
            strict = ng_perf_for_trajectory(everyday[1].ng_trajectory, latency)
            assert orjson.dumps(strict) == orjson.dumps(build_ng_perf(result, latency)), result
        assert vouched >= len(rows) // 2

    def test_validated_record_entry_point_agrees(self) -> None:
        for _, result, latency, expected in EDGE_CASES:
            record = validate_trajectory(result["ng_trajectory"])
            if record is None:
                assert expected is None
                continue
            assert orjson.dumps(ng_perf_for_trajectory(record, latency)) == orjson.dumps(expected)

    def test_does_not_mutate_the_row(self) -> None:
        for _, result, latency, _ in EDGE_CASES:
            before = orjson.dumps(result)
            build_ng_perf(result, latency)
            assert orjson.dumps(result) == before


class _ExplodingRow(dict[str, Any]):
    """A row whose lookup fails, standing in for any builder error."""

    def get(self, key: str, default: Any = None) -> Any:
        raise RuntimeError(f"cannot read {key!r}")


class TestAttach:
    def test_builder_error_is_logged_and_row_untouched(self, caplog: pytest.LogCaptureFixture) -> None:
        row = _ExplodingRow(ng_perf={"num_turns": 9})
        with caplog.at_level(logging.WARNING, logger="sidecar.perf._ng_perf"):
            attach_ng_perf(row, observability_enabled=True, rollout_latency_ms=1.0)
        assert dict(row) == {"ng_perf": {"num_turns": 9}}
        assert any("ng_perf" in record.getMessage() for record in caplog.records)

    def test_replaces_existing_value_when_built(self) -> None:
        row = _row([{"invocation_id": "root"}])
        row["ng_perf"] = {"stale": True}
        attach_ng_perf(row, True, 5)
        assert row["ng_perf"] == {
            "num_turns": 1,
            "num_tool_calls": 0,
            "token_observability_coverage": 0.0,
            "total_latency_ms": 5,
        }

    def test_keyword_arguments(self) -> None:
        row = _row([{"invocation_id": "root"}])
        attach_ng_perf(row, observability_enabled=False, rollout_latency_ms=5)
        assert "ng_perf" not in row


# -- invariants over generated, valid trajectories ---------------------------------------------

_ids = st.sampled_from([f"c{i}" for i in range(6)])


@st.composite
def trajectories(draw: st.DrawFn) -> dict[str, Any]:
    call_ids = draw(st.lists(_ids, unique=True, max_size=6))
    calls = [
        {
            "model_call_id": call_id,
            "token_stats": draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        name: st.integers(min_value=0, max_value=1000)
                        for name in (
                            "prompt_tokens",
                            "completion_tokens",
                            "reasoning_tokens",
                            "cached_tokens",
                        )
                    },
                )
            ),
        }
        for call_id in call_ids
    ]
    invocation_ids = [f"inv{i}" for i in range(draw(st.integers(min_value=1, max_value=4)))]
    invocations = [
        {
            "invocation_id": inv,
            "model_calls": [{"model_call_id": ref} for ref in draw(st.lists(_ids, max_size=4))],
        }
        for inv in invocation_ids
    ]
    turn_owners = draw(st.lists(st.sampled_from([*invocation_ids, "ghost"]), max_size=6))
    turns = [_turn(owner, number) for number, owner in enumerate(turn_owners, start=1)]
    return _row(invocations, calls, turns=turns)


class TestInvariants:
    @settings(max_examples=100, deadline=None)
    @given(row=trajectories())
    def test_bounds(self, row: dict[str, Any]) -> None:
        perf = build_ng_perf(row)
        assert perf is not None
        trajectory = row["ng_trajectory"]
        assert perf["num_turns"] >= len(trajectory["invocations"])
        assert 0.0 <= perf["token_observability_coverage"] <= 1.0
        for key, field in (("prompt_tokens", "prompt_tokens"), ("cached_prompt_tokens", "cached_tokens")):
            everything = sum(call["token_stats"].get(field, 0) for call in trajectory["model_calls"])
            assert perf.get(key, 0) <= everything

    @settings(max_examples=100, deadline=None)
    @given(row=trajectories())
    def test_unreferenced_calls_change_nothing(self, row: dict[str, Any]) -> None:
        before = orjson.dumps(build_ng_perf(row))
        widened = copy.deepcopy(row)
        widened["ng_trajectory"]["model_calls"].append(
            {"model_call_id": "judge-0", "token_stats": {"prompt_tokens": 10**6, "completion_tokens": 10**6}}
        )
        assert orjson.dumps(build_ng_perf(widened)) == before

    @settings(max_examples=100, deadline=None)
    @given(row=trajectories(), data=st.data())
    def test_repeating_a_ref_changes_nothing(self, row: dict[str, Any], data: st.DataObject) -> None:
        before = orjson.dumps(build_ng_perf(row))
        invocations = row["ng_trajectory"]["invocations"]
        target = data.draw(st.sampled_from(invocations))
        if target["model_calls"]:
            target["model_calls"].append(dict(data.draw(st.sampled_from(target["model_calls"]))))
        assert orjson.dumps(build_ng_perf(row)) == before
