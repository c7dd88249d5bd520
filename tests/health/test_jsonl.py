"""JSONL indexing (physical lines, blank lines, line numbers, ordinals) and the byte ranges
workers re-split."""

from __future__ import annotations

from pathlib import Path

import pytest

from health.jsonl import (
    LineSlice,
    iter_slices,
    stripped,
)

CONTENT = b'{"a":1}\n\n  \t\r\n{"b":\r2}\r\n\x0b\x0c\nnot json\n   {"c":3}   \n{"last":true}'


def _write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


class TestSlices:
    def test_line_numbers_ordinals_and_offsets(self, tmp_path: Path) -> None:
        path = _write(tmp_path, "a.jsonl", CONTENT)
        slices = list(iter_slices([path]))
        assert [(s.line_number, s.ordinal) for s in slices] == [(1, 0), (4, 1), (6, 2), (7, 3), (8, 4)]
        for piece in slices:
            raw = CONTENT[piece.offset : piece.offset + piece.length]
            assert raw.strip()
            assert raw.endswith(b"\n") or piece.offset + piece.length == len(CONTENT)
        assert CONTENT[slices[1].offset : slices[1].offset + slices[1].length] == b'{"b":\r2}\r\n'

    def test_ordinals_run_on_across_files(self, tmp_path: Path) -> None:
        first = _write(tmp_path, "a.jsonl", b"x\n\ny\n")
        second = _write(tmp_path, "b.jsonl", b"\nz")
        slices = list(iter_slices([first, second]))
        assert slices[-1] == LineSlice(second, 1, 1, 2, 1, 2)

    def test_empty_and_blank_files(self, tmp_path: Path) -> None:
        assert list(iter_slices([_write(tmp_path, "e", b"")])) == []
        assert list(iter_slices([_write(tmp_path, "b", b"\n \n\t")])) == []

    def test_lines_longer_than_a_read_block(self, tmp_path: Path) -> None:
        big = b"{" + b" " * (5 << 20) + b"}"
        path = _write(tmp_path, "big", b"\n" + b" " * (5 << 20) + b"\n" + big + b"\n")
        slices = list(iter_slices([path]))
        assert [(s.line_number, s.offset, s.length) for s in slices] == [(3, (5 << 20) + 2, len(big) + 1)]


@pytest.mark.parametrize(
    "data",
    [b"", b"  ", b"{}", b" {} ", b"\t\x0b{x}\r\n", b"x", b"{ ", b" }", b"\xa0{}\x85", b" \x0c\x0b\r\n\t"],
)
def test_stripped_views_match_bytes_strip(data: bytes) -> None:
    view = memoryview(bytearray(b"<" + data + b">"))[1:-1]
    result = stripped(view)
    assert isinstance(result, memoryview)
    assert bytes(result) == data.strip() == stripped(data)
