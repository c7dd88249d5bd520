"""RunState: live health counts equal the reducer's, cheaply; accounting identity; histogram."""

from __future__ import annotations

from typing import Any

import pytest

from health.reduce import HealthReducer
from sidecar.ingest.engines import default_engines
from sidecar.ingest.events import EventBatch, RunStarted
from sidecar.state.durations import DURATION_BUCKETS, DurationHistogram
from sidecar.state.run import RunState

from .service_support import GeneratedRun, apply_event, generate_run


class CountingReducer:
    """Counts the reducer's full summaries (the O(rollouts) path)."""

    summaries = 0


@pytest.fixture(autouse=True)
def _count_summaries(monkeypatch: pytest.MonkeyPatch) -> None:
    summary = HealthReducer.summary

    def counted(self: HealthReducer) -> dict[str, Any]:
        CountingReducer.summaries += 1
        return summary(self)

    monkeypatch.setattr(HealthReducer, "summary", counted)


def _feed(run: GeneratedRun) -> RunState:
    start = RunStarted(kind="run_started", plan=run.plan)
    state = RunState("r", start, received_at=1.0e9, engines=default_engines(), health_interval_s=0.0)
    for index, body in enumerate([*run.events, {"kind": "run_ended"}]):
        apply_event(state, EventBatch.validate_python([body])[0], 1.0e9 + index)
        state.health_view()
    return state


def _check_against_summary(state: RunState) -> None:
    view = state.health_view(fresh=True)
    summary = state.reducer.summary()
    assert view.verdicts == summary["run"]["verdicts"]
    assert view.issues == summary["run"]["issues"]
    flagged = {check: 0 for check in view.task_flags}
    for task in summary["tasks"].values():
        for flag in task["flags"]:
            flagged[flag] = flagged.get(flag, 0) + 1
    assert {k: v for k, v in flagged.items() if v} == view.task_flags


class TestHealthView:
    def test_incremental_counts_without_duplicates_never_summarize(self) -> None:
        CountingReducer.summaries = 0
        state = _feed(generate_run(num_tasks=10, repeats=3, seed=4, fault_rate=0.06, duplicates=False))
        assert CountingReducer.summaries == 0
        _check_against_summary(state)
        assert sum(state.health_view().verdicts.values()) == len(state.reducer)

    def test_duplicates_fall_back_to_the_reducer(self) -> None:
        run = generate_run(num_tasks=10, repeats=3, seed=4, fault_rate=0.0)
        duplicate = next(e for e in run.events if e["kind"] == "completed" and "row" in e)
        run.events.append({**duplicate, "row": {**duplicate["row"], "extra": 1}})
        CountingReducer.summaries = 0
        state = _feed(run)
        assert CountingReducer.summaries > 0
        _check_against_summary(state)
        assert state.health_view().issues["rollout_duplicate_identity"] == 2


class TestAccounting:
    def test_identity_holds(self) -> None:
        state = _feed(generate_run(num_tasks=12, repeats=2, seed=9, failure_rate=0.4, drained_fraction=0.2))
        snap = state.accounting.snapshot()
        assert snap.expected == 24 and snap.missing is not None
        assert snap.expected == snap.succeeded + snap.failed + snap.drained + snap.missing
        assert snap.failed_terminal <= snap.failed
        assert snap.pending == snap.expected - snap.succeeded - snap.failed_terminal - snap.drained


class TestDurationHistogram:
    def test_buckets_are_cumulative_and_bounded(self) -> None:
        histogram = DurationHistogram()
        for seconds in (0.5, 1.0, 1.5, 21600.0, 30000.0, float("nan")):
            histogram.observe(seconds)
        buckets = dict(histogram.cumulative())
        assert len(buckets) == len(DURATION_BUCKETS) + 1
        assert buckets["1.0"] == 2 and buckets["2.0"] == 3
        assert buckets["21600.0"] == 4 and buckets["+Inf"] == 5 == histogram.observations


class TestFollowerLines:
    def test_a_line_is_parsed_once_and_its_trajectory_validated_once(self, monkeypatch: Any) -> None:
        """An everyday line is neither parsed into Python objects nor validated by the pydantic
        contract: the health check's fast road reads its bytes."""
        import orjson

        import sidecar.ingest.events as events_module
        from health.contract import TrajectoryRecord
        from health.parse import parse_line

        run = generate_run(
            num_tasks=4, repeats=2, seed=9, fault_rate=0.0, failure_rate=0.0, drained_fraction=0.0
        )
        lines = [
            {
                "kind": "completed",
                "seconds": e["seconds"],
                "line": orjson.dumps(e["row"]).decode(),
                "line_number": n,
            }
            for n, e in enumerate((e for e in run.events if e["kind"] == "completed"), start=1)
        ]
        parses: list[bytes] = []
        validations: list[object] = []
        original_validate = TrajectoryRecord.model_validate.__func__  # type: ignore[attr-defined]

        def counting_parse(data: bytes) -> Any:
            parses.append(data)
            return parse_line(data)

        def counting_validate(cls: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
            validations.append(obj)
            return original_validate(cls, obj, *args, **kwargs)

        monkeypatch.setattr(events_module, "parse_line", counting_parse)
        monkeypatch.setattr(TrajectoryRecord, "model_validate", classmethod(counting_validate))
        state = RunState(
            "r",
            RunStarted(kind="run_started", plan=run.plan),
            received_at=1.0e9,
            engines=default_engines(),
            health_interval_s=0.0,
        )
        for index, body in enumerate(lines):
            ng_perf = apply_event(state, EventBatch.validate_python([body])[0], 1.0e9 + index)
            assert ng_perf is not None
        assert parses == []
        assert validations == []


class TestTaskFlags:
    def test_counts_kept_as_tasks_close_survive_a_snapshot(self) -> None:
        from sidecar.journal import pack, unpack

        run = generate_run(num_tasks=12, repeats=3, seed=11, fault_rate=0.06)
        state = _feed(run)
        flags = state.health_view().task_flags
        assert flags and sum(flags.values()) >= 1
        again = RunState.from_snapshot(unpack(pack(state.to_snapshot())), default_engines())
        assert again.health_view().task_flags == flags


class TestAgents:
    def test_each_disposition_counts_where_the_page_says(self) -> None:
        """A row for the main file is a rollout of its agent (latency, ng_perf sums), a failure
        row or a failed attempt a failure, a no-persist row neither; an ended run's rate is over
        its time from its stamped start to its stamped end."""
        start = RunStarted(kind="run_started", plan={"1": 4}, started_at=1000.0)
        state = RunState("r", start, received_at=1000.0, engines=default_engines())

        def row(rollout: int, agent: str, **extra: Any) -> dict[str, Any]:
            return {"_ng_task_index": 1, "_ng_rollout_index": rollout, "agent_ref": {"name": agent}, **extra}

        events = [
            {"kind": "completed", "seconds": 4.0, "row": row(0, "a")},
            {"kind": "completed", "seconds": 40.0, "row": row(1, "a")},
            {"kind": "completed", "seconds": 7.0, "row": row(2, "b", _ng_no_persist=True)},
            {"kind": "completed", "seconds": 9.0, "row": row(3, "b", _ng_failure_class="cancelled")},
            {"kind": "failed", "seconds": 2.0, "row": row(2, "b"), "failure_class": "timeout_exceeded"},
            {"kind": "completed", "seconds": 3.0, "row": {"_ng_task_index": 1, "_ng_rollout_index": 3}},
            {"kind": "run_ended", "ended_at": 1000.0 + 1800},
        ]
        for index, body in enumerate(events):
            stamped = body if body["kind"] == "run_ended" else {**body, "at": 1001.0 + index}
            apply_event(state, EventBatch.validate_python([stamped])[0], 5e9)  # arrival plays no part
        rows = state.agent_rows()  # ended: the rate stops at ended_at
        assert rows is not None
        a, b = rows
        assert (a["agent"], a["rollouts"], a["failed"], a["latency_samples"]) == ("a", 2, 0, 2)
        assert a["rollouts_per_hour"] == 4.0 and a["latency_p50_s"] is not None
        assert 4.0 <= a["latency_p50_s"] <= a["latency_p95_s"] <= 40.0  # type: ignore[operator]
        assert (b["agent"], b["rollouts"], b["failed"], b["latency_samples"]) == ("b", 0, 2, 0)
        assert b["rollouts_per_hour"] == 0.0 and b["latency_p95_s"] is None
