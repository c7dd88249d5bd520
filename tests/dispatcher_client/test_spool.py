"""The on-disk spool: FIFO order, bounded, resumed by the next process, reclaimed when drained."""

from __future__ import annotations

from pathlib import Path

from dispatcher_client.sender import Spool


def _drain(spool: Spool, max_events: int = 3, max_bytes: int = 1 << 20) -> list[bytes]:
    out: list[bytes] = []
    while spool.pending:
        lines, position = spool.peek(max_events, max_bytes)
        assert lines
        out.extend(lines)
        spool.commit(position)
    return out


class TestSpool:
    def test_fifo_across_appends_and_batches(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path, "run/1", max_bytes=1 << 20)
        events = [b'{"n":%d}' % n for n in range(10)]
        spool.append(events[:4])
        spool.append(events[4:])
        assert _drain(spool) == events
        assert spool.pending_bytes == 0 and spool.path.stat().st_size == 0  # reclaimed
        spool.close()
        assert not spool.path.exists()

    def test_batches_respect_the_byte_budget_but_always_make_progress(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path, "r", max_bytes=1 << 20)
        spool.append([b"a" * 10, b"b" * 10, b"c" * 100])
        lines, position = spool.peek(100, 25)
        assert lines == [b"a" * 10, b"b" * 10]
        spool.commit(position)
        lines, position = spool.peek(100, 25)
        assert lines == [b"c" * 100]  # larger than the budget: sent alone
        spool.commit(position)
        assert not spool.pending

    def test_a_new_process_resumes_from_the_stored_position(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path, "r", max_bytes=1 << 20)
        spool.append([b"1", b"2", b"3"])
        first, position = spool.peek(1, 1 << 20)
        assert first == [b"1"]
        spool.commit(position)
        spool.close()  # the process dies with 2 and 3 undelivered
        again = Spool(tmp_path, "r", max_bytes=1 << 20)
        assert _drain(again) == [b"2", b"3"]
        again.close()

    def test_bound(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path, "r", max_bytes=10, fsync_always=True)
        assert spool.fits(10) and not spool.fits(11)
        spool.append([b"123456789"])
        assert not spool.fits(1)
        spool.sync()
        spool.close()
