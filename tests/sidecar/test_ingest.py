"""Ingest: journal-ordered application, replay equivalence, idempotency, task closing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sidecar.ingest.answers import UnknownRun
from sidecar.ingest.events import EventBatch
from sidecar.ingest.plans import PlanError
from sidecar.state.run import RunState

from .service_support import IngestHarness, generate_run


def _events(*bodies: dict[str, Any]) -> list[Any]:
    return EventBatch.validate_python(list(bodies))


def _row(task: int, rollout: int, **extra: Any) -> dict[str, Any]:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, **extra}


def _done(task: int, rollout: int, seconds: float = 10.0, **extra: Any) -> dict[str, Any]:
    return {"kind": "completed", "seconds": seconds, "row": _row(task, rollout, **extra)}


def _state(run: RunState) -> dict[str, Any]:
    """Everything observable about a run, for replay comparisons."""
    report = run.report()
    report["latency"].pop("completions_per_hour")
    return {
        "summary": run.reducer.summary_bytes(),
        "verdicts": b"".join(run.reducer.iter_verdict_lines()),
        "report": orjson.dumps(report),
        "margin": run.tracker.drain_margin(None),
        "tokens": dict(run.tokens),
        "failed": dict(run.failed),
        "durations": {k: (v.counts, v.total) for k, v in run.durations.items()},
        "health": run.health_view(fresh=True),
    }


_Harness = IngestHarness


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[_Harness]:
    h = _Harness(tmp_path / "journal.sqlite3")
    yield h
    await h.stop()


class TestOrderAndReplay:
    async def test_concurrent_requests_replay_to_the_same_state(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        run = generate_run(num_tasks=10, repeats=3, seed=5, failure_rate=0.3, drained_fraction=0.1)
        await ingestor.submit("r", _events({"kind": "run_started", "plan": run.plan}))
        chunks = [run.events[i : i + 3] for i in range(0, len(run.events), 3)]
        outcomes = await asyncio.gather(*(ingestor.submit("r", _events(*chunk)) for chunk in chunks))
        assert all(o.status == "accepted" for batch in outcomes for o in batch)
        await ingestor.submit("r", _events({"kind": "run_ended"}))
        live = _state(ingestor.runs["r"])
        await harness.stop()

        replayed = await harness.start()
        assert replayed.replayed == len(run.events) + 2
        assert _state(replayed.runs["r"]) == live

    async def test_record_failure_order_is_the_journal_order(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        await ingestor.submit("r", _events({"kind": "run_started"}))
        await ingestor.submit("r", _events(*(_done(0, i, seconds=10.0 * (i + 1)) for i in range(5))))
        failures = [
            {"kind": "failed", "seconds": s, "row": _row(1, i)} for i, s in enumerate((25.0, 60.0, 5.0))
        ]
        await asyncio.gather(*(ingestor.submit("r", _events(f)) for f in failures))
        samples = sorted(ingestor.runs["r"].tracker.samples())
        # 25 < median 30 is dropped, 60 >= 30 is kept, 5 is dropped: whatever the interleaving
        # of the requests, the live tracker equals one fed in journal order.
        assert samples == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
        live = _state(ingestor.runs["r"])
        await harness.stop()
        assert _state((await harness.start()).runs["r"]) == live


class TestIdempotency:
    async def test_duplicates_change_nothing(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        start = _events({"kind": "run_started", "plan": {"0": 2}})
        assert (await ingestor.submit("r", start))[0].status == "accepted"
        assert (await ingestor.submit("r", start))[0].status == "duplicate"
        batch = _events(_done(0, 0), {"kind": "failed", "seconds": 3.0, "row": _row(0, 1)})
        await ingestor.submit("r", batch)
        before = _state(ingestor.runs["r"])
        again = await ingestor.submit("r", batch)
        assert [o.status for o in again] == ["duplicate", "duplicate"]
        assert _state(ingestor.runs["r"]) == before
        assert ingestor.runs["r"].completed == 1

    async def test_a_different_row_with_the_same_identity_is_a_second_record(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        await ingestor.submit("r", _events({"kind": "run_started"}))
        await ingestor.submit("r", _events(_done(0, 0, note="first")))
        outcome = await ingestor.submit("r", _events(_done(0, 0, note="second")))
        assert outcome[0].status == "accepted"
        summary = ingestor.runs["r"].reducer.summary()
        assert summary["run"]["artifacts"]["records"] == 2
        assert summary["run"]["issues"]["rollout_duplicate_identity"] == 2

    async def test_unknown_run(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        with pytest.raises(UnknownRun, match="'ghost'"):
            await ingestor.submit("ghost", _events(_done(0, 0)))
        assert "ghost" not in ingestor.runs

    async def test_events_racing_their_run_start_are_accepted(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        start, done = await asyncio.gather(
            ingestor.submit("r", _events({"kind": "run_started"})), ingestor.submit("r", _events(_done(0, 0)))
        )
        assert start[0].status == "accepted" and done[0].status == "accepted"
        assert ingestor.runs["r"].completed == 1


class TestTaskClosing:
    async def test_planned_task_closes_on_its_last_resolved_repeat(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        await ingestor.submit(
            "r", _events({"kind": "run_started", "plan": {"0": 2, "1": 2}, "max_attempts": 2})
        )
        run = ingestor.runs["r"]
        await ingestor.submit("r", _events(_done(0, 0), _done(1, 0)))
        assert run.health_view(fresh=True).tasks_closed == 0
        await ingestor.submit("r", _events(_done(0, 1)))
        assert run.health_view(fresh=True).tasks_closed == 1
        retryable = {"kind": "failed", "seconds": 1.0, "row": _row(1, 1, _ng_failure_class="agent_run_error")}
        await ingestor.submit("r", _events(retryable))
        assert run.health_view(fresh=True).tasks_closed == 1
        await ingestor.submit("r", _events({**retryable, "attempt": 1}))  # max_attempts reached
        view = run.health_view(fresh=True)
        assert view.tasks_closed == 2
        # Rows without a trajectory are unobserved, so neither task check fires on them.
        assert view.task_flags == {}
        snapshot = run.accounting.snapshot()
        assert (snapshot.expected, snapshot.succeeded, snapshot.failed, snapshot.missing) == (4, 3, 1, 0)
        assert snapshot.pending == 1  # a maxed-out retryable failure is not terminal

    async def test_without_a_plan_tasks_close_at_run_end(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        await ingestor.submit("r", _events({"kind": "run_started"}))
        await ingestor.submit("r", _events(_done(0, 0), _done(0, 1), _done(3, 0)))
        run = ingestor.runs["r"]
        assert run.health_view(fresh=True).tasks_closed == 0
        await ingestor.submit("r", _events({"kind": "run_ended"}))
        assert run.health_view(fresh=True).tasks_closed == 2
        assert run.ended

    async def test_materialized_inputs_become_the_journaled_plan(
        self, harness: _Harness, tmp_path: Path
    ) -> None:
        inputs = tmp_path / "rollouts_materialized_inputs.jsonl"
        inputs.write_bytes(
            b"".join(orjson.dumps(_row(t, r)) + b"\n" for t, r in ((0, 0), (0, 1), (7, 0))) + b"\n"
        )
        ingestor = await harness.start()
        await ingestor.submit("r", _events({"kind": "run_started", "materialized_inputs": str(inputs)}))
        assert ingestor.runs["r"].plan == {"0": 2, "7": 1}
        await harness.stop()
        inputs.unlink()
        assert (await harness.start()).runs["r"].plan == {"0": 2, "7": 1}
        with pytest.raises(PlanError, match="materialized inputs not accepted"):
            await harness.ingestor.submit(  # type: ignore[union-attr]
                "s", _events({"kind": "run_started", "materialized_inputs": str(inputs)})
            )


class TestRetention:
    async def test_ended_runs_are_dropped_after_the_retention(self, harness: _Harness) -> None:
        ingestor = await harness.start()
        for run_id in ("old", "live"):
            await ingestor.submit(run_id, _events({"kind": "run_started"}, _done(0, 0)))
        await ingestor.submit("old", _events({"kind": "run_ended", "ended_at": 1000.0}))
        assert ingestor.drop_ended(60.0, now=1030.0) == []
        assert ingestor.drop_ended(60.0, now=1060.0) == ["old"]
        assert sorted(ingestor.runs) == ["live"]
        with pytest.raises(UnknownRun):
            await ingestor.submit("old", _events(_done(0, 1)))


def test_an_answered_batch_is_not_kept_while_the_service_waits(tmp_path: Path) -> None:
    """Once a batch is answered nothing in the service references its events or payloads (a
    body near the cap would otherwise stay resident until the next batch arrives)."""
    import gc

    import httpx

    from sidecar.http.server import ServiceThread
    from sidecar.http.settings import ServiceSettings
    from sidecar.ingest.events import Completed
    from sidecar.journal import JournalEvent

    marker = "never-kept-" + "x" * (1 << 20)
    marker_bytes = marker.encode()
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0, "note": marker}
    settings = ServiceSettings(journal_path=tmp_path / "journal.sqlite3")
    with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/v1/runs/r/events", json=[{"kind": "run_started"}]).status_code == 200
        event = {"kind": "completed", "line": orjson.dumps(row).decode(), "line_number": 1}
        assert client.post("/v1/runs/r/events", json=[event]).status_code == 200
        gc.collect()
        kept = [
            type(obj).__name__
            for obj in gc.get_objects()
            # (objects of other tests in this process are seen too: only this marker counts)
            if (type(obj) is Completed and isinstance(obj.line, str) and marker in obj.line)
            or (type(obj) is JournalEvent and isinstance(obj.payload, bytes) and marker_bytes in obj.payload)
        ]
        assert kept == []  # neither the event (ingest's sequencer) nor its record (journal writer)
