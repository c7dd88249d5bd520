"""Snapshots and facts: a restart loads the newest usable snapshot and replays the tail; a
damaged, forged or foreign snapshot is skipped and costs time, never records; rows are never read
again; closed groups live in the journal's database; any interleaving equals one replay."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import pickle
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
import structlog.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.ingest.engines import Engines, default_engines
from sidecar.ingest.events import EventBatch
from sidecar.ingest.ingestor import Ingestor
from sidecar.journal import STATE_SCHEMA, Journal, pack
from sidecar.state.snapshot import SNAPSHOT_FORMAT

from .service_support import GeneratedRun, IngestHarness, generate_run, state_fingerprint, two_agents

RUN = "snap"


@pytest.fixture(scope="module")
def generated() -> GeneratedRun:
    # two agents: the restart and replay cases compare per-agent figures too (state_fingerprint)
    return generate_run(
        num_tasks=10, repeats=3, seed=11, fault_rate=0.05, failure_rate=0.1, text_hook=two_agents
    )


def _batches(run: GeneratedRun) -> list[list[dict[str, Any]]]:
    events = [{"kind": "run_started", "plan": run.plan}, *run.events, {"kind": "run_ended"}]
    return [events[i : i + 5] for i in range(0, len(events), 5)]


class _Service(IngestHarness):
    """A journal and an ingestor over it, restartable; one shared clock."""

    def __init__(self, directory: Path, *, engines: Engines | None = None) -> None:
        super().__init__(directory / "journal.sqlite3")
        self.engines = engines or default_engines()
        self.ticks = itertools.count(1_000_000)

    async def start(self, *, snapshots: bool = True, engines: Engines | None = None) -> Ingestor:  # type: ignore[override]
        return await super().start(
            engines=engines or self.engines,
            clock=lambda: float(next(self.ticks)),
            snapshots=snapshots,
            snapshot_every_events=0,
            snapshot_every_s=0,
        )

    async def post(self, batch: list[dict[str, Any]]) -> list[str]:
        assert self.ingestor is not None
        outcomes = await self.ingestor.submit(RUN, EventBatch.validate_python(batch))
        return [outcome.status for outcome in outcomes]

    def snapshot_seqs(self) -> list[int]:
        return sorted(seq for seq, _ in Journal(self.path).snapshots())

    def set_snapshot(self, seq: int, body: bytes, *, crc: int | None = None) -> None:
        """Overwrite the stored body of snapshot ``seq`` (its CRC made to match unless given)."""
        with sqlite3.connect(self.path) as conn:
            conn.execute(
                "UPDATE snapshots SET body = ?, crc = ? WHERE seq = ?",
                (body, zlib.crc32(body) if crc is None else crc, seq),
            )
        conn.close()


async def _uninterrupted(tmp: Path, batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    service = _Service(tmp)
    ingestor = await service.start(snapshots=False)
    for batch in batches:
        await service.post(batch)
    fingerprint = state_fingerprint(ingestor.runs[RUN])
    await service.stop()
    return fingerprint


def _without_arrivals(fingerprint: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fingerprint.items() if name != "timeline"}


def _restarted_fingerprint(service: _Service) -> Callable[[], Any]:
    async def go() -> dict[str, Any]:
        ingestor = await service.start()
        try:
            return state_fingerprint(ingestor.runs[RUN])
        finally:
            await service.stop()

    return go


class _Marker:
    """A callable that, if ever called by a loader, leaves a file behind."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


class TestSnapshots:
    async def test_restart_loads_the_snapshot_and_replays_only_the_tail(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        ingestor = await service.start()
        half = len(batches) // 2
        for batch in batches[:half]:
            await service.post(batch)
        seq = await ingestor.snapshot()
        for batch in batches[half:]:
            await service.post(batch)
        total = ingestor.applied_seq
        await service.stop()
        assert seq is not None and service.snapshot_seqs() == [seq]
        restarted = await service.start()
        assert restarted.snapshot_seq == seq and restarted.replayed == total - seq
        assert state_fingerprint(restarted.runs[RUN]) == expected
        await service.stop()

    @pytest.mark.parametrize(
        "damage", ["crc", "torn", "other_schema", "other_format", "garbage", "wrong_shape"]
    )
    async def test_a_damaged_newest_snapshot_is_skipped_with_a_log_line(
        self, tmp_path: Path, generated: GeneratedRun, damage: str
    ) -> None:
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        ingestor = await service.start()
        third = len(batches) // 3
        for batch in batches[:third]:
            await service.post(batch)
        older = await ingestor.snapshot()
        for batch in batches[third:]:
            await service.post(batch)
        newest = await ingestor.snapshot()
        await service.stop()
        assert older is not None and newest is not None
        body = dict(Journal(service.path).snapshots())[newest]
        assert body is not None
        if damage == "crc":
            service.set_snapshot(newest, body[:-1] + bytes([body[-1] ^ 1]), crc=zlib.crc32(body))
        elif damage == "torn":
            service.set_snapshot(newest, body[: len(body) // 2])
        elif damage == "other_schema":
            service.set_snapshot(newest, body.replace(STATE_SCHEMA.encode(), b"facts-99/health-1", 1))
        elif damage == "other_format":
            service.set_snapshot(newest, pack({"format": SNAPSHOT_FORMAT + 1, "state_schema": STATE_SCHEMA}))
        elif damage == "wrong_shape":
            service.set_snapshot(
                newest,
                pack({"format": SNAPSHOT_FORMAT, "state_schema": STATE_SCHEMA, "seq": newest, "runs": [{}]}),
            )
        else:
            service.set_snapshot(newest, b"\x00" * 64)
        with structlog.testing.capture_logs() as logs:
            restarted = await service.start()
        try:
            assert restarted.snapshot_seq == older  # the previous one, then the journal's tail
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()
        skipped = [entry for entry in logs if entry["event"] == "snapshot skipped"]
        assert len(skipped) == 1 and skipped[0]["seq"] == newest and skipped[0]["reason"]

    @pytest.mark.parametrize("forgery", ["pickle", "names_a_callable"])
    async def test_a_forged_snapshot_is_refused_and_runs_nothing(
        self, tmp_path: Path, generated: GeneratedRun, forgery: str
    ) -> None:
        """Anyone who can write the database can store any body with a matching CRC: a body that
        names a callable (a pickle's reduce, or the names in plain data) is refused, runs nothing,
        and costs only the time of the full replay."""
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        ingestor = await service.start()
        for batch in batches:
            await service.post(batch)
        seq = await ingestor.snapshot()
        await service.stop()
        assert seq is not None
        marker = tmp_path / "executed"
        if forgery == "pickle":
            body = pickle.dumps({"seq": seq, "runs": {RUN: _Marker(marker)}})
        else:
            run = {
                "run_id": RUN,
                "config": b"{}",
                "tracker": {"__reduce__": ["pathlib.Path.touch", [str(marker)]]},
            }
            body = pack(
                {
                    "format": SNAPSHOT_FORMAT,
                    "state_schema": STATE_SCHEMA,
                    "seq": seq,
                    "next_group": 1,
                    "runs": [run],
                }
            )
        service.set_snapshot(seq, body)
        with structlog.testing.capture_logs() as logs:
            restarted = await service.start()
        try:
            assert not marker.exists()
            assert restarted.restored_seq == 0  # the whole journal replayed
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()
        assert [entry["seq"] for entry in logs if entry["event"] == "snapshot skipped"] == [seq]

    async def test_a_damaged_journal_record_costs_that_record_only(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        """A record whose CRC fails is skipped (logged): the state equals a run without it."""
        batches = _batches(generated)
        service = _Service(tmp_path / "b")
        await service.start(snapshots=False)
        for batch in batches:
            await service.post(batch)
        await service.stop()
        events = [event for batch in batches for event in batch]
        victim = next(i for i, event in enumerate(events) if event["kind"] == "completed" and i > 10)
        with sqlite3.connect(service.path) as conn:
            row = conn.execute("SELECT payload FROM events WHERE seq = ?", (victim + 1,)).fetchone()
            payload = bytearray(row[0])
            payload[len(payload) // 2] ^= 0x08
            conn.execute("UPDATE events SET payload = ? WHERE seq = ?", (bytes(payload), victim + 1))
        conn.close()
        without = events[:victim] + events[victim + 1 :]
        rebatched = [without[i : i + 5] for i in range(0, len(without), 5)]
        expected = await _uninterrupted(tmp_path / "a", rebatched)
        restarted = await service.start(snapshots=False)
        try:
            assert restarted.damaged_records == [victim + 1] and restarted.applied_seq == len(events)
            # Arrival times differ by construction (the skipped event took a tick of the test's
            # clock when it was posted), so a per-arrival-time view is left out of the comparison.
            restored = state_fingerprint(restarted.runs[RUN])
            assert _without_arrivals(restored) == _without_arrivals(expected)
        finally:
            await service.stop()


class TestFacts:
    async def test_replay_never_digests_a_row(self, tmp_path: Path, generated: GeneratedRun) -> None:
        batches = _batches(generated)
        service = _Service(tmp_path)
        ingestor = await service.start(snapshots=False)
        for batch in batches:
            await service.post(batch)
        expected = state_fingerprint(ingestor.runs[RUN])
        await service.stop()

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("replay parsed or validated a row")

        blind = dataclasses.replace(
            default_engines(), digest_record=refuse, digest_and_perf=refuse, digest_bytes=refuse
        )
        restarted = await service.start(snapshots=False, engines=blind)
        try:
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()

    async def test_position_dependent_rows_are_digested_when_applied(self, tmp_path: Path) -> None:
        """A row without ``_ng_task_index`` and an unreadable line without a line number depend on
        their position: their facts carry the row, and live, replayed and batch reports agree."""
        from health import health_check_run_dir
        from sidecar.journal._facts import CompletedFact, decode_fact

        run_dir = tmp_path / "run"
        run_dir.mkdir()
        rows = [
            {"_ng_task_index": 0, "_ng_rollout_index": 0},
            {"_ng_rollout_index": 0, "reward": 1.0},  # the batch check takes its position as task
            "{not json",
            {"_ng_task_index": 0, "_ng_rollout_index": 1},
        ]
        lines = [row if isinstance(row, str) else orjson.dumps(row).decode() for row in rows]
        (run_dir / "rollouts.jsonl").write_text("".join(line + "\n" for line in lines))
        events: list[dict[str, Any]] = [
            {"kind": "run_started", "source_path": str(run_dir / "rollouts.jsonl")},
            *(
                {"kind": "completed", "seconds": 1.0, "line": row}
                if isinstance(row, str)
                else {"kind": "completed", "seconds": 1.0, "row": row}
                for row in rows
            ),
            {"kind": "run_ended"},
        ]
        service = _Service(tmp_path / "svc")
        ingestor = await service.start(snapshots=False)
        await service.post(events)
        live = state_fingerprint(ingestor.runs[RUN])
        await service.stop()
        deferred = [
            decode_fact(record.payload).deferred is not None
            for record in Journal(service.path).replay()
            if record.kind == "completed"
        ]
        assert deferred == [False, True, True, False]
        assert all(
            isinstance(decode_fact(r.payload), CompletedFact)
            for r in Journal(service.path).replay()
            if r.kind == "completed"
        )
        restarted = await service.start(snapshots=False)
        try:
            assert state_fingerprint(restarted.runs[RUN]) == live
            batch = health_check_run_dir(run_dir, workers=1)
            assert live["summary"] == batch.summary_path.read_bytes()
            assert live["verdicts"] == batch.verdicts_path.read_bytes()
        finally:
            await service.stop()

    async def test_the_journal_holds_facts_unless_rows_are_kept(self, tmp_path: Path) -> None:
        payload = "x" * 8192
        row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output_text": payload}}
        sizes = {}
        for keep in (False, True):
            service = _Service(tmp_path / str(keep))
            service.journal = Journal(service.path)
            await service.journal.open()
            service.ingestor = Ingestor(service.journal, default_engines(), keep_rows=keep)
            service.ingestor.start()
            await service.post([{"kind": "run_started"}, {"kind": "completed", "seconds": 1.0, "row": row}])
            await service.stop()
            with sqlite3.connect(service.path) as conn:
                sizes[keep] = conn.execute("SELECT length(payload) FROM events WHERE seq = 2").fetchone()[0]
        assert sizes[False] < 512 < 8192 < sizes[True]

    async def test_per_agent_figures_survive_a_snapshot_and_a_replay_exactly(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        """The agent is in each fact: the snapshot's per-agent totals plus the replayed tail equal
        the uninterrupted run's, and so does a replay of the whole journal (no snapshot)."""
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        agents = {row["agent"]: row for row in expected["agents"]}
        assert sorted(agents) == ["agent-even", "agent-odd"]
        assert all(row["rollouts"] and row["latency_p95_s"] for row in agents.values())
        assert agents["agent-odd"]["failed"] == 1  # the run's one failed attempt, of an odd task
        service = _Service(tmp_path / "b")
        ingestor = await service.start()
        for index, batch in enumerate(batches):
            await service.post(batch)
            if index == len(batches) // 3:
                await ingestor.snapshot()
        await service.stop()
        for snapshots in (True, False):
            restarted = await service.start(snapshots=snapshots)
            assert bool(restarted.snapshot_seq) is snapshots
            assert state_fingerprint(restarted.runs[RUN])["agents"] == expected["agents"]
            await service.stop()


_STEP = st.sampled_from(["post", "post", "post", "snapshot", "restart", "damage_and_restart"])


class TestAnyInterleaving:
    @settings(
        max_examples=10,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(steps=st.lists(_STEP, min_size=1, max_size=30))
    def test_equals_one_uninterrupted_replay(
        self, tmp_path_factory: pytest.TempPathFactory, generated: GeneratedRun, steps: list[str]
    ) -> None:
        batches = _batches(generated)
        root = tmp_path_factory.mktemp("interleaving")

        async def scenario() -> None:
            expected = await _uninterrupted(root / "reference", batches)
            service = _Service(root / "interleaved")
            ingestor = await service.start()
            pending = list(batches)
            plan = [*steps, *(["post"] * len(pending))]
            for step in plan:
                if step == "post":
                    if not pending:
                        continue
                    await service.post(pending.pop(0))
                elif step == "snapshot":
                    await ingestor.snapshot()
                else:
                    await service.stop()
                    seqs = service.snapshot_seqs()
                    if step == "damage_and_restart" and seqs:
                        service.set_snapshot(seqs[-1], b"torn", crc=0)
                    ingestor = await service.start()
            assert state_fingerprint(ingestor.runs[RUN]) == expected
            await service.stop()
            again = await _restarted_fingerprint(service)()
            assert again == expected

        asyncio.run(scenario())


def _row(task: int, rollout: int, attempt: int = 0, **extra: Any) -> dict[str, Any]:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, "_ng_attempt_index": attempt, **extra}


def _started(task: int, rollout: int, attempt: int = 0) -> dict[str, Any]:
    return {"kind": "started", "task_index": task, "rollout_index": rollout, "attempt": attempt}


class TestInflightInSnapshots:
    """``started`` events are journaled as facts; a snapshot holds the in-flight registry, the
    duration extremes and (once ended) the frozen clock and ``inflight_at_end``."""

    BEFORE: list[list[dict[str, Any]]] = [
        [{"kind": "run_started", "plan": {"0": 2, "1": 2, "2": 2}, "task_timeout_s": 3.0}],
        [_started(0, 0), _started(0, 1), _started(1, 0), _started(1, 1), _started(2, 0)],
        [_started(2, 1), _started(2, 1, attempt=1)],  # a later attempt replaces the first
        [{"kind": "completed", "seconds": 1.5, "row": _row(0, 0)}],
        [{"kind": "failed", "seconds": 0.25, "attempt": 0, "row": _row(1, 0, _ng_failure_class="cancelled")}],
        [{"kind": "heartbeat", "task_index": 2, "rollout_index": 0}],  # memory only
    ]
    AFTER: list[list[dict[str, Any]]] = [
        [{"kind": "completed", "seconds": 9.0, "row": _row(0, 1)}],
        [_started(1, 0, attempt=1)],
        [{"kind": "failed", "seconds": 2.0, "attempt": 0, "row": _row(2, 1, _ng_failure_class="cancelled")}],
    ]

    async def _fingerprints(self, tmp: Path, batches_after: list[list[dict[str, Any]]]) -> list[Any]:
        service = _Service(tmp)
        ingestor = await service.start()
        for batch in self.BEFORE:
            await service.post(batch)
        run = ingestor.runs[RUN]
        assert len(run.inflight) == 4 and run.durations["failed"].low == 0.25
        run.inflight.evaluate(2_000_000.0, 1.0)  # this process's stamps: never in a snapshot
        seq = await ingestor.snapshot()
        for batch in batches_after:
            await service.post(batch)
        await service.stop()
        assert seq is not None
        fingerprints = []
        for snapshots in (True, False):  # from the snapshot + tail, and from the journal alone
            restarted = await service.start(snapshots=snapshots)
            assert restarted.restored_seq == (seq if snapshots else 0)
            run = restarted.runs[RUN]
            fingerprints.append((state_fingerprint(run), run.report()))
            await service.stop()
        return fingerprints

    async def test_a_restart_from_the_snapshot_equals_one_from_the_journal(self, tmp_path: Path) -> None:
        from_snapshot, from_journal = await self._fingerprints(tmp_path, self.AFTER)
        assert from_snapshot[0] == from_journal[0]
        inflight = from_snapshot[0]["inflight"]
        assert inflight["count"] == 4 and inflight["flagged"] == {"stragglers": 0, "stalled": 0}
        oldest = [
            (entry["task_index"], entry["rollout_index"], entry["attempt"]) for entry in inflight["oldest"]
        ]
        assert oldest == [(1, 1, 0), (2, 0, 0), (2, 1, 1), (1, 0, 1)]  # (2, 1)'s attempt 0 failed, not 1
        assert from_snapshot[0]["durations"]["completed"][3:] == (1.5, 9.0)

    async def test_an_ended_run_restored_from_a_snapshot_reports_the_same(self, tmp_path: Path) -> None:
        ended = [*self.AFTER, [{"kind": "run_ended"}]]
        from_snapshot, from_journal = await self._fingerprints(tmp_path, ended)
        assert from_snapshot[0] == from_journal[0]
        # The rates come from the events' times: the whole report, completions_per_hour included, is equal.
        assert from_snapshot[1] == from_journal[1]
        assert from_snapshot[1]["inflight_at_end"]["count"] == 4


class TestSnapshotsBesideOffLoopReads:
    async def test_a_snapshot_waits_for_a_read_building_off_the_loop_and_neither_deadlocks(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        import threading
        import time

        from sidecar.http.offloop import OffLoopReads

        batches = _batches(generated)
        half = len(batches) // 2
        service = _Service(tmp_path)
        ingestor = await service.start()
        for batch in batches[:half]:
            await service.post(batch)
        reads = OffLoopReads(ingestor.apply_lock, max_age_s=0.0, duty=1.0)
        building = threading.Event()

        def slow_build() -> int:
            building.set()
            time.sleep(0.3)  # a long /report build: the state must not change under it
            return ingestor.applied_seq

        read = asyncio.create_task(reads.build("report", slow_build))
        await asyncio.to_thread(building.wait, 10)
        snapshot = asyncio.create_task(ingestor.snapshot())
        posting = asyncio.create_task(service.post(batches[half]))
        await asyncio.sleep(0.1)
        assert not snapshot.done() and not posting.done()  # both wait for the build's end
        seen = await asyncio.wait_for(read, 10)
        seq = await asyncio.wait_for(snapshot, 10)
        await asyncio.wait_for(posting, 10)
        assert seq == seen  # the snapshot holds the state the build saw, not half a batch more
        for batch in batches[half + 1 :]:
            await asyncio.wait_for(asyncio.gather(service.post(batch), reads.build("r", slow_build)), 10)
        await service.stop()
        fingerprints = []
        for snapshots in (True, False):
            restarted = await service.start(snapshots=snapshots)
            assert restarted.restored_seq == (seq if snapshots else 0)
            fingerprints.append(state_fingerprint(restarted.runs[RUN]))
            await service.stop()
        assert fingerprints[0] == fingerprints[1]


class TestBindFirstReplayFromASnapshot:
    async def test_the_worker_thread_loads_the_snapshot_then_the_tail_and_readyz_progress_says_so(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        from sidecar.http.service import Service
        from sidecar.http.settings import ServiceSettings

        settings = ServiceSettings(journal_path=tmp_path / "journal.sqlite3")
        batches = _batches(generated)
        half = len(batches) // 2
        service = Service(settings)
        await service.start()
        for batch in batches[:half]:
            await service.ingestor.submit(RUN, EventBatch.validate_python(batch))
        await service.stop()  # snapshots everything so far
        covered = service.ingestor.applied_seq
        service = Service(settings)  # the tail, posted without a snapshot after it
        await service.start()
        service.ingestor._snapshots = False
        for batch in batches[half:]:
            await service.ingestor.submit(RUN, EventBatch.validate_python(batch))
        total = service.ingestor.applied_seq
        await service.stop()

        service = Service(settings)
        await service.open()
        service.begin()  # as serve does after binding: the replay runs on a worker thread
        seen = [service.replay_progress]
        while not service.ready:
            assert service.replay_error is None
            await asyncio.sleep(0.001)
            seen.append(service.replay_progress)
        try:
            done = [progress["snapshot_seq"] + progress["replayed"] for progress in seen]
            assert done == sorted(done)  # never goes back
            assert seen[-1] == {"replayed": total - covered, "journal_events": total, "snapshot_seq": covered}
            restored = state_fingerprint(service.ingestor.runs[RUN])
        finally:
            await service.stop()
        expected = await _uninterrupted(tmp_path / "whole", batches)
        assert restored["summary"] == expected["summary"] and restored["verdicts"] == expected["verdicts"]


class TestClosedGroups:
    """Closed tasks' digests live in the journal's ``groups`` table; the verdict stream, summary
    and every other output equal an uninterrupted in-memory run's."""

    async def _spilled(self, service: _Service, batches: list[list[dict[str, Any]]]) -> int:
        """Post everything with a snapshot part-way; returns the seq of that snapshot."""
        ingestor = await service.start()
        half = len(batches) // 2
        for batch in batches[:half]:
            await service.post(batch)
        seq = await ingestor.snapshot()
        for batch in batches[half:]:
            await service.post(batch)
        await ingestor.snapshot()  # the newest: it refers to every group
        reducer = ingestor.runs[RUN].reducer
        assert all(type(group) is int for group in reducer._tasks.values())  # all closed at run end
        await service.stop()
        assert seq is not None
        return seq

    async def test_spilled_groups_stream_in_order_across_restarts(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        await self._spilled(service, batches)
        for _ in range(2):  # the second restart reads what the first one kept
            assert await _restarted_fingerprint(service)() == expected
        with sqlite3.connect(service.path) as conn:
            assert conn.execute("SELECT count(*) FROM groups").fetchone()[0] >= len(generated.plan)
        conn.close()

    async def test_a_damaged_group_skips_the_snapshot_that_needs_it(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        seq = await self._spilled(service, batches)
        with sqlite3.connect(service.path) as conn:
            (body,) = conn.execute("SELECT body FROM groups WHERE ref = 1").fetchone()
            conn.execute("UPDATE groups SET body = ? WHERE ref = 1", (bytes([body[0] ^ 0x10]) + body[1:],))
        conn.close()
        newest = max(service.snapshot_seqs())
        with structlog.testing.capture_logs() as logs:
            restarted = await service.start()
        try:
            # the newest snapshot needs group 1; an older one from before it (or none) is used,
            # and the replay of the tail writes group 1 anew
            assert restarted.restored_seq in (0, seq) and restarted.restored_seq < newest
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()
        assert newest in [entry["seq"] for entry in logs if entry["event"] == "snapshot skipped"]
        assert await _restarted_fingerprint(service)() == expected  # and the next start is whole again
