"""A journal written before the number ranges (and before facts) existed still replays: out-of-range
numbers are dropped as its records are migrated to facts, once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from sidecar.http.service import Service
from sidecar.http.settings import ServiceSettings
from sidecar.journal import Journal, JournalEvent


def _event(key: str, body: dict[str, object]) -> JournalEvent:
    return JournalEvent(run_id="old", kind=str(body["kind"]), key=key, payload=orjson.dumps(body))


def test_out_of_range_numbers_in_an_old_journal_are_dropped_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "ng_trajectory": {"started_at": -5.0}}

    async def write() -> None:
        journal = Journal(path)
        await journal.open()
        await journal.append(
            [
                _event("a", {"kind": "run_started", "dispatch_budget_s": 1e300, "received_at": 1.0}),
                _event("b", {"kind": "completed", "seconds": -1.0, "row": row, "received_at": 2.0}),
                _event(
                    "c", {"kind": "completed", "seconds": 2.0, "row": {**row, "x": 1}, "received_at": 3.0}
                ),
                _event("d", {"kind": "started", "task_index": 1, "received_at": 4.0}),
            ]
        )
        await journal.close()

    async def replay() -> Service:
        service = Service(ServiceSettings(journal_path=path))
        await service.start()
        return service

    asyncio.run(write())

    async def check() -> None:
        service = await replay()
        try:
            assert service.ready and service.ingestor.replayed == 4
            assert service.ingestor.migrated == 4
            run = service.ingestor.runs["old"]
            assert run.completed == 2 and run.tracker.count == 1  # the negative duration fed nothing
            assert run.config.dispatch_budget_s is None
            assert service._counted.repaired == 2
            assert [(entry.task, entry.started_at) for entry in run.inflight.oldest(10)] == [(1, 4.0)]
        finally:
            await service.stop()  # snapshots the migrated state

    async def check_again() -> None:
        service = await replay()
        try:
            assert service.ingestor.restored_seq == 4 and service.ingestor.replayed == 0
            assert service.ingestor.migrated == 0 and service._counted.repaired == 0
            assert service.replay_progress == {"replayed": 0, "journal_events": 4, "snapshot_seq": 4}
            run = service.ingestor.runs["old"]
            assert run.completed == 2 and run.tracker.count == 1
            assert [(entry.task, entry.started_at) for entry in run.inflight.oldest(10)] == [(1, 4.0)]
        finally:
            await service.stop()

    asyncio.run(check())
    asyncio.run(check_again())
