"""The synthetic generator and its whole runs: determinism, row contract, fault rates, run layout."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.sidecar.synthetic_support import (
    FAULT_CHECKS,
    MAX_ATTEMPTS,
    SAMPLE_RUN_CONFIG,
    SAMPLE_RUN_SEED,
    FaultRates,
    RolloutEvent,
    SyntheticConfig,
    generate_events,
    generate_rows,
    materialized_rows,
    rollout_event,
    sample_task_seconds,
    write_run_dir,
)

SAMPLE_RUN = Path(__file__).resolve().parents[2] / "sidecar" / "demo" / "sample_run"

# Small payloads keep the suite fast; the shape of the rows does not depend on the payload size.
SMALL = SyntheticConfig(
    num_tasks=12, repeats_per_task=3, model_calls_per_rollout=4, payload_bytes_per_call=512
)
FAULTY = replace(
    SMALL,
    num_tasks=40,
    faults=FaultRates.mixed(0.05),
    failure_rate=0.15,
    drained_fraction=0.05,
    broken_task_fraction=0.1,
    turns=2,
    subagent_probability=0.5,
)


def _events(config: SyntheticConfig, seed: int = 1) -> list[RolloutEvent]:
    return list(generate_events(config, seed))


def _trajectory_record() -> Any:
    contract = pytest.importorskip("health.contract")
    if not hasattr(contract, "TrajectoryRecord"):
        pytest.skip("health.contract does not export TrajectoryRecord yet")
    return contract.TrajectoryRecord


def _tokens(calls: list[dict[str, Any]], name: str) -> int:
    return sum(call["token_stats"][name] or 0 for call in calls)


class TestDeterminism:
    def test_same_seed_same_bytes(self, tmp_path: Path) -> None:
        first = write_run_dir(tmp_path / "a", FAULTY, seed=3)
        second = write_run_dir(tmp_path / "b", FAULTY, seed=3)
        for name in ("rollouts.jsonl", "rollouts_failures.jsonl", "rollouts_materialized_inputs.jsonl"):
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
        assert first.bytes_written == second.bytes_written > 0

    def test_different_seed_different_rows(self) -> None:
        first = [orjson.dumps(row) for row in generate_rows(SMALL, 1)]
        second = [orjson.dumps(row) for row in generate_rows(SMALL, 2)]
        assert first != second

    def test_row_content_does_not_depend_on_schedule(self) -> None:
        """A row is a function of (seed, identity): concurrency changes the order, not the rows."""
        narrow = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in generate_rows(SMALL, 4)}
        wide = {
            (r["_ng_task_index"], r["_ng_rollout_index"]): r
            for r in generate_rows(replace(SMALL, concurrency=1), 4)
        }
        assert narrow.keys() == wide.keys()
        key = (5, 1)
        assert (
            narrow[key]["ng_trajectory"]["model_calls"][0]["request"]
            == (wide[key]["ng_trajectory"]["model_calls"][0]["request"])
        )


class TestRolloutEvent:
    def test_matches_the_scheduled_run_apart_from_timing(self) -> None:
        scheduled: dict[tuple[int, int, int], RolloutEvent] = {}
        for event in _events(FAULTY, 6):
            if event.kind != "drained":  # the first write of a key; a re-written duplicate differs
                scheduled.setdefault((event.task_index, event.rollout_index, event.attempt_index), event)
        for (task, rollout, attempt), expected in list(scheduled.items())[:40]:
            event = rollout_event(FAULTY, 6, task, rollout, attempt, started_at=expected.started_at)
            assert (event.kind, event.fault, event.line) == (expected.kind, expected.fault, expected.line)
            assert event.row == expected.row
            assert event.latency_seconds == pytest.approx(expected.latency_seconds)


class TestHealthyRows:
    def test_every_rollout_once_with_identity_keys(self) -> None:
        rows = list(generate_rows(SMALL, 1))
        keys = [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in rows]
        assert sorted(keys) == [(t, r) for t in range(12) for r in range(3)]
        for row in rows:
            assert row["agent_ref"] == {"name": "synthetic_agent"}
            assert "_ng_attempt_index" not in row
            assert "_ng_failure_class" not in row
            assert orjson.loads(orjson.dumps(row)) == row

    def test_rows_validate_as_trajectory_record(self) -> None:
        record_type = _trajectory_record()
        config = replace(SMALL, turns=2, subagent_probability=0.7)
        for row in generate_rows(config, 5):
            record = record_type.model_validate(row["ng_trajectory"])
            assert record.rollout_id == f"{row['_ng_task_index']}-{row['_ng_rollout_index']}"

    def test_usage_matches_calls_and_every_call_is_turn_referenced(self) -> None:
        for row in generate_rows(replace(SMALL, subagent_probability=1.0, turns=2), 2):
            trajectory = row["ng_trajectory"]
            calls = trajectory["model_calls"]
            usage = row["response"]["usage"]
            assert usage["input_tokens"] == _tokens(calls, "prompt_tokens")
            assert usage["output_tokens"] == _tokens(calls, "completion_tokens")
            referenced = {ref["model_call_id"] for turn in trajectory["turns"] for ref in turn["model_calls"]}
            assert referenced == {call["model_call_id"] for call in calls}
            assert all(turn["answer"] for turn in trajectory["turns"])

    def test_calls_are_chronological_inside_the_rollout_window(self) -> None:
        for event in _events(SMALL):
            assert event.row is not None and event.started_at is not None
            calls = event.row["ng_trajectory"]["model_calls"]
            starts = [call["started_at"] for call in calls]
            assert starts == sorted(starts)
            assert event.started_at <= starts[0] and calls[-1]["completed_at"] <= event.finished_at + 1e-3

    def test_judge_calls_are_captured_but_owned_by_no_invocation(self) -> None:
        judged = 0
        for row in generate_rows(replace(SMALL, judge_call_probability=0.5), 7):
            trajectory = row["ng_trajectory"]
            owned = {ref["model_call_id"] for inv in trajectory["invocations"] for ref in inv["model_calls"]}
            policy = [c for c in trajectory["model_calls"] if c["model_call_id"] in owned]
            others = [c for c in trajectory["model_calls"] if c["model_call_id"] not in owned]
            judged += len(others)
            assert all(c["response_metadata"]["model_ref"]["name"] == "judge_model" for c in others)
            assert row["response"]["usage"]["input_tokens"] == _tokens(policy, "prompt_tokens")
        assert judged > 0

    def test_subagents_and_tool_calls_are_linked(self) -> None:
        rows = list(generate_rows(replace(SMALL, subagent_probability=1.0, tool_call_probability=1.0), 3))
        spawned = 0
        for row in rows:
            trajectory = row["ng_trajectory"]
            tool_ids = {(t["invocation_id"], t["tool_call_id"]) for t in trajectory["tool_calls"]}
            for invocation in trajectory["invocations"][1:]:
                spawned += 1
                assert (invocation["parent_invocation_id"], invocation["spawned_by_tool_call_id"]) in tool_ids
        assert spawned > 0

    def test_conversation_items_are_responses_input_items(self) -> None:
        kinds: Counter[str] = Counter()
        for row in generate_rows(replace(SMALL, subagent_probability=1.0, tool_call_probability=0.7), 1):
            for invocation in row["ng_trajectory"]["invocations"]:
                for item in invocation["conversation"]:
                    kinds[item["type"]] += 1
                    if item["type"] == "message":
                        part = item["content"][0]["type"]
                        assert part == ("input_text" if item["role"] == "user" else "output_text")
        assert {"message", "function_call", "function_call_output", "reasoning"} <= set(kinds)

    def test_payload_size_tracks_the_config(self) -> None:
        config = SyntheticConfig(num_tasks=10, repeats_per_task=2, model_calls_per_rollout=8)
        sizes = [len(orjson.dumps(row)) for row in generate_rows(config, 1)]
        # ~8 calls x 8 KB, plus the turns, refs and capture metadata around them.
        assert 55_000 < statistics.mean(sizes) < 110_000


class TestFaults:
    def test_fault_rates_are_roughly_honoured(self) -> None:
        config = SyntheticConfig(
            num_tasks=300,
            repeats_per_task=2,
            model_calls_per_rollout=2,
            payload_bytes_per_call=64,
            faults=FaultRates(hollow_turn=0.1, token_count_mismatch=0.2, no_trajectory=0.05),
        )
        events = [e for e in _events(config) if e.kind in ("result", "unreadable")]
        counts = Counter(e.fault for e in events)
        n = len(events)
        for fault, rate in (("hollow_turn", 0.1), ("token_count_mismatch", 0.2), ("no_trajectory", 0.05)):
            sigma = (rate * (1 - rate) * n) ** 0.5
            assert abs(counts[fault] - rate * n) < 4 * sigma, (fault, counts[fault], n)
        assert (
            counts[None] + counts["hollow_turn"] + counts["token_count_mismatch"] + counts["no_trajectory"]
            == n
        )

    def test_every_fault_has_a_target_check(self) -> None:
        assert set(FAULT_CHECKS) == {name for name, _ in FaultRates().items()} | {"broken_task"}

    def test_rates_must_sum_to_at_most_one(self) -> None:
        with pytest.raises(ValueError, match="sum to at most 1"):
            FaultRates(hollow_turn=0.6, failed_model_call=0.6)

    def test_shape_of_each_fault(self) -> None:
        seen: set[str] = set()
        for event in _events(FAULTY, 2):
            if event.fault is None or event.kind == "unreadable":
                continue
            seen.add(event.fault)
            assert event.row is not None
            _assert_fault_shape(event.fault, event.row)
        assert seen >= set(FAULT_CHECKS) - {"unreadable_line"}

    def test_broken_tasks_break_every_repeat(self) -> None:
        by_task: dict[int, set[str | None]] = {}
        for event in _events(FAULTY, 2):
            if event.kind in ("result", "unreadable"):
                by_task.setdefault(event.task_index, set()).add(event.fault)
        broken = [faults for faults in by_task.values() if "broken_task" in faults]
        assert broken and all(faults == {"broken_task"} for faults in broken)
        assert len(broken) < len(by_task)

    def test_invalid_trajectory_rows_fail_validation(self) -> None:
        record_type = _trajectory_record()
        from pydantic import ValidationError

        invalid = [e.row for e in _events(FAULTY, 2) if e.fault == "invalid_trajectory"]
        assert invalid
        for row in invalid:
            assert row is not None
            with pytest.raises(ValidationError):
                record_type.model_validate(row["ng_trajectory"])

    def test_unreadable_lines_are_torn_json(self) -> None:
        torn = [e for e in _events(FAULTY, 2) if e.kind == "unreadable"]
        assert torn
        for event in torn:
            assert event.line is not None and event.line.endswith(b"\n")
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(event.line)

    def test_duplicate_identity_writes_the_key_twice(self) -> None:
        events = _events(FAULTY, 2)
        duplicated = Counter(
            (e.task_index, e.rollout_index, e.attempt_index)
            for e in events
            if e.fault == "duplicate_identity"
        )
        assert duplicated and set(duplicated.values()) == {2}


def _assert_fault_shape(fault: str, row: dict[str, Any]) -> None:
    """The row carries the evidence its target check reads (the calls, turns and usage the check reads)."""
    trajectory = row.get("ng_trajectory")
    if fault == "no_trajectory":
        assert trajectory is None
        return
    assert trajectory is not None
    calls = trajectory["model_calls"]
    metas = [call["response_metadata"] for call in calls]
    stats = [call["token_stats"] for call in calls]
    if fault == "hollow_turn":
        assert any(not turn["answer"] or _all_text_empty(turn["answer"]) for turn in trajectory["turns"])
    elif fault == "failed_model_call":
        assert any(m["status_code"] in (429, 500) and m["error_category"] for m in metas)
        assert metas[-1]["status_code"] == 200
    elif fault == "missing_turns":
        assert trajectory["turns"] == [] and calls
    elif fault == "malformed_response":
        assert any(isinstance(c["response"].get("choices", [{}])[0].get("message"), str) for c in calls)
    elif fault == "broken_task":
        assert [(m["status_code"], m["error_category"]) for m in metas] == [(400, "context_length_exceeded")]
    elif fault == "ended_on_failed_call":
        assert metas[-1]["status_code"] in (429, 500)
    elif fault == "missing_token_counts":
        assert any(s["prompt_tokens"] is None or s["completion_tokens"] is None for s in stats)
    elif fault == "zero_completion_tokens":
        assert any(s["completion_tokens"] == 0 for s in stats)
    elif fault == "token_count_mismatch":
        usage = row["response"]["usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) != (
            _tokens(calls, "prompt_tokens"),
            _tokens(calls, "completion_tokens"),
        )
    elif fault == "runaway_generation":
        assert any(m["finish_reason"] == "length" for m in metas)
    elif fault == "observation_gap":
        assert trajectory["gaps"]
    elif fault == "capture_mismatch":
        refs = {r["model_call_id"] for t in trajectory["turns"] for r in t["model_calls"]}
        ids = {call["model_call_id"] for call in calls}
        assert trajectory["gaps"] or None in refs or not refs <= ids


def _all_text_empty(answer: Any) -> bool:
    if isinstance(answer, str):
        return not answer.strip()
    return all(not part["text"].strip() for item in answer for part in item.get("content", []))


class TestFailuresAndDrains:
    def test_failure_rows_follow_the_sidecar_contract(self) -> None:
        rows = [e.row for e in _events(FAULTY, 2) if e.kind == "failure" and e.row is not None]
        assert rows
        classes = Counter(row["_ng_failure_class"] for row in rows)
        assert set(classes) <= {
            "agent_request_failed",
            "agent_run_error",
            "timeout_exceeded",
            "environment_server_failed",
        }
        for row in rows:
            assert isinstance(row["_ng_task_index"], int) and isinstance(row["_ng_rollout_index"], int)
            if row["_ng_failure_class"].startswith("agent_"):
                assert "_ng_failure_terminal" not in row and "_ng_failure_type" in row

    def test_retries_count_prior_failures_and_stop_at_terminal_or_max(self) -> None:
        history: dict[tuple[int, int], list[RolloutEvent]] = {}
        for event in _events(replace(FAULTY, failure_rate=0.5), 2):
            if event.kind != "drained":
                history.setdefault((event.task_index, event.rollout_index), []).append(event)
        for attempts in history.values():
            failures = [e for e in attempts if e.kind == "failure"]
            assert [e.attempt_index for e in failures] == list(range(len(failures)))
            assert len(failures) <= MAX_ATTEMPTS
            for event in failures:
                assert event.row is not None
                if event.row.get("_ng_failure_terminal"):
                    assert event is attempts[-1]
            for event in attempts:
                assert event.row is None or event.row.get("_ng_attempt_index", 0) == event.attempt_index

    def test_drained_rows_have_the_drain_shape_and_are_redispatched(self) -> None:
        events = _events(FAULTY, 2)
        drained = [e for e in events if e.kind == "drained"]
        assert len(drained) == round(FAULTY.drained_fraction * FAULTY.num_tasks * FAULTY.repeats_per_task)
        for event in drained:
            assert event.row is not None and event.latency_seconds is None
            assert list(event.row)[:4] == [
                "_ng_failure_class",
                "_ng_no_persist",
                "_ng_dispatch_drained",
                "error_message",
            ]
            assert event.row["error_message"].startswith("not dispatched: ")
            later = [
                e
                for e in events
                if (e.task_index, e.rollout_index) == (event.task_index, event.rollout_index)
            ]
            assert later[-1].kind != "drained"

    def test_completion_order_interleaves_repeats(self) -> None:
        events = [e for e in _events(SMALL) if e.kind == "result"]
        finished = [e.finished_at for e in events]
        assert finished == sorted(finished)
        order = [(e.task_index, e.rollout_index) for e in events]
        assert order != sorted(order)


class TestRunDir:
    def test_layout_and_counts(self, tmp_path: Path) -> None:
        stats = write_run_dir(tmp_path, FAULTY, seed=2, name="out")
        main = (tmp_path / "out.jsonl").read_bytes().splitlines()
        side = (tmp_path / "out_failures.jsonl").read_bytes().splitlines()
        inputs = (tmp_path / "out_materialized_inputs.jsonl").read_bytes().splitlines()
        assert len(main) == stats.rows + stats.unreadable_lines
        assert len(side) == stats.failure_rows > 0
        assert len(inputs) == FAULTY.num_tasks * FAULTY.repeats_per_task
        assert all(b'"_ng_no_persist"' not in line for line in main + side)
        assert stats.bytes_written == sum(len(line) + 1 for line in main + side)
        assert [orjson.loads(line) for line in inputs] == list(materialized_rows(FAULTY, 2))

    def test_bundled_sample_run_is_current(self, tmp_path: Path) -> None:
        """``sidecar/sample_run`` is exactly what its README says generates it."""
        write_run_dir(tmp_path, SAMPLE_RUN_CONFIG, SAMPLE_RUN_SEED, materialized_inputs=False)
        for name in ("rollouts.jsonl", "rollouts_failures.jsonl"):
            assert (SAMPLE_RUN / name).read_bytes() == (tmp_path / name).read_bytes(), name
        assert (SAMPLE_RUN / "rollouts.jsonl").stat().st_size < 200_000


class TestAgainstHealthPipeline:
    """Each row's fault makes the project's health pipeline report the fault's target check."""

    def test_findings_match_the_injected_faults(self, tmp_path: Path) -> None:
        health = pytest.importorskip("health")
        config = replace(FAULTY, num_tasks=30, judge_call_probability=0.3)
        stats = write_run_dir(tmp_path, config, seed=8, materialized_inputs=False)
        health.run_health_checks([stats.rollouts_path], output_dir=tmp_path, workers=1)
        verdicts: dict[tuple[int, int, str], dict[str, Any]] = {}
        for line in (tmp_path / "rollout_verdicts.jsonl").read_bytes().splitlines():
            row = orjson.loads(line)
            verdicts[(row["_ng_task_index"], row["_ng_rollout_index"], row["rollout_id"])] = row
        checked = Counter[str | None]()
        for event in _events(config, 8):
            if event.kind != "result":
                continue
            attempt = (
                f"-a{event.attempt_index}" if event.attempt_index and event.fault != "no_trajectory" else ""
            )
            verdict = verdicts[
                (event.task_index, event.rollout_index, f"{event.task_index}-{event.rollout_index}{attempt}")
            ]
            target = FAULT_CHECKS.get(event.fault) if event.fault else None
            if event.fault is None:
                assert verdict["verdict"] == "healthy", verdict
            elif target is None:
                assert verdict["verdict"] == "unobserved", (event.fault, verdict)
            else:
                assert target in {f["check"] for f in verdict["findings"]}, (event.fault, verdict)
            checked[event.fault] += 1
        assert len(checked) >= 12
        summary = orjson.loads((tmp_path / "quality_summary.json").read_bytes())
        assert summary["run"]["issues"]["record_unreadable"] >= stats.unreadable_lines > 0
        broken = {e.task_index for e in _events(config, 8) if e.fault == "broken_task"}
        assert broken
        for task in broken:
            assert summary["tasks"][str(task)]["flags"] == [
                "task_consistently_unhealthy",
                "task_no_successful_model_calls",
            ]


class TestTaskSeconds:
    def test_long_tailed_and_bounded(self) -> None:
        rng = random.Random(0)
        samples = sorted(sample_task_seconds(rng) for _ in range(5000))
        median, p99 = samples[2500], samples[int(0.99 * 5000)]
        assert 70 < median < 125
        assert p99 > 4 * median
        assert samples[0] >= 2.0 and samples[-1] <= 4 * 3600.0
