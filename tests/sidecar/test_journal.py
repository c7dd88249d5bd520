"""The durable journal against a real SQLite file: acks, group commit, replay, restart and faults."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sidecar.journal import (
    DAMAGED_KIND,
    SCHEMA_VERSION,
    Journal,
    JournalCorrupt,
    JournalError,
    JournalEvent,
    JournalSchemaError,
    JournalUnavailable,
    _schema,
)

pytestmark = pytest.mark.timeout(60)

APPLICATION_ID = 0x52534A4C  # the on-disk marker of a rollout-sidecar journal (file format)
REPO_ROOT = Path(__file__).resolve().parents[2]


def event(i: int | str, *, run: str = "run-1", size: int = 64) -> JournalEvent:
    key = f"{run}|{i}|completed"
    return JournalEvent(run_id=run, kind="completed", key=key, payload=_payload(key, size))


def _payload(key: str, size: int) -> bytes:
    block = hashlib.sha256(key.encode()).digest() + b"\x00\xff"
    return (block * (size // len(block) + 1))[:size]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "journal.sqlite3"


@pytest.fixture
async def journal(path: Path) -> AsyncIterator[Journal]:
    j = Journal(path)
    await j.open()
    yield j
    await j.close()


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _write(path: Path, content: bytes) -> None:
    path.write_bytes(content)


def _keys(j: Journal) -> list[str]:
    return [e.key for e in j.replay()]


class TestAppend:
    async def test_assigns_dense_seqs_and_stores_payload_verbatim(self, journal: Journal) -> None:
        events = [event(i) for i in range(3)] + [JournalEvent("run-1", "failed", "odd", b"\x00\x01\xfe\xff")]
        stored = await journal.append(events)
        assert [s.seq if s else None for s in stored] == [1, 2, 3, 4]
        assert stored[3] == JournalEvent("run-1", "failed", "odd", b"\x00\x01\xfe\xff", seq=4)
        assert list(journal.replay()) == stored

    async def test_duplicate_key_is_acknowledged_and_changes_nothing(self, journal: Journal) -> None:
        first = await journal.append([event(1)])
        again = await journal.append([JournalEvent("run-1", "completed", event(1).key, b"different")])
        within = await journal.append([event(2), event(2)])
        assert first[0] is not None and first[0].seq == 1
        assert again == [None]
        assert within[0] is not None and within[0].seq == 2 and within[1] is None
        assert [(e.seq, e.payload) for e in journal.replay()] == [
            (1, event(1).payload),
            (2, event(2).payload),
        ]
        assert journal.last_seq() == 2

    @pytest.mark.parametrize("size", [1, 3, 16, 17, 64, 65, 150, 1030, 2100])
    async def test_appends_of_any_size_with_repeats_store_first_occurrences_in_order(
        self, journal: Journal, size: int
    ) -> None:
        await journal.append([event(f"old-{i}") for i in range(5)])
        # repeats of stored keys, of keys earlier in the append (also many events apart), fresh keys
        names = [f"old-{i % 7}" if i % 5 == 0 else f"new-{i % (size // 2 + 1)}" for i in range(size)]
        stored = await journal.append([event(name) for name in names])
        seen = {f"old-{i}" for i in range(5)}
        expected: list[tuple[int, str] | None] = []
        for name in names:
            expected.append(None if name in seen else (len(seen) + 1, event(name).key))
            seen.add(name)
        assert [None if s is None else (s.seq, s.key) for s in stored] == expected
        assert [e.key for e in journal.replay(after_seq=5)] == [e[1] for e in expected if e is not None]
        assert journal.last_seq() == len(seen)
        again = await journal.append([event("after")])
        assert again[0] is not None and again[0].seq == len(seen) + 1

    async def test_acknowledged_event_is_visible_to_another_connection(self, journal: Journal) -> None:
        await journal.append([event(7)])
        with sqlite3.connect(journal.path) as other:
            rows = other.execute("SELECT seq, key FROM events").fetchall()
        assert rows == [(1, event(7).key)]

    async def test_concurrent_appends_share_transactions(self, path: Path) -> None:
        commits: list[tuple[float, int, int]] = []
        j = Journal(path, on_commit=lambda s, n: commits.append((s, n, threading.get_ident())))
        await j.open()
        try:
            results = await asyncio.gather(*(j.append([event(i)]) for i in range(200)))
            seqs = sorted(r[0].seq for r in results if r[0] is not None)
            assert seqs == list(range(1, 201))
            assert len(commits) < 20, commits
            assert sum(n for _, n, _ in commits) == 200
            assert all(seconds > 0 for seconds, _, _ in commits)
            assert {tid for _, _, tid in commits} == {threading.get_ident()}  # called on the loop
        finally:
            await j.close()

    async def test_cancelled_caller_leaves_the_journal_usable(self, journal: Journal) -> None:
        task = asyncio.create_task(journal.append([event(1)]))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stored = await journal.append([event(1), event(2)])  # the retry is safe either way
        assert [e.key for e in journal.replay()] == [event(1).key, event(2).key]
        assert stored[1] is not None

    async def test_empty_append_returns_empty(self, journal: Journal) -> None:
        assert await journal.append([]) == []
        assert journal.last_seq() == 0


class TestLifecycle:
    async def test_append_before_open_and_after_close_is_unavailable(self, path: Path) -> None:
        j = Journal(path)
        with pytest.raises(JournalUnavailable, match="not open"):
            await j.append([event(1)])
        await j.open()
        await j.close()
        with pytest.raises(JournalUnavailable, match="closed"):
            await j.append([event(1)])
        await j.close()  # idempotent

    async def test_close_drains_pending_appends_and_checkpoints(self, path: Path) -> None:
        j = Journal(path)
        await j.open()
        tasks = [asyncio.create_task(j.append([event(i)])) for i in range(50)]
        await asyncio.sleep(0)  # every task has queued its append
        await j.close()
        results = await asyncio.gather(*tasks)
        assert sorted(r[0].seq for r in results if r[0]) == list(range(1, 51))
        wal = path.with_name(path.name + "-wal")
        assert not wal.exists() or wal.stat().st_size == 0
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (50,)

    async def test_restart_replays_in_order_and_keeps_idempotency(self, path: Path) -> None:
        j = Journal(path)
        await j.open()
        await j.append([event(i) for i in range(5)])
        await j.set_meta("follower:/x.jsonl", b'{"offset": 10}')
        await j.close()

        again = Journal(path)
        assert [e.seq for e in again.replay()] == [1, 2, 3, 4, 5]  # before open()
        await again.open()
        try:
            assert again.last_seq() == 5
            assert await again.append([event(3), event(9)]) == [None, event(9)._replace(seq=6)]
            assert [e.key for e in again.replay(after_seq=4)] == [event(4).key, event(9).key]
            assert again.get_meta("follower:/x.jsonl") == b'{"offset": 10}'
        finally:
            await again.close()

    async def test_a_second_writer_is_refused_until_the_first_closes(self, journal: Journal) -> None:
        await journal.append([event(1)])
        second = Journal(journal.path)
        with pytest.raises(JournalUnavailable, match=rf"already open for writing .*pid {os.getpid()}\)"):
            await second.open()
        assert _keys(second) == [event(1).key]  # readers are not locked out
        await journal.close()
        await second.open()
        try:
            assert (await second.append([event(2)]))[0] is not None
        finally:
            await second.close()

    async def test_open_twice_is_an_error(self, journal: Journal) -> None:
        with pytest.raises(JournalError, match="already opened"):
            await journal.open()

    async def test_empty_file_is_a_new_journal(self, path: Path) -> None:
        path.parent.mkdir(parents=True)
        _write(path, b"")
        j = Journal(path)
        await j.open()
        await j.append([event(1)])
        await j.close()
        assert _keys(Journal(path)) == [event(1).key]


class TestReplay:
    def test_missing_file_replays_nothing_and_is_not_created(self, path: Path) -> None:
        j = Journal(path)
        assert list(j.replay()) == [] and j.get_meta("x") is None
        assert not path.exists()

    async def test_streams_with_flat_memory(self, journal: Journal) -> None:
        size, count = 16384, 1200  # ~19 MB of payload
        for start in range(0, count, 200):
            await journal.append([event(i, size=size) for i in range(start, start + 200)])
        tracemalloc.start()
        try:
            seen = total = 0
            for e in journal.replay():
                seen += 1
                total += len(e.payload)
                assert e.seq == seen
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (seen, total) == (count, count * size)
        assert peak < count * size / 3, f"replay peak {peak} bytes for {total} bytes of payload"

    async def test_from_a_thread_while_appending(self, journal: Journal) -> None:
        await journal.append([event(i) for i in range(100)])

        async def writer() -> None:
            for i in range(100, 200):
                await journal.append([event(i)])

        task = asyncio.create_task(writer())
        seqs = await asyncio.to_thread(lambda: [e.seq for e in journal.replay()])
        await task
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 100

    async def test_abandoned_replay_releases_its_connection(self, journal: Journal) -> None:
        await journal.append([event(i) for i in range(600)])
        replay = journal.replay()
        assert next(replay).seq == 1
        replay.close()
        await journal.append([event("after")])
        assert journal.last_seq() == 601

    @pytest.mark.parametrize("column", ["payload", "payload_type", "run_id", "key", "crc"])
    async def test_a_record_whose_crc_fails_is_yielded_as_damaged(self, path: Path, column: str) -> None:
        """SQLite pages carry no checksums: each record's CRC (over run, kind, key and payload)
        catches a damaged one, which costs that record alone."""
        j = Journal(path)
        await j.open()
        await j.append([event(i) for i in range(5)])
        await j.close()
        with sqlite3.connect(path) as conn:
            flipped = bytearray(conn.execute("SELECT payload FROM events WHERE seq = 3").fetchone()[0])
            flipped[7] ^= 0x04
            conn.execute("UPDATE events SET payload = ? WHERE seq = 4", (bytes(flipped),))
            change = {
                "payload": "payload = (SELECT payload FROM events WHERE seq = 4)",
                "payload_type": "payload = 'x' || substr(payload, 2)",  # not UTF-8 text any more
                "run_id": "run_id = 'run-2'",
                "key": "key = key || '!'",
                "crc": "crc = crc + 1",
            }[column]
            conn.execute(f"UPDATE events SET {change} WHERE seq = 3")
            conn.execute("UPDATE events SET payload = ? WHERE seq = 4", (event(3).payload,))
        conn.close()
        with capture_logs() as logs:
            replayed = list(Journal(path).replay())
        assert [(e.seq, e.kind) for e in replayed] == [
            (1, "completed"),
            (2, "completed"),
            (3, DAMAGED_KIND),
            (4, "completed"),
            (5, "completed"),
        ]
        assert replayed[2].payload == b"" and replayed[4] == event(4)._replace(seq=5)
        assert [(e["event"], e["seq"]) for e in logs] == [("journal record damaged, skipped", 3)]


class TestCheckpoints:
    async def test_wal_is_reused_instead_of_growing_under_sustained_appends(self, journal: Journal) -> None:
        batches, per_batch, size = 50, 100, 8192  # ~41 MB through the WAL
        for b in range(batches):
            await journal.append([event(f"{b}-{i}", size=size) for i in range(per_batch)])
        wal = journal.path.with_name(journal.path.name + "-wal")
        assert wal.stat().st_size < 0.9 * batches * per_batch * size
        assert journal.last_seq() == batches * per_batch


class TestMeta:
    async def test_set_get_overwrite(self, journal: Journal) -> None:
        assert journal.get_meta("k") is None
        await journal.set_meta("k", b"1")
        await journal.set_meta("k", b"\x00two")
        assert journal.get_meta("k") == b"\x00two"
        assert await asyncio.to_thread(journal.get_meta, "k") == b"\x00two"


_CHILD = r"""
import asyncio, hashlib, os, sys
from pathlib import Path
from sidecar.journal import Journal, JournalEvent

async def main() -> None:
    journal = Journal(Path(sys.argv[1]))
    await journal.open()
    prefix = sys.argv[2]
    counter = iter(range(10**9))

    async def worker() -> None:
        while True:
            key = f"{prefix}|{next(counter)}"
            block = hashlib.sha256(key.encode()).digest() + b"\x00\xff"
            payload = (block * 200)[:4000]
            [stored] = await journal.append([JournalEvent("run-1", "completed", key, payload)])
            sys.stdout.write(f"{stored.seq} {key}\n")
            sys.stdout.flush()

    await asyncio.gather(*(worker() for _ in range(16)))

asyncio.run(main())
"""


def _run_and_kill(path: Path, prefix: str, acks_before_kill: int) -> list[tuple[int, str]]:
    """Append from a child process until it acknowledged enough, SIGKILL it, return every ack."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), prefix],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    assert child.stdout is not None
    acked: list[tuple[int, str]] = []
    try:
        for line in child.stdout:
            seq, key = line.split()
            acked.append((int(seq), key))
            if len(acked) >= acks_before_kill:
                break
        os.kill(child.pid, signal.SIGKILL)
        rest = child.stdout.read()  # acks already in the pipe were acknowledged too
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    acked += [
        (int(s), k) for s, k in (ln.split() for ln in rest.splitlines(keepends=True) if ln.endswith("\n"))
    ]
    assert child.returncode == -signal.SIGKILL
    return acked


class TestFaults:
    def test_sigkill_mid_append_loses_no_acknowledged_event(self, path: Path) -> None:
        acked: list[tuple[int, str]] = []
        for round_ in range(2):  # the second round writes to a journal recovered from the first kill
            acked += _run_and_kill(path, f"r{round_}", acks_before_kill=300 * (round_ + 1))
            assert path.with_name(path.name + "-wal").exists()  # the kill left a live WAL to recover
        stored = list(Journal(path).replay())
        by_key = {e.key: e for e in stored}
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        assert len(by_key) == len(stored)
        for seq, key in acked:
            assert key in by_key, f"acknowledged {key} (seq {seq}) lost"
            assert by_key[key].seq == seq
            assert by_key[key].payload == _payload_of_child(key)

    @pytest.mark.parametrize("alone", ["whole", "damaged"])
    async def test_pages_that_disagree_with_the_wal_are_retried_without_it(
        self, path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alone: str
    ) -> None:
        """A damaged WAL frame ends the WAL SQLite reads; pages checkpointed past it then disagree
        with what is left (quick_check fails). The database file alone holds every commit up to
        its last checkpoint: the WAL is set aside as ``-wal.bad`` and the file used; if the file
        alone is damaged too, the WAL is put back and the journal refused, both kept as they were."""
        j = Journal(path)
        await j.open()
        await j.append([event(i) for i in range(5)])
        crash = tmp_path / "crash"
        crash.mkdir()
        shutil.copy(path, crash / path.name)  # the files as a crash would leave them: a live WAL
        shutil.copy(path.with_name(path.name + "-wal"), crash / (path.name + "-wal"))
        await j.close()
        copy = crash / path.name
        wal = copy.with_name(copy.name + "-wal")
        wal_bytes = wal.read_bytes()
        real = _schema._open_writer
        calls: list[bool] = []

        def damaged_with_wal(target: Path) -> Any:
            with_wal = wal.exists()
            calls.append(with_wal)
            if with_wal or alone == "damaged":
                raise _schema._PagesDamaged(f"journal {target} is damaged (test)", path=target)
            return real(target)

        monkeypatch.setattr(_schema, "_open_writer", damaged_with_wal)
        recovered = Journal(copy)
        if alone == "damaged":
            with pytest.raises(JournalCorrupt, match="and without its WAL") as refused:
                await recovered.open()
            assert "kept as they were" in str(refused.value) and "\n" not in str(refused.value)
            assert wal.read_bytes() == wal_bytes and not wal.with_name(wal.name + ".bad").exists()
            assert calls == [True, False]
            return
        with capture_logs() as logs:
            await recovered.open()
        try:
            assert calls == [True, False]
            assert wal.with_name(wal.name + ".bad").read_bytes() == wal_bytes
            assert [e["kept_as"] for e in logs if e["event"] == "journal WAL set aside"] == [
                str(wal.with_name(wal.name + ".bad"))
            ]
        finally:
            await recovered.close()

    async def test_torn_wal_tail_recovers_every_complete_commit(self, path: Path, tmp_path: Path) -> None:
        j = Journal(path)
        await j.open()
        first = await j.append([event(i, size=3000) for i in range(5)])
        wal = path.with_name(path.name + "-wal")
        committed = wal.stat().st_size
        await j.append([event(i, size=3000) for i in range(5, 10)])
        crash = tmp_path / "crash"
        crash.mkdir()
        shutil.copy(path, crash / path.name)  # the files as a power cut would leave them
        shutil.copy(wal, crash / wal.name)
        await j.close()

        full = (crash / wal.name).stat().st_size
        assert full > committed
        with (crash / wal.name).open("r+b") as handle:  # the second commit's frames cut short
            handle.truncate(committed + (full - committed) // 2)
        torn = Journal(crash / path.name)
        await torn.open()
        try:
            assert list(torn.replay()) == first
            assert (await torn.append([event(5, size=3000)]))[0] is not None  # and it keeps working
        finally:
            await torn.close()

    async def test_garbage_after_last_commit_is_ignored(self, journal: Journal, tmp_path: Path) -> None:
        stored = await journal.append([event(i) for i in range(5)])
        crash = tmp_path / "crash"
        crash.mkdir()
        wal = journal.path.with_name(journal.path.name + "-wal")
        shutil.copy(journal.path, crash / journal.path.name)
        shutil.copy(wal, crash / wal.name)
        with (crash / wal.name).open("ab") as handle:
            handle.write(os.urandom(6000))
        assert list(Journal(crash / journal.path.name).replay()) == stored

    @pytest.mark.parametrize("version", [1, 4, SCHEMA_VERSION + 1])
    async def test_another_schema_is_refused_untouched(self, path: Path, version: int) -> None:
        """0.1 is unreleased: a journal of another schema (older or newer) is refused, never migrated."""
        path.parent.mkdir(parents=True)
        with sqlite3.connect(path) as conn:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY)")
        conn.close()
        before = _read(path)
        with pytest.raises(JournalSchemaError) as info:
            await Journal(path).open()
        assert f"version {version}, this build reads version {SCHEMA_VERSION}" in str(info.value)
        assert str(path) in str(info.value)
        with pytest.raises(JournalSchemaError):
            list(Journal(path).replay())
        assert _read(path) == before

    @pytest.mark.parametrize(
        "content",
        [b'{"run_id": "r"}\n' * 200, b"SQLite format 3\x00" + b"\x07" * 5000, b"x"],
        ids=["jsonl", "sqlite-header-garbage-body", "one-byte"],
    )
    async def test_file_that_is_not_a_journal_is_refused_untouched(self, path: Path, content: bytes) -> None:
        path.parent.mkdir(parents=True)
        _write(path, content)
        j = Journal(path)
        with pytest.raises(JournalCorrupt) as info:
            await j.open()
        assert str(path) in str(info.value) and info.value.path == path
        with pytest.raises(JournalCorrupt):
            list(j.replay())
        with pytest.raises(JournalUnavailable, match="not open"):
            await j.append([event(1)])
        assert _read(path) == content

    async def test_damaged_index_is_refused_untouched(self, path: Path) -> None:
        j = Journal(path)
        await j.open()
        await j.append([event(i) for i in range(2000)])
        await j.close()
        with sqlite3.connect(path) as conn:
            (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'index'").fetchone()
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        damaged = bytearray(_read(path))
        damaged[(root - 1) * page_size : root * page_size] = b"\x5a" * page_size
        _write(path, bytes(damaged))
        with pytest.raises(JournalCorrupt, match="is damaged") as info:
            await Journal(path).open()
        assert str(path) in str(info.value)
        assert _read(path) == bytes(damaged)

    async def test_foreign_sqlite_database_is_refused(self, path: Path) -> None:
        path.parent.mkdir(parents=True)
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE users (name TEXT)")
        before = _read(path)
        with pytest.raises(JournalCorrupt, match=r"another application \(tables \['users'\]"):
            await Journal(path).open()
        assert _read(path) == before

    async def test_disk_full_acknowledges_nothing_unstored_and_recovers(self, path: Path) -> None:
        j = Journal(path)
        await j.open()
        await j.set_max_db_bytes(256 * 1024)
        try:
            acked: list[str] = []
            with pytest.raises(JournalUnavailable, match="disk full") as info:
                for i in range(200):
                    await j.append([event(i, size=8192)])
                    acked.append(event(i).key)
            assert str(path) in str(info.value)
            failed = event(len(acked), size=8192)
            assert _keys(j) == acked
            await j.set_meta("m", b"small")  # a small write still fits: failures are per request
            await j.set_max_db_bytes(None)  # space returns
            retried = await j.append([failed])
            assert retried[0] is not None and retried[0].seq == len(acked) + 1
            assert _keys(j) == [*acked, failed.key]
        finally:
            await j.close()

    async def test_a_request_that_does_not_fit_fails_alone(self, path: Path) -> None:
        j = Journal(path)
        await j.open()
        await j.set_max_db_bytes(200 * 1024)
        try:
            await asyncio.gather(*(j.append([event(f"warm-{i}")]) for i in range(8)))
            big = [event(f"big-{i}", size=8192) for i in range(40)]
            with capture_logs() as logs:
                results = await asyncio.gather(
                    j.append(big), j.append([event("small")]), return_exceptions=True
                )
            assert isinstance(results[0], JournalUnavailable)
            assert isinstance(results[1], list) and results[1][0] is not None
            assert _keys(j)[8:] == [event("small").key]
            failures = [entry for entry in logs if entry["event"] == "journal_commit_failed"]
            assert len(failures) == 2  # the shared transaction, then the big request on its own
        finally:
            await j.close()

    async def test_read_only_refuses_then_recovers(self, journal: Journal) -> None:
        await journal.append([event(1)])
        await journal.set_read_only(True)
        with pytest.raises(JournalUnavailable, match="read-only"):
            await journal.append([event(2), event(3)])
        with pytest.raises(JournalUnavailable, match="read-only"):
            await journal.set_meta("k", b"v")
        assert _keys(journal) == [event(1).key]  # reads keep working
        await journal.set_read_only(False)
        stored = await journal.append([event(2), event(3)])
        assert [e.seq for e in stored if e] == [2, 3]


def _payload_of_child(key: str) -> bytes:
    block = hashlib.sha256(key.encode()).digest() + b"\x00\xff"
    return (block * 200)[:4000]


def test_public_api_is_exported() -> None:
    import sidecar.journal as module

    assert len(set(module.__all__)) == len(module.__all__)
    assert all(hasattr(module, name) for name in module.__all__)
    assert issubclass(JournalUnavailable, JournalError) and issubclass(JournalCorrupt, JournalError)
    assert issubclass(JournalSchemaError, JournalError)
