"""Tailing: partial lines held back, replaced and truncated files restart, positions round-trip,
sent ranges checked against the bytes read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dispatcher_client.tail import FilePosition, SentRange, read_new_lines


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


class TestReadNewLines:
    def test_missing_file_is_not_an_error(self, tmp_path: Path) -> None:
        read = read_new_lines(str(tmp_path / "nope.jsonl"), FilePosition())
        assert read.lines == [] and read.position == FilePosition() and not read.restarted

    def test_partial_last_line_waits_for_its_newline(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        _append(path, b'{"a": 1}\n\n{"b"')
        first = read_new_lines(str(path), FilePosition())
        assert first.lines == [(1, b'{"a": 1}'), (2, b"")]
        assert first.partial == b'{"b"' and first.position.offset == 10
        again = read_new_lines(str(path), first.position)
        assert again.lines == [] and again.position == first.position
        _append(path, b": 2}\n")
        second = read_new_lines(str(path), first.position)
        assert second.lines == [(3, b'{"b": 2}')] and second.partial == b""
        assert not second.restarted

    def test_unlink_and_recreate_restarts(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        _append(path, b"one\ntwo\n")
        first = read_new_lines(str(path), FilePosition())
        keep = tmp_path / "keep"  # hold the old inode so the new file cannot reuse it
        os.link(path, keep)
        path.unlink()
        _append(path, b"three\nfour\nfive\n")
        second = read_new_lines(str(path), first.position)
        assert second.restarted
        assert second.lines == [(1, b"three"), (2, b"four"), (3, b"five")]

    def test_truncation_below_the_position_restarts(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        _append(path, b"one\ntwo\n")
        first = read_new_lines(str(path), FilePosition())
        os.truncate(path, 4)
        second = read_new_lines(str(path), first.position)
        assert second.restarted and second.lines == [(1, b"one")]

    def test_truncate_and_regrow_between_polls_restarts(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        _append(path, b"one\ntwo\n")
        first = read_new_lines(str(path), FilePosition())
        os.truncate(path, 4)
        _append(path, b"TWO\nthree\n")
        second = read_new_lines(str(path), first.position)
        assert second.restarted
        assert second.lines == [(1, b"one"), (2, b"TWO"), (3, b"three")]

    def test_resume_repair_of_an_unconsumed_tail_is_not_a_restart(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        _append(path, b"one\n{torn")
        first = read_new_lines(str(path), FilePosition())
        os.truncate(path, 4)  # NeMo Gym's resume cuts the invalid tail
        _append(path, b"two\n")
        second = read_new_lines(str(path), first.position)
        assert not second.restarted and second.lines == [(2, b"two")]

    def test_a_line_longer_than_the_read_size_is_read_whole(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        long = b"x" * 5000
        _append(path, long + b"\nshort\n")
        first = read_new_lines(str(path), FilePosition(), max_bytes=1000)
        assert first.lines == [(1, long)]
        second = read_new_lines(str(path), first.position, max_bytes=1000)
        assert second.lines == [(2, b"short")]

    def test_position_round_trips_through_json(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        _append(path, b"one\n")
        position = read_new_lines(str(path), FilePosition()).position
        assert FilePosition.from_json(position.as_json()) == position


def _sent_past_the_first_line(path: Path, data: bytes) -> tuple[FilePosition, SentRange]:
    """``data`` is ``one\\n`` then lines sent but not checkpointed (the crash window)."""
    _append(path, data)
    first = read_new_lines(str(path), FilePosition(), max_bytes=4)
    assert first.lines == [(1, b"one")]
    rest = read_new_lines(str(path), first.position)
    return first.position, SentRange.of(first.position.offset, (line for _, line in rest.lines))


class TestSentRange:
    def test_intact_sent_lines_are_read_again_without_a_restart(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        checkpoint, sent = _sent_past_the_first_line(path, b"one\ntwo\nthree\n")
        assert (sent.start, sent.end, sent.terminated) == (4, 14, True)
        _append(path, b"four\n")
        again = read_new_lines(str(path), checkpoint, sent=sent)
        assert not again.restarted
        assert again.lines == [(2, b"two"), (3, b"three"), (4, b"four")]

    def test_sent_lines_cut_and_rewritten_restart_although_the_checkpoint_holds(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        checkpoint, sent = _sent_past_the_first_line(path, b"one\ntwo\nthree\n")
        os.truncate(path, checkpoint.offset)  # cut back to the checkpoint: its bytes are intact
        _append(path, b"TWO\nthree\n")
        assert not read_new_lines(str(path), checkpoint).restarted  # the defect without the range
        again = read_new_lines(str(path), checkpoint, sent=sent)
        assert again.restarted
        assert again.lines == [(1, b"one"), (2, b"TWO"), (3, b"three")]

    def test_sent_lines_cut_below_their_end_restart(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        checkpoint, sent = _sent_past_the_first_line(path, b"one\ntwo\nthree\n")
        os.truncate(path, 8)
        again = read_new_lines(str(path), checkpoint, sent=sent)
        assert again.restarted and again.lines == [(1, b"one"), (2, b"two")]

    def test_the_range_is_checked_whole_past_a_small_read_size(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        checkpoint, sent = _sent_past_the_first_line(path, b"one\ntwo\nthree\n")
        with open(path, "r+b") as handle:
            handle.seek(12)
            handle.write(b"EE")  # "three" -> "thrEE": past the first max_bytes of the read
        again = read_new_lines(str(path), checkpoint, max_bytes=4, sent=sent)
        assert again.restarted and again.lines == [(1, b"one")]

    @pytest.mark.parametrize(
        ("after", "restarted"),
        [
            (b"\n", False),  # completed by its newline: the same line as sent
            (b"", True),  # still unterminated: it may yet become another line
            (b"tail\n", True),  # extended: not the line that was sent
        ],
    )
    def test_a_sent_unterminated_line_must_be_completed_as_sent(
        self, tmp_path: Path, after: bytes, restarted: bool
    ) -> None:
        path = tmp_path / "r.jsonl"
        _append(path, b"one\n{torn")
        read = read_new_lines(str(path), FilePosition())
        sent = SentRange.of(read.position.offset, [], read.partial)
        assert (sent.end, sent.terminated) == (9, False)
        _append(path, after)
        again = read_new_lines(str(path), read.position, sent=sent)
        assert again.restarted is restarted
        if not restarted:
            assert again.lines == [(2, b"{torn")]

    def test_a_range_must_start_at_the_position(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        _, sent = _sent_past_the_first_line(path, b"one\ntwo\n")
        with pytest.raises(ValueError, match=r"sent range \[4, 8\) of .* \(byte 0\)"):
            read_new_lines(str(path), FilePosition(), sent=sent)
        assert SentRange.from_json(sent.as_json()) == sent


def test_a_line_over_the_cap_is_scanned_in_bounded_memory(tmp_path: Path) -> None:
    """An 8 MiB line under a 1 KiB cap: its size and range come back, its bytes are never held
    (at most a chunk of it at a time), and the next read starts past it."""
    import tracemalloc

    path = tmp_path / "r.jsonl"
    huge = b"z" * (8 << 20)
    _append(path, b"one\n" + huge + b"\ntwo\n")
    first = read_new_lines(str(path), FilePosition(), max_bytes=4, max_line_bytes=1024)
    assert first.lines == [(1, b"one")]
    tracemalloc.start()
    try:
        skipped = read_new_lines(str(path), first.position, max_bytes=4, max_line_bytes=1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 << 20
    assert skipped.lines == [] and skipped.oversize is not None
    assert (skipped.oversize.line_number, skipped.oversize.size) == (2, len(huge))
    assert skipped.oversize.sent == SentRange.of(4, [huge])
    assert skipped.position.offset == 4 + len(huge) + 1 and skipped.position.line_number == 2
    assert read_new_lines(str(path), skipped.position).lines == [(3, b"two")]
    again = read_new_lines(str(path), first.position, max_line_bytes=1024, sent=skipped.oversize.sent)
    assert not again.restarted and again.oversize == skipped.oversize
