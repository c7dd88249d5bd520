"""Property tests on generated rollout files: order independence and robustness.

* the pooled run writes exactly what the serial run writes;
* feeding per-line digests to a reducer one at a time, in any order, gives the batch output;
* no input line, however malformed, raises out of the pipeline.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from health import HealthReducer, run_health_checks
from health.compact import compact_digest, expand_digest
from health.digest import digest_line
from health.jsonl import is_blank

POLICY = {"type": "responses_api_models", "name": "policy"}
JUDGE = {"type": "responses_api_models", "name": "judge"}
GAP_CODES = [
    "turns_unavailable",
    "model_call_capture_incomplete",
    "model_call_reference_unmatched",
    "turn_model_call_scope_incomplete",
    "trajectory_projection_failed",
    "something_else",
]

indices = st.one_of(
    st.integers(0, 4),
    st.sampled_from(["a", "1", "__unreadable_record__:input-0:line-1"]),
    st.just(2.0),
    st.booleans(),
)
odd_indices = st.sampled_from([None, 1.5, [1], {"a": 1}, 1e30])


@st.composite
def model_calls(draw: st.DrawFn, position: int) -> dict[str, Any]:
    return {
        "model_call_id": draw(st.sampled_from([f"c{position}", "c0", "", None])),
        "started_at": draw(st.one_of(st.none(), st.floats(0, 10))),
        "response": draw(
            st.sampled_from([{"output_text": "ok"}, {"output_text": ""}, None, {"choices": 5}, "text"])
        ),
        "response_metadata": {
            "model_ref": draw(st.sampled_from([POLICY, JUDGE, None])),
            "response_id": draw(st.sampled_from([f"r{position}", None])),
            "status_code": draw(st.sampled_from([200, 500, 429, 100, None, "503"])),
            "finish_reason": draw(st.sampled_from(["stop", "length", None])),
            "error_category": draw(st.sampled_from([None, "", "timeout"])),
        },
        "token_stats": {
            "prompt_tokens": draw(st.sampled_from([10, 0, None])),
            "completion_tokens": draw(st.sampled_from([5, 0, None])),
        },
    }


@st.composite
def trajectories(draw: st.DrawFn) -> Any:
    calls = [draw(model_calls(position)) for position in range(draw(st.integers(0, 3)))]
    turns = []
    for turn_no in range(1, draw(st.integers(0, 3)) + 1):
        refs = draw(st.lists(st.sampled_from([{"model_call_id": "c0"}, {"model_call_id": "c1"}]), max_size=2))
        turns.append(
            {
                "invocation_id": "main",
                "task_id": "t",
                "rollout_id": "r",
                "turn_no": turn_no,
                "timestamp": 1.0,
                "step_count": 1,
                "answer": draw(st.sampled_from(["", "answer", [{"type": "function_call"}], None])),
                "model_calls": refs,
            }
        )
    trajectory: dict[str, Any] = {"task_id": "t", "rollout_id": "r", "turns": turns, "model_calls": calls}
    gaps = draw(st.lists(st.sampled_from(GAP_CODES), max_size=2))
    if gaps:
        trajectory["gaps"] = [{"code": code, "detail": "x:c0"} for code in gaps]
    if draw(st.booleans()):
        trajectory["invocations"] = [{"invocation_id": "main", "model_calls": [{"model_call_id": "c2"}]}]
    return draw(st.one_of(st.just(trajectory), st.sampled_from([{"task_id": 1}, "nope", None])))


@st.composite
def records(draw: st.DrawFn) -> bytes:
    record: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        record["_ng_task_index"] = draw(indices)
    elif draw(st.booleans()):
        record["_ng_task_index"] = draw(odd_indices)
    if draw(st.integers(0, 5)):
        record["_ng_rollout_index"] = draw(st.one_of(st.integers(0, 2), st.just("x")))
    if draw(st.integers(0, 3)) == 0:
        record["stage_index"] = draw(st.one_of(st.none(), st.integers(0, 1), st.just("s")))
    if draw(st.booleans()):
        record["_ng_rollout_id"] = draw(st.sampled_from(["id", "", 0, 7]))
    if draw(st.booleans()):
        record["response"] = {
            "usage": {"input_tokens": draw(st.sampled_from([10, None, 10.0])), "output_tokens": 5}
        }
    if draw(st.integers(0, 4)):
        record["ng_trajectory"] = draw(trajectories())
    return orjson.dumps(record)


junk = st.one_of(
    st.binary(max_size=40).map(lambda data: data.replace(b"\n", b" ")),
    st.sampled_from([b"[1,2]", b"null", b'"s"', b"{", b'{"a":NaN}', b"\xef\xbb\xbf{}", b" \t ", b"{}"]),
)
lines = st.lists(st.one_of(records(), records(), junk), min_size=1, max_size=14)
separators = st.sampled_from([b"\n", b"\r\n", b"\n\n"])


def _write(directory: Path, body: list[bytes], separator: bytes) -> Path:
    path = directory / "rollouts.jsonl"
    path.write_bytes(separator.join(body))
    return path


def _reports(directory: Path) -> tuple[bytes, bytes]:
    return (directory / "quality_summary.json").read_bytes(), (
        directory / "rollout_verdicts.jsonl"
    ).read_bytes()


def _settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@_settings(15)
@given(
    body=lines,
    separator=separators,
    ignored=st.sets(
        st.sampled_from(["rollout_duplicate_identity", "agent_turn_hollow", "task_consistently_unhealthy"])
    ),
)
def test_pooled_run_equals_serial_run(body: list[bytes], separator: bytes, ignored: set[str]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = _write(Path(scratch), body, separator)
        serial = run_health_checks(
            path, output_dir=Path(scratch) / "serial", workers=1, ignored_checks=ignored
        )
        pooled = run_health_checks(
            path, output_dir=Path(scratch) / "pooled", workers=2, ignored_checks=ignored
        )
        assert _reports(Path(scratch) / "serial") == _reports(Path(scratch) / "pooled")
        assert serial.rollouts == pooled.rollouts


@_settings(80)
@given(body=lines, separator=separators, seed=st.integers(0, 2**32 - 1), packed=st.booleans())
def test_digests_in_any_order_equal_the_batch(
    body: list[bytes], separator: bytes, seed: int, packed: bool
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = _write(Path(scratch), body, separator)
        batch = run_health_checks(path, workers=1)
        data = path.read_bytes()
        numbered = [(number, line) for number, line in enumerate(data.split(b"\n"), 1) if not is_blank(line)]
        digests = [
            digest_line(line, source_path=str(path), source_index=0, line_number=number, ordinal=ordinal)
            for ordinal, (number, line) in enumerate(numbered)
        ]
        for digest in digests:  # the compact form loses nothing (subjects are implied by scope)
            assert expand_digest(compact_digest(digest)) == digest
        random.Random(seed).shuffle(digests)
        reducer = HealthReducer(packed=packed)
        for digest in digests:
            reducer.add(digest)
            reducer.summary()
        assert reducer.summary_bytes() == batch.summary_path.read_bytes()
        assert b"".join(reducer.iter_verdict_lines()) == batch.verdicts_path.read_bytes()
        assert reducer.digests() == batch.rollouts
        tasks = {digest.task_index for digest in digests}
        for task in tasks:
            flags = [finding.check for finding in reducer.close_task(task)]
            if isinstance(task, str) or str(task) not in tasks:  # an int task's entry may be overwritten
                assert flags == batch.summary["tasks"][str(task)]["flags"]


@_settings(100)
@given(body=st.lists(st.binary(max_size=60), min_size=1, max_size=8))
def test_no_line_raises(body: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = _write(Path(scratch), body, b"\n")
        result = run_health_checks(path, workers=1)
        non_blank = sum(1 for line in path.read_bytes().split(b"\n") if line.strip(b" \t\n\r\x0b\x0c"))
        assert result.summary["run"]["artifacts"]["records"] == non_blank
        assert len(result.verdicts_path.read_bytes().splitlines()) == non_blank
