"""``api_steps``: the ingest view of a synthetic run agrees with the files NeMo Gym writes."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.sidecar.synthetic_support import (
    FaultRates,
    SyntheticConfig,
    api_steps,
    generate_events,
    write_run_dir,
)

_CONFIG = SyntheticConfig(
    num_tasks=12,
    repeats_per_task=3,
    model_calls_per_rollout=2,
    payload_bytes_per_call=256,
    faults=FaultRates.mixed(0.04),
    failure_rate=0.15,
    drained_fraction=0.1,
)


class TestApiSteps:
    def test_lines_match_the_run_directory(self, tmp_path: Path) -> None:
        steps = list(api_steps(generate_events(_CONFIG, 3)))
        stats = write_run_dir(tmp_path, _CONFIG, 3)
        main = b"".join(s.main_line for s in steps if s.main_line is not None)
        failures = b"".join(s.failure_line for s in steps if s.failure_line is not None)
        assert main == stats.rollouts_path.read_bytes()
        assert failures == stats.failures_path.read_bytes()

    def test_every_kind_appears_and_torn_lines_carry_their_line_number(self) -> None:
        steps = list(api_steps(generate_events(_CONFIG, 3)))
        kinds = {s.event["kind"] for s in steps}
        assert kinds == {"completed", "failed", "drained"}
        assert any("line" in s.event for s in steps), "the configuration should produce a torn line"
        line_number = 0
        for step in steps:
            if step.main_line is None:
                continue
            line_number += 1
            if "line" in step.event:
                assert step.event["line_number"] == line_number
                assert step.event["line"].encode().rstrip(b"\n") == step.main_line.rstrip(b"\n")
            else:
                assert orjson.loads(step.main_line) == step.event["row"]

    def test_row_hook_rewrites_results_and_failures(self) -> None:
        def hook(row: dict[str, object]) -> dict[str, object]:
            return {**row, "canary": "CANARY-123"}

        steps = list(api_steps(generate_events(_CONFIG, 5), row_hook=hook))
        rows = [s.event["row"] for s in steps if "row" in s.event]
        assert rows and all(row["canary"] == "CANARY-123" for row in rows)
        assert all(b"CANARY-123" in s.failure_line for s in steps if s.failure_line is not None)

    def test_tracker_ops_follow_the_event_kinds(self) -> None:
        ops = {
            s.event["kind"]: s.tracker_op[0]
            for s in api_steps(generate_events(_CONFIG, 3))
            if s.tracker_op is not None
        }
        assert ops == {"completed": "record", "failed": "record_failure", "drained": "record_drained"}
