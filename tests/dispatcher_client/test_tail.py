"""Tailing: partial lines held back, replaced and truncated files restart, positions round-trip."""

from __future__ import annotations

import os
from pathlib import Path

from dispatcher_client._tail import FilePosition, read_new_lines


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


class TestReadNewLines:
    def test_missing_file_is_not_an_error(self, tmp_path: Path) -> None:
        read = read_new_lines(str(tmp_path / "nope.jsonl"), FilePosition())
        assert not read.exists and read.lines == [] and not read.restarted

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
