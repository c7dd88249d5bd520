"""Snapshots and facts: restart from the newest valid snapshot + tail, corrupt ones skipped,
compaction, old journals migrated, rows never re-read, any interleaving == one replay."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import hashlib
import itertools
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
import structlog
import structlog.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.ingest.engines import Engines, default_engines
from sidecar.ingest.events import EventBatch
from sidecar.ingest.ingestor import Ingestor
from sidecar.journal import Journal, JournalCompacted, _recovery
from sidecar.journal._closed_groups import ClosedGroupFile
from sidecar.journal._facts import STATE_SCHEMA
from sidecar.journal._snapshot import SNAPSHOT_FORMAT, SnapshotStore, dumps_state, loads_state

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
    """A journal, its snapshot store and an ingestor over them, restartable; one shared clock."""

    def __init__(self, directory: Path, *, engines: Engines | None = None, keep: int = 2) -> None:
        super().__init__(directory / "journal.sqlite3")
        self.store = SnapshotStore.beside(self.path, keep=keep)
        self.engines = engines or default_engines()
        self.ticks = itertools.count(1_000_000)

    async def start(self, *, snapshots: bool = True, engines: Engines | None = None) -> Ingestor:  # type: ignore[override]
        return await super().start(
            engines=engines or self.engines,
            clock=lambda: float(next(self.ticks)),
            snapshots=self.store if snapshots else None,
            snapshot_every_events=0,
            snapshot_every_s=0,
        )

    async def post(self, batch: list[dict[str, Any]]) -> list[str]:
        assert self.ingestor is not None
        outcomes = await self.ingestor.submit(RUN, EventBatch.validate_python(batch))
        return [outcome.status for outcome in outcomes]


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
        assert seq is not None and service.store.seqs() == [seq]
        restarted = await service.start()
        assert restarted.snapshot_seq == seq and restarted.replayed == total - seq
        assert state_fingerprint(restarted.runs[RUN]) == expected
        await service.stop()

    @pytest.mark.parametrize(
        "damage", ["torn", "flipped", "newer_schema", "newer_format", "garbage", "unloadable"]
    )
    async def test_a_damaged_newest_snapshot_is_skipped_with_a_log_line(
        self, tmp_path: Path, generated: GeneratedRun, damage: str
    ) -> None:
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b", keep=3)
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
        path = service.store.path_of(newest)
        data = path.read_bytes()
        if damage == "torn":
            path.write_bytes(data[: len(data) // 2])
        elif damage == "flipped":
            path.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
        elif damage == "newer_schema":
            path.write_bytes(data.replace(STATE_SCHEMA.encode(), b"facts-99/health-1", 1))
        elif damage == "newer_format":
            path.write_bytes(data.replace(f'"format":{SNAPSHOT_FORMAT}'.encode(), b'"format":9', 1))
        elif damage == "unloadable":  # header and checksum hold; the state is another layout
            service.store.write(newest, dumps_state({"runs": {RUN: "not a run state"}}))
        else:
            path.write_bytes(b"\x00" * 64)
        with structlog.testing.capture_logs() as logs:
            restarted = await service.start()
        try:
            assert restarted.snapshot_seq == older  # the previous one, then the journal's tail
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()
        skipped = [entry for entry in logs if entry["event"] == "snapshot skipped"]
        assert len(skipped) == 1 and skipped[0]["path"] == str(path) and skipped[0]["reason"]

    @pytest.mark.parametrize(
        "error",
        [
            OSError(errno.EIO, "Input/output error"),
            OSError(errno.EMFILE, "Too many open files"),
            MemoryError(),
        ],
        ids=["EIO", "EMFILE", "MemoryError"],
    )
    @pytest.mark.parametrize("where", ["read", "unpickle", "closed_groups"])
    async def test_a_read_error_never_sets_a_valid_snapshot_aside(
        self,
        tmp_path: Path,
        generated: GeneratedRun,
        monkeypatch: pytest.MonkeyPatch,
        error: BaseException,
        where: str,
    ) -> None:
        """Only proven damage moves a snapshot to ``.bad``: a failing read keeps it in place, the
        older snapshot and the journal's tail are used, and the next start loads the kept one."""
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b", keep=3)
        ingestor = await service.start()
        for batch in batches[: len(batches) // 3]:
            await service.post(batch)
        older = await ingestor.snapshot()
        for batch in batches[len(batches) // 3 :]:
            await service.post(batch)
        newest = await ingestor.snapshot()
        await service.stop()
        assert older is not None and newest is not None
        failures = [error]

        def fail_once(real: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                if failures:
                    raise failures.pop()
                return real(*args, **kwargs)

            return call

        if where == "read":
            monkeypatch.setattr(SnapshotStore, "_read", fail_once(SnapshotStore._read))
        elif where == "unpickle":
            monkeypatch.setattr(_recovery, "loads_state", fail_once(_recovery.loads_state))
        else:
            monkeypatch.setattr(ClosedGroupFile, "restore", fail_once(ClosedGroupFile.restore))
        with structlog.testing.capture_logs() as logs:
            restarted = await service.start()
        try:
            assert restarted.snapshot_seq == older
            assert state_fingerprint(restarted.runs[RUN]) == expected
            assert [path for path, _ in restarted.recovery.unreadable] == [service.store.path_of(newest)]
            assert not restarted.recovery.set_aside
        finally:
            await service.stop()
        assert not [entry for entry in logs if entry["event"] == "snapshot skipped"]
        assert not list(service.store.directory.glob("*.bad"))
        assert [entry["kept"] for entry in logs if entry["event"] == "snapshot unreadable"] == [True]
        # Kept in place (then rewritten, same seq, by the start's own snapshot): the next start
        # loads it, nothing to replay.
        assert service.store.seqs() == [older, newest]
        again = await service.start()
        try:
            assert again.snapshot_seq == newest and again.replayed == 0
            assert state_fingerprint(again.runs[RUN]) == expected
        finally:
            await service.stop()

    async def test_a_journal_that_lost_its_newest_records_keeps_their_effect_from_the_snapshot(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        """A damaged WAL keeps only the commits before the damage; the snapshot still holds the
        rest. It is used, the lost seqs are marked in the journal (the next record never reuses
        one), and a later replay that would need them refuses, naming them."""
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b", keep=3)
        ingestor = await service.start()
        for batch in batches:
            await service.post(batch)
        newest = await ingestor.snapshot()
        await service.stop()
        assert newest is not None
        kept = newest - 7
        with sqlite3.connect(service.path) as conn:  # what the journal holds after the damage
            conn.execute("DELETE FROM events WHERE seq > ?", (kept,))
        conn.close()
        with structlog.testing.capture_logs() as logs:
            restarted = await service.start()
        try:
            assert restarted.snapshot_seq == newest and restarted.recovery.lost == (kept + 1, newest)
            assert state_fingerprint(restarted.runs[RUN]) == expected
            assert service.journal is not None and service.journal.stats.events == newest
        finally:
            await service.stop()
        assert any(
            entry["event"] == "journal records lost, their effect kept from the snapshot" for entry in logs
        )
        stored = list(Journal(service.path).stored_keys())
        assert stored[-1] == (newest, f"~lost|{kept + 1}..{newest}")
        for seq in service.store.seqs():  # without the snapshot, what it held is gone: refuse
            service.store.path_of(seq).unlink()
        with pytest.raises(
            JournalCompacted, match=f"records {kept + 1}..{newest} were lost from the journal"
        ):
            await service.start()
        await service.stop()

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

    async def test_compaction_keeps_keys_and_refuses_a_wrong_state(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        batches = _batches(generated)
        service = _Service(tmp_path, keep=1)
        ingestor = await service.start()
        for batch in batches[:-1]:
            await service.post(batch)
        seq = await ingestor.snapshot()
        assert seq is not None
        # A late retry of a compacted record is still a duplicate: its key was kept.
        assert set(await service.post(batches[1])) == {"duplicate"}
        await service.post(batches[-1])
        await service.stop()
        with sqlite3.connect(service.path) as conn:
            first = conn.execute("SELECT min(seq) FROM events").fetchone()[0]
            compacted = conn.execute("SELECT count(*) FROM compacted_keys").fetchone()[0]
        # The snapshot's records left (but the newest at the time: seqs keep increasing), keys kept.
        assert compacted == first - 1 == seq - 1
        assert [s for s, _ in Journal(service.path).stored_keys()] == list(range(1, ingestor.applied_seq + 1))
        # Without a usable snapshot the compacted records cannot be rebuilt: refuse, do not guess.
        service.store.path_of(seq).write_bytes(b"torn")
        with pytest.raises(JournalCompacted, match="compacted into snapshots that cannot be used") as refused:
            await service.start()
        await service.stop()
        # The refusal says what was kept where (never "restore" a file it just moved away).
        message = str(refused.value)
        assert "\n" not in message and "restore" not in message
        assert (
            f"{service.store.path_of(seq).name} set aside as {service.store.path_of(seq).name}.bad" in message
        )
        assert service.store.path_of(seq).with_name(service.store.path_of(seq).name + ".bad").exists()


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

        blind = dataclasses.replace(default_engines(), digest_record=refuse, build_ng_perf=refuse)
        restarted = await service.start(snapshots=False, engines=blind)
        try:
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()

    def test_an_encoding_kept_for_the_next_call_serves_that_very_fact_once(self) -> None:
        from sidecar.journal._facts import LatencyFact, decode_fact, encode_fact

        fact, twin = LatencyFact(1.0, 0, "record", 2.0), LatencyFact(1.0, 0, "record", 2.0)
        kept = encode_fact(fact, again=True)
        assert encode_fact(fact) is kept  # the kept encoding, not a second one
        assert encode_fact(fact) is not kept  # handed out once
        encode_fact(fact, again=True)
        assert encode_fact(twin) == kept  # an equal fact (another object) is encoded anew
        assert encode_fact(fact) is not kept  # and any call drops what was kept
        assert decode_fact(kept) == fact

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

    async def test_a_journal_written_before_facts_is_migrated_once(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        """Records stored as whole events (the previous format) replay to the same state, and the
        snapshot taken right after the migration means a second restart replays nothing."""
        from sidecar.http.service import Service
        from sidecar.http.settings import ServiceSettings

        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        path = tmp_path / "old" / "journal.sqlite3"
        journal = Journal(path)
        await journal.open()
        ticks = itertools.count(1_000_000)
        records = []
        for batch in batches:
            received_at = float(next(ticks))
            for index, event in enumerate(EventBatch.validate_python(batch)):
                body = orjson.loads(event.model_dump_json(exclude_none=True))
                body["received_at"] = received_at
                key = f"legacy-{len(records)}-{index}"
                records.append(_legacy(key, event.kind, orjson.dumps(body)))
        await journal.append(records)
        await journal.close()

        settings_ = ServiceSettings(port=0, journal_path=path)
        for expected_replayed in (len(records), 0):
            service = Service(settings_)
            await service.start()
            try:
                assert service.ingestor.replayed == expected_replayed
                assert state_fingerprint(service.ingestor.runs[RUN]) == expected
            finally:
                await service.stop()

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

    @pytest.mark.parametrize("version", [2, 3])
    async def test_a_journal_of_a_previous_facts_format_opens_and_replays(
        self, tmp_path: Path, generated: GeneratedRun, version: int
    ) -> None:
        """Format-3 facts (no ``at``) and format-2 facts (no ``agent`` either), stamped
        ``facts-N/health-1``: the service opens the journal, restamps it and replays every record
        to the same state, but for what the old facts never kept: no time (an empty timeline, no
        rates) and, from format 2, no per-agent figures; agents count from the next row on."""
        from sidecar.http.service import Service
        from sidecar.http.settings import ServiceSettings
        from sidecar.journal import FACTS_FORMAT, JournalEvent, decode_fact

        assert FACTS_FORMAT == 4
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        current = Journal(tmp_path / "a" / "journal.sqlite3")
        await current.open()
        records = []
        for record in current.replay():
            items = msgspec.msgpack.decode(record.payload)
            fact = decode_fact(record.payload)
            assert items[0] == 4
            fields = list(items[2:])
            if type(fact).__name__ != "RunStartedFact":
                fields = fields[:-1]  # format 3 ended before ``at``
            if version == 2 and type(fact).__name__ in ("CompletedFact", "FailedFact"):
                assert fields[-1] in (None, "agent-even", "agent-odd")
                fields = fields[:-1]  # format 2 ended with ``row``
            old = msgspec.msgpack.encode([version, items[1], *fields])
            records.append(JournalEvent(run_id=record.run_id, kind=record.kind, key=record.key, payload=old))
        await current.close()
        path = tmp_path / "old" / "journal.sqlite3"
        journal = Journal(path)
        await journal.open()
        await journal.set_meta("state_schema", f"facts-{version}/health-1".encode())
        await journal.append(records)
        await journal.close()

        settings_ = ServiceSettings(port=0, journal_path=path)
        service = Service(settings_)
        await service.start()
        try:
            assert service.journal.get_meta("state_schema") == STATE_SCHEMA.encode()
            assert service.ingestor.replayed == len(records)
            run = service.ingestor.runs[RUN]
            fingerprint = state_fingerprint(run)
            assert fingerprint["timeline"]["t"] == [] and run.rates() == (None, None)
            if version == 2:
                assert fingerprint["agents"] is None
            else:
                untimed = [{**agent, "rollouts_per_hour": None} for agent in expected["agents"]]
                assert fingerprint["agents"] == untimed
            assert {k: v for k, v in fingerprint.items() if k not in ("agents", "timeline")} == {
                k: v for k, v in expected.items() if k not in ("agents", "timeline")
            }
            row = {"_ng_task_index": 0, "_ng_rollout_index": 9, "agent_ref": {"name": "late"}, "reward": 1}
            outcomes = await service.ingestor.submit(
                RUN, EventBatch.validate_python([{"kind": "completed", "seconds": 3.0, "row": row}])
            )
            assert [outcome.status for outcome in outcomes] == ["accepted"]
            agents = run.agent_rows()
            assert agents is not None
            if version == 2:
                assert [(a["agent"], a["rollouts"]) for a in agents] == [("late", 1)]
            else:
                assert ("late", 1) in [(a["agent"], a["rollouts"]) for a in agents]
        finally:
            await service.stop()

    async def test_a_snapshot_of_the_previous_state_schema_loads(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        """A snapshot stamped ``facts-2/health-1`` whose run states lack ``agents`` (written before
        they existed) is used, not set aside: its runs start per-agent totals empty."""
        service = _Service(tmp_path)
        ingestor = await service.start()
        for batch in _batches(generated)[:4]:
            await service.post(batch)
        seq = await ingestor.snapshot()
        await service.stop()
        assert seq is not None
        path = service.store.path_of(seq)
        data = path.read_bytes()
        header_end = data.index(b"\n", data.index(b"{"))
        header = orjson.loads(data[data.index(b"{") : header_end])
        state = loads_state(data[header_end + 1 :])
        for run in state["runs"].values():
            del run.__dict__["agents"]  # pickled as a run state of the previous build would be
        body = dumps_state(state)
        header.update(
            state_schema="facts-2/health-1", body_bytes=len(body), sha256=hashlib.sha256(body).hexdigest()
        )
        path.write_bytes(data[: data.index(b"{")] + orjson.dumps(header) + b"\n" + body)

        restarted = await service.start()
        assert restarted.snapshot_seq == seq and service.store.skipped == []
        assert restarted.runs[RUN].agent_rows() is None
        await service.stop()


def _legacy(key: str, kind: str, payload: bytes) -> Any:
    from sidecar.journal import JournalEvent

    return JournalEvent(run_id=RUN, kind=kind, key=key, payload=payload)


# One step of the property test: post the next batch, snapshot, or restart (optionally tearing
# the newest snapshot first).
_STEP = st.sampled_from(["post", "post", "post", "snapshot", "restart", "tear_and_restart"])


class TestAnyInterleaving:
    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(steps=st.lists(_STEP, min_size=1, max_size=40))
    def test_equals_one_uninterrupted_replay(
        self, tmp_path_factory: pytest.TempPathFactory, generated: GeneratedRun, steps: list[str]
    ) -> None:
        batches = _batches(generated)
        root = tmp_path_factory.mktemp("interleaving")

        async def scenario() -> None:
            expected = await _uninterrupted(root / "reference", batches)
            service = _Service(root / "interleaved", keep=2)
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
                    seqs = service.store.seqs()
                    if step == "tear_and_restart" and seqs:
                        newest = service.store.path_of(seqs[-1])
                        newest.write_bytes(newest.read_bytes()[:-7])
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
        # Rates frozen at ended_at: the whole report, completions_per_hour included, is equal.
        assert from_snapshot[1] == from_journal[1]
        assert from_snapshot[0]["frozen_clock"] is not None
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
        from sidecar.ingest.events import encode_event
        from sidecar.journal import JournalEvent

        settings = ServiceSettings(journal_path=tmp_path / "journal.sqlite3")
        batches = _batches(generated)
        half = len(batches) // 2
        service = Service(settings)
        await service.start()
        for batch in batches[:half]:
            await service.ingestor.submit(RUN, EventBatch.validate_python(batch))
        await service.stop()  # snapshots everything so far
        covered = service.ingestor.applied_seq
        journal = Journal(settings.journal_path)  # a tail of records written by an older build
        await journal.open()
        tail = [event for batch in batches[half:] for event in EventBatch.validate_python(batch)]
        records = []
        for event in tail:
            key, payload = encode_event(RUN, event, received_at=2e9)
            records.append(JournalEvent(run_id=RUN, kind=event.kind, key=key, payload=payload))
        await journal.append(records)
        await journal.close()

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
            assert seen[-1] == {
                "replayed": len(tail),
                "journal_events": covered + len(tail),
                "snapshot_seq": covered,
            }
            assert service.ingestor.replayed == len(tail) and service.ingestor.migrated == len(tail)
            restored = state_fingerprint(service.ingestor.runs[RUN])
        finally:
            await service.stop()
        expected = await _uninterrupted(tmp_path / "whole", batches)
        assert restored["summary"] == expected["summary"] and restored["verdicts"] == expected["verdicts"]


class TestClosedGroupsOnDisk:
    """Closed tasks' digests live in ``closed-groups.bin`` beside the snapshots; the verdict
    stream, summary and every other output equal an uninterrupted in-memory run's."""

    @staticmethod
    def _groups_path(service: _Service) -> Path:
        return service.store.directory / "closed-groups.bin"

    async def _two_snapshots(self, service: _Service, batches: list[list[dict[str, Any]]]) -> tuple[int, int]:
        """Post until a task's group was spilled, snapshot, post the rest, snapshot; returns the
        groups file's length at each snapshot."""
        ingestor = await service.start()
        pending = list(batches)
        while pending and not (
            self._groups_path(service).exists() and self._groups_path(service).stat().st_size
        ):
            await service.post(pending.pop(0))
        await ingestor.snapshot()
        first = self._groups_path(service).stat().st_size
        for batch in pending:
            await service.post(batch)
        await ingestor.snapshot()
        spilled = sum(type(group) is int for group in ingestor.runs[RUN].reducer._tasks.values())  # type: ignore[attr-defined]
        assert spilled == len(ingestor.runs[RUN].reducer._tasks)  # type: ignore[attr-defined]  # all closed at run end
        await service.stop()
        with sqlite3.connect(service.path) as conn:  # compacted through the older snapshot
            assert conn.execute("SELECT count(*) FROM compacted_keys").fetchone()[0] > 0
        return first, self._groups_path(service).stat().st_size

    async def test_spilled_groups_stream_in_order_across_restarts(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        first, second = await self._two_snapshots(service, batches)
        assert 0 < first < second
        for _ in range(2):  # the second restart reads the file the first one kept
            assert await _restarted_fingerprint(service)() == expected
        assert self._groups_path(service).stat().st_size == second

    async def test_a_format_4_snapshot_is_read_and_rewritten_in_format_5(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        """Format 4 (the previous build's) marked the groups file with one CRC and wrote no copy:
        it is still read, the copy is made, and the start rewrites the snapshot in format 5."""
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        await self._two_snapshots(service, batches)
        newest = service.store.seqs()[-1]
        state = _recovery.loads_state(service.store.load(newest).body)
        groups = self._groups_path(service)
        data = groups.read_bytes()
        state["closed_groups"] = (len(data), zlib.crc32(data))
        service.store.write(newest, dumps_state(state))
        path = service.store.path_of(newest)
        path.write_bytes(path.read_bytes().replace(b'"format":5', b'"format":4', 1))
        groups.with_name("closed-groups.copy.bin").unlink()
        restarted = await service.start()
        try:
            assert restarted.snapshot_seq == newest and restarted.recovery.older_format
            assert state_fingerprint(restarted.runs[RUN]) == expected
            assert groups.with_name("closed-groups.copy.bin").read_bytes() == data
        finally:
            await service.stop()
        assert b'"format":5' in path.read_bytes()[:200]
        again = await service.start()
        try:
            assert not again.recovery.older_format and state_fingerprint(again.runs[RUN]) == expected
        finally:
            await service.stop()

    @staticmethod
    def _damage(path: Path, damage: str, at: int) -> None:
        data = path.read_bytes()
        if damage == "torn":
            path.write_bytes(data[:at])
        else:
            path.write_bytes(data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :])

    @pytest.mark.parametrize("damage", ["torn", "flipped"])
    async def test_damage_to_the_groups_file_alone_is_repaired_from_its_copy(
        self, tmp_path: Path, generated: GeneratedRun, damage: str
    ) -> None:
        """One flipped bit in an old record used to fail every snapshot's mark: now the copy
        holds the segment, the newest snapshot is used and nothing is set aside."""
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        first, _second = await self._two_snapshots(service, batches)
        self._damage(self._groups_path(service), damage, first // 2)
        newest = service.store.seqs()[-1]
        with structlog.testing.capture_logs() as logs:
            restarted = await service.start()
        try:
            assert restarted.snapshot_seq == newest and restarted.replayed == 0
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()
        assert not [entry for entry in logs if entry["event"] == "snapshot skipped"]
        assert [entry["segments"] for entry in logs if entry["event"] == "closed groups repaired"] == [[0]]

    @pytest.mark.parametrize("damage", ["torn", "flipped"])
    async def test_damage_to_both_copies_skips_the_snapshot_that_needs_it(
        self, tmp_path: Path, generated: GeneratedRun, damage: str
    ) -> None:
        """Damage past the older snapshot's mark in both copies: the newest snapshot is set aside,
        the older one and the journal's tail rebuild the same state, both files cut back."""
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b")
        first, second = await self._two_snapshots(service, batches)
        at = (first + second) // 2 if damage == "flipped" else second - 3
        for path in (
            self._groups_path(service),
            self._groups_path(service).with_name("closed-groups.copy.bin"),
        ):
            self._damage(path, damage, at)
        older = service.store.seqs()[0]
        with structlog.testing.capture_logs() as logs:
            restarted = await service.start()
        try:
            assert restarted.snapshot_seq == older
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()
        skipped = [entry for entry in logs if entry["event"] == "snapshot skipped"]
        assert len(skipped) == 1 and "damaged in both copies" in skipped[0]["reason"]

    async def test_old_damage_in_both_copies_falls_back_to_what_the_journal_holds(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        """Every snapshot with a closed group needs the damaged segment; the journal still holds
        every record (not compacted: ``keep`` not reached), so the newest snapshot taken before
        any group closed plus the journal after it rebuild the same state."""
        batches = _batches(generated)
        expected = await _uninterrupted(tmp_path / "a", batches)
        service = _Service(tmp_path / "b", keep=5)
        ingestor = await service.start()
        for batch in batches:
            await service.post(batch)
            await ingestor.snapshot()
        await service.stop()
        for path in (
            self._groups_path(service),
            self._groups_path(service).with_name("closed-groups.copy.bin"),
        ):
            self._damage(path, "flipped", 2)
        restarted = await service.start()
        try:
            assert restarted.replayed == restarted.applied_seq - restarted.snapshot_seq > 0
            assert len(restarted.recovery.set_aside) == len(batches) - restarted.snapshot_seq // 5
            assert state_fingerprint(restarted.runs[RUN]) == expected
        finally:
            await service.stop()
        assert service.store.seqs()  # the start's own snapshot replaced the ones set aside
