"""The closed-group file: append-only records, a mark a snapshot can check, torn files refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.journal._closed_groups import ClosedGroupFile, ClosedGroupsMark, ClosedGroupsTorn


def _filled(path: Path, blobs: list[bytes]) -> tuple[ClosedGroupFile, list[int]]:
    groups = ClosedGroupFile(path)
    groups.restore(None)
    return groups, [groups.put(blob) for blob in blobs]


def test_records_read_back_by_offset_also_after_reopening(tmp_path: Path) -> None:
    blobs = [b"", b"a", b"\x00" * 70_000, b"xyz"]
    groups, offsets = _filled(tmp_path / "g.bin", blobs)
    assert [groups.get(offset) for offset in offsets] == blobs
    mark = groups.mark()
    groups.sync()
    groups.close()
    again = ClosedGroupFile(tmp_path / "g.bin")
    again.restore(mark)
    assert [again.get(offset) for offset in reversed(offsets)] == blobs[::-1]
    with pytest.raises(ClosedGroupsTorn, match="no record at offset"):
        again.get(mark.length)


def test_restore_drops_what_was_appended_after_the_mark(tmp_path: Path) -> None:
    groups, _ = _filled(tmp_path / "g.bin", [b"one", b"two"])
    mark = groups.mark()
    later = groups.put(b"appended after the snapshot")
    groups.close()
    restored = ClosedGroupFile(tmp_path / "g.bin")
    restored.restore(mark)
    assert (tmp_path / "g.bin").stat().st_size == mark.length
    assert restored.put(b"next") == later  # appends where the mark ends
    assert restored.mark() != mark


def test_restore_without_a_mark_empties_the_file(tmp_path: Path) -> None:
    groups, _ = _filled(tmp_path / "g.bin", [b"one"])
    groups.restore(None)
    assert (tmp_path / "g.bin").stat().st_size == 0 and groups.mark() == ClosedGroupsMark(0, 0)


@pytest.mark.parametrize("damage", ["short", "flipped"])
def test_a_file_that_does_not_match_its_mark_is_refused(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "g.bin"
    groups, _ = _filled(path, [b"first group", b"second group"])
    mark = groups.mark()
    groups.close()
    data = path.read_bytes()
    if damage == "short":
        path.write_bytes(data[:-3])
        expected = "the snapshot refers to"
    else:
        path.write_bytes(data[:5] + bytes([data[5] ^ 0x01]) + data[6:])
        expected = "CRC-32"
    with pytest.raises(ClosedGroupsTorn, match=expected):
        ClosedGroupFile(path).restore(mark)
