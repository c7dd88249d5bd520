"""The per-record step against every conformance vector, at digest level.

Rows are compared before the reducer's duplicate-identity post-pass: its findings are
removed from the expected rows, and verdicts are compared only where it changed nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from health.contract import canonical_trajectory
from health.digest import digest_line, digest_record
from health.registry import ROLLOUT_CHECK_IDS
from health.types import RolloutDigest

_DUPLICATE = "rollout_duplicate_identity"


def _cases(spec_examples: Path) -> list[dict[str, Any]]:
    with (spec_examples / "health_cases.jsonl").open("rb") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _part(value: object) -> tuple[int, Any]:
    return (0, value) if type(value) is int else (1, str(value))


def _digests(case: dict[str, Any]) -> list[RolloutDigest]:
    path = f"{case['run_dir']}/{case['rollout_file'] or 'rollouts.jsonl'}"
    ignored = frozenset(case["ignored_checks"])
    digests: list[RolloutDigest] = []
    for number, line in enumerate(case["input_jsonl"].encode().split(b"\n"), start=1):
        if line.strip():
            digests.append(
                digest_line(
                    line + b"\n",
                    source_path=path,
                    source_index=0,
                    line_number=number,
                    ordinal=len(digests),
                    ignored_checks=ignored,
                )
            )
    return digests


def _finding_dicts(digest: RolloutDigest) -> list[dict[str, Any]]:
    rendered = []
    for finding in digest.findings:
        item: dict[str, Any] = {"check": finding.check}
        if finding.locator is not None:
            item["locator"] = finding.locator
        item["detail"] = finding.detail
        rendered.append(item)
    return rendered


def test_every_vector_row_matches_at_digest_level(spec_examples: Path) -> None:
    cases = _cases(spec_examples)
    assert len(cases) == 19
    compared = 0
    for case in cases:
        digests = sorted(
            _digests(case), key=lambda d: (_part(d.task_index), _part(d.rollout_index), _part(d.stage_index))
        )
        rows = [json.loads(line) for line in case["expected"]["rollout_verdicts_jsonl"].splitlines()]
        assert len(digests) == len(rows), case["id"]
        for digest, row in zip(digests, rows, strict=True):
            where = f"{case['id']} row {row}"
            assert digest.task_index == row["_ng_task_index"], where
            assert type(digest.task_index) is type(row["_ng_task_index"]), where
            assert digest.rollout_index == row["_ng_rollout_index"], where
            assert digest.stage_index == row.get("stage_index"), where
            assert digest.rollout_id == row["rollout_id"], where
            assert digest.unobserved == row["unobserved"], where
            expected = [f for f in row["findings"] if f["check"] != _DUPLICATE]
            assert _finding_dicts(digest) == expected, where
            if len(expected) == len(row["findings"]):
                assert digest.verdict == row["verdict"], where
            compared += 1
    assert compared == 80


def test_subjects_name_the_rollout(spec_examples: Path) -> None:
    case = next(c for c in _cases(spec_examples) if c["id"] == "07_failed_policy_calls")
    digest = _digests(case)[2]
    assert [f.subject for f in digest.findings] == [{"_ng_task_index": 1, "_ng_rollout_index": 0}] * 2


class TestStatistics:
    def test_example_07_counts_failures_by_status(self, spec_examples: Path) -> None:
        case = next(c for c in _cases(spec_examples) if c["id"] == "07_failed_policy_calls")
        digests = _digests(case)
        assert [d.errors_by_status for d in digests] == [{"500": 1}, {"unknown": 1}, {"200": 1}]
        assert all(d.ended_on_error and d.capture_observed and d.policy_calls_observed for d in digests)
        assert [d.successful_model_calls for d in digests] == [0, 0, 0]
        assert [(d.transcript_prompt_tokens, d.capture_completion_tokens) for d in digests] == [(10, 5)] * 3

    def test_capture_gap_still_counts_errors(self, spec_examples: Path) -> None:
        case = next(c for c in _cases(spec_examples) if c["id"] == "12_capture_gaps")
        first = _digests(case)[0]
        assert first.model_call_errors == 1 and first.ended_on_error
        assert first.verdict == "unobserved"

    def test_replay_identity_collision_counts_once(self) -> None:
        ref_ab = {"type": "responses_api_models", "name": "a:b"}
        ref_a = {"type": "responses_api_models", "name": "a"}
        trajectory = {
            "task_id": "t",
            "rollout_id": "r",
            "model_calls": [
                {"response_metadata": {"model_ref": ref_ab, "response_id": "c"}},
                {"response_metadata": {"model_ref": ref_a, "response_id": "b:c"}},
                {"response_metadata": {"response_id": "x"}},
                {"response_metadata": {"response_id": "x"}},
                {},
                {},
            ],
        }
        digest = digest_record({"ng_trajectory": trajectory})
        assert digest.duplicated_calls == 2
        assert digest.model_calls == 6 and digest.capture_observed

    def test_transcript_usage_rules(self) -> None:
        def usage(value: object) -> tuple[int, int]:
            d = digest_record({"response": {"usage": value}})
            return d.transcript_prompt_tokens, d.transcript_completion_tokens

        assert usage({"input_tokens": 3, "output_tokens": 4}) == (3, 4)
        assert usage({"prompt_tokens": 3, "completion_tokens": 4}) == (3, 4)
        assert usage({"input_tokens": None, "prompt_tokens": 3, "output_tokens": 1}) == (0, 1)
        assert usage({"input_tokens": 10.0, "output_tokens": True}) == (0, 0)
        assert usage({"input_tokens": -1, "output_tokens": 2}) == (0, 2)
        assert usage([1]) == (0, 0)


class TestUnreadable:
    def test_parse_errors(self) -> None:
        for line, error in [
            (b"{not json", "JSONDecodeError"),
            (b"[1]", "ValueError"),
            (b"NaN", "JSONDecodeError"),
            (b'{"a": 1e400}', "JSONDecodeError"),
            (b"\xef\xbb\xbf{}", "JSONDecodeError"),
            (b'{"a": "\\ud800"}', "JSONDecodeError"),
            (b"\xff", "JSONDecodeError"),
            (b"null", "ValueError"),
        ]:
            digest = digest_line(line, source_path="run/r.jsonl", source_index=2, line_number=7, ordinal=3)
            assert digest.task_index == "__unreadable_record__:input-2:line-7"
            assert digest.rollout_id == "__unreadable_record__:input-2:line-7-0"
            assert digest.rollout_index == 0 and digest.ordinal == 3
            assert _finding_dicts(digest) == [
                {
                    "check": "record_unreadable",
                    "locator": {"source_file": "run/r.jsonl", "line": 7},
                    "detail": {"reason": "rollout record is unreadable", "error": error},
                }
            ], line
            assert digest.unobserved == [c for c in ROLLOUT_CHECK_IDS if c != "record_unreadable"]

    def test_whitespace_around_a_line_is_trimmed(self) -> None:
        digest = digest_line(
            b' \t{"_ng_task_index": 4}\r\n', source_path="p", source_index=0, line_number=1, ordinal=0
        )
        assert digest.task_index == 4 and not digest.findings

    def test_ignored_record_unreadable_leaves_unobserved(self) -> None:
        ignored = frozenset({"record_unreadable", "check_execution_error"})
        digest = digest_line(
            b"garbage", source_path="p", source_index=0, line_number=1, ordinal=0, ignored_checks=ignored
        )
        assert digest.findings == [] and digest.verdict == "unobserved"
        assert digest.unobserved[0] == "rollout_duplicate_identity"

    @pytest.mark.parametrize(
        ("record", "field"),
        [
            ({"_ng_task_index": None}, "_ng_task_index"),
            ({"_ng_task_index": 1.5}, "_ng_task_index"),
            ({"_ng_task_index": 1e20}, "_ng_task_index"),
            ({"_ng_task_index": [1]}, "_ng_task_index"),
            ({"_ng_task_index": 1, "_ng_rollout_index": None}, "_ng_rollout_index"),
            ({"_ng_task_index": 1, "_ng_rollout_index": {"a": 1}}, "_ng_rollout_index"),
            ({"_ng_task_index": 1, "stage_index": 0.5}, "stage_index"),
        ],
    )
    def test_invalid_identity_is_reported_not_raised(self, record: dict[str, Any], field: str) -> None:
        digest = digest_record(record, source_path="run/x.jsonl", source_index=1, line_number=9, ordinal=4)
        assert digest.task_index == "__unreadable_record__:input-1:line-9"
        assert digest.verdict == "unhealthy"
        assert _finding_dicts(digest) == [
            {
                "check": "record_unreadable",
                "locator": {"source_file": "run/x.jsonl", "line": 9},
                "detail": {
                    "reason": "rollout record identity is invalid",
                    "error": "ValidationError",
                    "field": field,
                },
            }
        ]


class TestIdentity:
    @pytest.mark.parametrize(
        ("record", "expected"),
        [
            ({"_ng_task_index": 2.0, "_ng_rollout_index": 0.0}, (2, 0, None, "2.0-0.0")),
            ({"_ng_task_index": True, "_ng_rollout_index": "x"}, (1, "x", None, "True-x")),
            ({"_ng_task_index": "5"}, ("5", 0, None, "5-0")),
            ({"_ng_task_index": 1e16, "stage_index": False}, (10**16, 0, 0, "1e+16-0")),
            ({"_ng_rollout_id": 0, "ng_trajectory": {"rollout_id": 77}}, (3, 0, None, "77")),
            ({"_ng_rollout_id": {"a": 1}}, (3, 0, None, "{'a': 1}")),
            ({"_ng_rollout_id": "", "ng_trajectory": "rid"}, (3, 0, None, "3-0")),
            (
                {"_ng_task_index": 18446744073709551615},
                (18446744073709551615, 0, None, "18446744073709551615-0"),
            ),
            ({"stage_index": None, "_ng_rollout_id": 2.5}, (3, 0, None, "2.5")),
        ],
    )
    def test_coerced_indices_and_raw_rollout_id(
        self, record: dict[str, Any], expected: tuple[Any, ...]
    ) -> None:
        digest = digest_record(record, ordinal=3)
        assert (digest.task_index, digest.rollout_index, digest.stage_index, digest.rollout_id) == expected
        assert type(digest.task_index) is type(expected[0])


def test_deep_free_form_value_fails_the_dump_with_value_error() -> None:
    def nested(depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = [value]
        return value

    for depth, error in [(254, None), (255, "ValueError")]:
        trajectory = {"task_id": "t", "rollout_id": "r", "model_calls": [{"request": nested(depth)}]}
        line = json.dumps({"ng_trajectory": trajectory}).encode()
        for digest in (
            digest_record({"ng_trajectory": trajectory}),
            digest_line(line, source_path="p", source_index=0, line_number=1, ordinal=0),
        ):
            errors = [f.detail.get("error") for f in digest.findings if f.check == "record_unreadable"]
            assert errors == ([] if error is None else [error])


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _deep_at(location: str, value: Any) -> dict[str, Any]:
    turn = {
        "invocation_id": "i",
        "task_id": "t",
        "rollout_id": "r",
        "turn_no": 1,
        "timestamp": 0,
        "step_count": 0,
    }
    base: dict[str, Any] = {"task_id": "t", "rollout_id": "r"}
    if location in ("request", "response"):
        return {**base, "model_calls": [{"model_call_id": "c"}, {location: value}]}
    if location in ("question", "answer", "reasoning_content"):
        return {**base, "turns": [{**turn, location: value}]}
    if location == "tool_output":
        return {**base, "tool_calls": [{"invocation_id": "i", "tool_call_id": "t", "output": value}]}
    items = {
        "mcp_extra": {
            "type": "mcp_call",
            "id": "m",
            "arguments": "{}",
            "name": "n",
            "server_label": "s",
            "x": value,
        },
        "action_extra": {
            "type": "web_search_call",
            "id": "w",
            "status": "completed",
            "action": {"type": "search", "query": "q", "x": value},
        },
    }
    fast = {"role": "user", "content": "hi"}
    return {
        **base,
        "invocations": [
            {"invocation_id": "a", "conversation": [fast]},
            {"invocation_id": "b", "conversation": [fast, items[location]]},
        ],
    }


@pytest.mark.parametrize(
    "location",
    [
        "request",
        "response",
        "question",
        "answer",
        "reasoning_content",
        "tool_output",
        "mcp_extra",
        "action_extra",
    ],
)
def test_depth_guard_agrees_with_the_real_dump_at_every_free_form_location(location: str) -> None:
    """The cheap guard serializes only free-form values; its verdict must equal the dump's."""
    for depth in range(249, 257):
        trajectory = _deep_at(location, _nested(depth))
        expected = canonical_trajectory(trajectory)[1]
        line = json.dumps({"ng_trajectory": trajectory}).encode()
        for digest in (
            digest_record({"ng_trajectory": trajectory}),
            digest_line(line, source_path="p", source_index=0, line_number=1, ordinal=0),
        ):
            errors = [f.detail.get("error") for f in digest.findings if f.check == "record_unreadable"]
            assert errors == ([] if expected is None else [expected]), (location, depth)
