"""The ``ng_trajectory`` contract: lax coercion, forbidden extras, constraints, cross-field rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from health.contract import TrajectoryRecord, canonical_trajectory, check_trajectory, validate_trajectory

POLICY = {"type": "responses_api_models", "name": "policy"}


def _base() -> dict[str, Any]:
    return copy.deepcopy(_BASE)


_BASE: dict[str, Any] = {
    "task_id": "t",
    "rollout_id": "r",
    "invocations": [{"invocation_id": "i1", "model_calls": [{"model_call_id": "c1"}]}],
    "turns": [
        {
            "invocation_id": "main",
            "task_id": "t",
            "rollout_id": "r",
            "turn_no": 1,
            "timestamp": 1.0,
            "step_count": 0,
            "model_calls": [{"model_ref": POLICY, "response_id": "r1"}],
        }
    ],
    "model_calls": [
        {
            "model_call_id": "c1",
            "response_metadata": {"response_id": "r1", "model_ref": POLICY, "status_code": 200},
            "token_stats": {"prompt_tokens": 1, "completion_tokens": 1},
        }
    ],
    "tool_calls": [{"invocation_id": "i1", "tool_call_id": "t1"}],
    "gaps": [{"code": "x"}],
}


def _with(path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    raw = _base()
    node: Any = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return raw


def _canonical_at(path: tuple[str | int, ...], value: object) -> object:
    """The canonical value at ``path`` after setting it to ``value``, or the error name."""
    canonical, error = canonical_trajectory(_with(path, value))
    if canonical is None:
        return error
    node: Any = canonical
    for key in path:
        node = node[key]
    return node


STATUS = ("model_calls", 0, "response_metadata", "status_code")
STARTED = ("model_calls", 0, "started_at")
RESOLVED = ("turns", 0, "resolved")
TASK_ID = ("task_id",)
DURATION = ("model_calls", 0, "duration_ms")
TURN_NO = ("turns", 0, "turn_no")
STEP_COUNT = ("turns", 0, "step_count")
TOKENS = ("model_calls", 0, "token_stats", "completion_tokens")
ERR = "ValidationError"


class TestLaxCoercion:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (500, 500),
            (2.0, 2),
            ("500", 500),
            (" 2 ", 2),
            ("+3", 3),
            ("1_000", 1000),
            ("2.0", 2),
            (True, 1),
            (False, 0),
            (None, None),
            (2.5, ERR),
            ("2.5", ERR),
            ("1e2", ERR),
            ("0x10", ERR),
            ("", ERR),
            ([], ERR),
        ],
    )
    def test_int(self, value: object, expected: object) -> None:
        result = _canonical_at(STATUS, value)
        assert result == expected and type(result) is type(expected)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [(5, 5.0), ("1.5", 1.5), (True, 1.0), ("inf", float("inf")), (None, None), ("x", ERR), ([], ERR)],
    )
    def test_float(self, value: object, expected: object) -> None:
        result = _canonical_at(STARTED, value)
        assert result == expected and type(result) is type(expected)

    def test_float_nan_string(self) -> None:
        result = _canonical_at(STARTED, "nan")
        assert isinstance(result, float) and result != result

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (True, True),
            (0, False),
            (1.0, True),
            ("yes", True),
            ("OFF", False),
            ("t", True),
            ("n", False),
            ("1", True),
            (None, None),
            (2, ERR),
            ("", ERR),
            ("maybe", ERR),
        ],
    )
    def test_bool(self, value: object, expected: object) -> None:
        assert _canonical_at(RESOLVED, value) == expected

    @pytest.mark.parametrize("value", [5, 5.0, True, None, [], {}])
    def test_str_accepts_only_strings(self, value: object) -> None:
        assert _canonical_at(TASK_ID, value) == ERR

    def test_str_is_kept_verbatim(self) -> None:
        assert canonical_trajectory(_with(TASK_ID, " t "))[1] == ERR  # turn task_id no longer matches
        raw = _with(TASK_ID, " t ")
        raw["turns"][0]["task_id"] = " t "
        assert (canonical_trajectory(raw)[0] or {})["task_id"] == " t "

    @pytest.mark.parametrize(
        ("path", "value", "ok"),
        [
            (("schema_version",), "1.0", True),
            (("schema_version",), 1.0, False),
            (("model_calls", 0, "response_metadata", "model_ref", "type"), "other", False),
            (("model_calls", 0, "response_metadata", "response_source"), "local", True),
            (("model_calls", 0, "response_metadata", "response_source"), "LOCAL", False),
            (("invocations", 0, "status"), "failed", True),
            (("invocations", 0, "status"), None, False),
            (("tool_calls", 0, "status"), "timeout", True),
            (("invocations", 0, "kind"), "x", False),
        ],
    )
    def test_literals(self, path: tuple[str | int, ...], value: object, ok: bool) -> None:
        assert (canonical_trajectory(_with(path, value))[1] is None) is ok

    @pytest.mark.parametrize(
        "path",
        [("gaps",), ("turns",), ("model_calls", 0, "response_metadata"), ("model_calls", 0, "token_stats")],
    )
    def test_defaulted_containers_reject_null(self, path: tuple[str | int, ...]) -> None:
        assert canonical_trajectory(_with(path, None))[1] == ERR


class TestConstraints:
    @pytest.mark.parametrize(
        ("path", "value", "ok"),
        [
            (DURATION, 0, True),
            (DURATION, -0.5, False),
            (("model_calls", 0, "response_metadata", "latency_ttft_ms"), -1, False),
            (("invocations", 0, "duration_ms"), -1, False),
            (("tool_calls", 0, "duration_ms"), -1, False),
            (TOKENS, 0, True),
            (TOKENS, -1, False),
            (TURN_NO, 0, False),
            (TURN_NO, 1, True),
            (STEP_COUNT, 0, True),
            (STEP_COUNT, -1, False),
        ],
    )
    def test_bounds(self, path: tuple[str | int, ...], value: object, ok: bool) -> None:
        assert (canonical_trajectory(_with(path, value))[1] is None) is ok


class TestExtras:
    @pytest.mark.parametrize(
        "path",
        [
            (),
            ("turns", 0),
            ("turns", 0, "model_calls", 0),
            ("model_calls", 0),
            ("model_calls", 0, "response_metadata"),
            ("model_calls", 0, "token_stats"),
            ("invocations", 0),
            ("tool_calls", 0),
            ("gaps", 0),
        ],
    )
    def test_unknown_keys_are_rejected(self, path: tuple[str | int, ...]) -> None:
        raw = _base()
        node: Any = raw
        for key in path:
            node = node[key]
        node["latency_ms"] = 3
        assert canonical_trajectory(raw) == (None, ERR)

    def test_model_server_ref_drops_extras(self) -> None:
        ref = {"type": "responses_api_models", "name": "p", "url": "http://x"}
        assert _canonical_at(("model_calls", 0, "response_metadata", "model_ref"), ref) == {
            "type": "responses_api_models",
            "name": "p",
        }


class TestCrossFieldRules:
    @pytest.mark.parametrize(
        "ref",
        [
            {},
            {"model_call_id": ""},
            {"model_ref": POLICY},
            {"response_id": "r"},
            {"model_ref": POLICY, "response_id": ""},
            {"model_call_id": None, "model_ref": None, "response_id": "r"},
        ],
    )
    def test_join_key_rule_rejects(self, ref: dict[str, Any]) -> None:
        assert canonical_trajectory(_with(("turns", 0, "model_calls", 0), ref))[1] == ERR

    @pytest.mark.parametrize(
        "ref",
        [
            {"model_call_id": "c"},
            {"model_call_id": "c", "response_id": ""},
            {"model_ref": POLICY, "response_id": "r"},
        ],
    )
    def test_join_key_rule_accepts(self, ref: dict[str, Any]) -> None:
        assert canonical_trajectory(_with(("invocations", 0, "model_calls", 0), ref))[1] is None

    def test_duplicate_ids(self) -> None:
        raw = _base()
        raw["model_calls"].append(copy.deepcopy(raw["model_calls"][0]))
        assert canonical_trajectory(raw)[1] == ERR
        for call in raw["model_calls"]:
            call["model_call_id"] = ""
        raw["model_calls"].append({"model_call_id": None})
        assert canonical_trajectory(raw)[1] is None
        raw = _base()
        raw["invocations"].append({"invocation_id": "i1"})
        assert canonical_trajectory(raw)[1] == ERR

    def test_turn_identity_and_uniqueness(self) -> None:
        assert canonical_trajectory(_with(("turns", 0, "rollout_id"), "other"))[1] == ERR
        raw = _base()
        raw["turns"].append(copy.deepcopy(raw["turns"][0]))
        assert canonical_trajectory(raw)[1] == ERR
        raw["turns"][1]["invocation_id"] = "sub"
        assert canonical_trajectory(raw)[1] is None

    def test_tool_call_times_are_ordered(self) -> None:
        assert (
            canonical_trajectory(
                _with(("tool_calls", 0), {**_base()["tool_calls"][0], "started_at": 2, "completed_at": 1})
            )[1]
            == ERR
        )
        assert canonical_trajectory(_with(("model_calls", 0, "completed_at"), -5.0))[1] is None

    def test_parent_cycles_are_not_rejected(self) -> None:
        raw = _base()
        raw["invocations"] = [
            {"invocation_id": "a", "parent_invocation_id": "b"},
            {"invocation_id": "b", "parent_invocation_id": "a"},
        ]
        assert canonical_trajectory(raw)[1] is None


class TestCanonicalForm:
    def test_defaults_are_filled(self) -> None:
        canonical, error = canonical_trajectory({"task_id": "t", "rollout_id": "r", "model_calls": [{}]})
        assert error is None and canonical is not None
        assert canonical["schema_version"] == "1.0"
        assert (
            canonical["invocations"]
            == canonical["turns"]
            == canonical["tool_calls"]
            == canonical["gaps"]
            == []
        )
        call = canonical["model_calls"][0]
        assert call["response_metadata"]["status_code"] is None
        assert call["token_stats"] == dict.fromkeys(
            ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "cached_tokens")
        )

    @pytest.mark.parametrize("raw", ["s", 5, [], None, True])
    def test_non_objects_fail_validation(self, raw: object) -> None:
        assert canonical_trajectory(raw) == (None, ERR)
        assert validate_trajectory(raw) is None
        assert check_trajectory(raw) == (None, ERR)

    @pytest.mark.parametrize("field", ["answer", "question", "reasoning_content"])
    def test_dump_depth_limit(self, field: str) -> None:
        def nested(depth: int) -> Any:
            value: Any = "leaf"
            for _ in range(depth):
                value = {"k": value}
            return value

        assert canonical_trajectory(_with(("turns", 0, field), nested(254)))[1] is None
        assert canonical_trajectory(_with(("turns", 0, field), nested(255))) == (None, "ValueError")
        assert isinstance(validate_trajectory(_with(("turns", 0, field), nested(255))), TrajectoryRecord)

    def test_gaps_are_not_deduplicated(self) -> None:
        canonical, _ = canonical_trajectory(_with(("gaps",), [{"code": "a"}, {"code": "a"}]))
        assert canonical is not None and len(canonical["gaps"]) == 2
