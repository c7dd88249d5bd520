"""The closed-group file: append-only records in two copies, a per-segment mark a snapshot can
check, damage to one copy repaired from the other, damage to both refused."""

from __future__ import annotations

import os
import random
import zlib
from pathlib import Path

import pytest

from sidecar.journal._closed_groups import SEGMENT, ClosedGroupFile, ClosedGroupsMark, ClosedGroupsTorn


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
    assert (tmp_path / "g.bin").stat().st_size == 0 and groups.mark() == ClosedGroupsMark(0, ())
    assert groups.copy_path.stat().st_size == 0


def _damage(path: Path, how: str, at: int) -> None:
    data = bytearray(path.read_bytes())
    if how == "short":
        path.write_bytes(bytes(data[:at]))
    elif how == "missing":
        path.unlink()
    else:
        data[at] ^= 1 << (at % 8)
        path.write_bytes(bytes(data))


def _big(path: Path) -> tuple[ClosedGroupFile, list[bytes], list[int]]:
    """Records spanning several segments (one larger than a segment), fsynced, closed."""
    rng = random.Random(5)
    blobs = [rng.randbytes(rng.randint(0, 300_000)) for _ in range(12)] + [rng.randbytes(SEGMENT + 7)]
    groups, offsets = _filled(path, blobs)
    groups.sync()
    groups.close()
    return groups, blobs, offsets


def test_the_mark_holds_one_crc_per_segment_of_both_copies(tmp_path: Path) -> None:
    groups, _blobs, _ = _big(tmp_path / "g.bin")
    mark = groups.mark()
    data = (tmp_path / "g.bin").read_bytes()
    assert mark.length == len(data) > 2 * SEGMENT
    assert mark.crcs == tuple(zlib.crc32(data[i : i + SEGMENT]) for i in range(0, len(data), SEGMENT))
    assert groups.copy_path.read_bytes() == data


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("how", ["flip", "short", "missing"])
@pytest.mark.parametrize("which", ["main", "copy"])
def test_damage_to_one_copy_costs_nothing(tmp_path: Path, which: str, how: str, seed: int) -> None:
    groups, blobs, offsets = _big(tmp_path / "g.bin")
    mark = groups.mark()
    target = groups.path if which == "main" else groups.copy_path
    _damage(target, how, random.Random(seed).randrange(mark.length))
    restored = ClosedGroupFile(tmp_path / "g.bin")
    restored.restore(mark)
    assert [restored.get(offset) for offset in offsets] == blobs
    assert restored.mark() == mark
    if which == "main":  # repaired in place from the copy
        assert restored.repaired and (tmp_path / "g.bin").read_bytes() == restored.copy_path.read_bytes()
    else:  # the copy is read only where the main file fails; a short or missing one is completed
        assert not restored.repaired
        if how != "flip":
            assert restored.copy_path.read_bytes() == (tmp_path / "g.bin").read_bytes()


@pytest.mark.parametrize("how", ["flip", "short"])
def test_damage_to_one_segment_of_both_copies_is_refused_naming_it(tmp_path: Path, how: str) -> None:
    groups, _, _ = _big(tmp_path / "g.bin")
    mark = groups.mark()
    at = SEGMENT + 1234
    _damage(groups.path, how, at)
    _damage(groups.copy_path, "flip", at + 10 if how == "flip" else at)
    with pytest.raises(ClosedGroupsTorn, match=r"segment 1 .* damaged in both copies"):
        ClosedGroupFile(tmp_path / "g.bin").restore(mark)


def test_damage_in_different_segments_of_each_copy_is_repaired(tmp_path: Path) -> None:
    groups, blobs, offsets = _big(tmp_path / "g.bin")
    mark = groups.mark()
    _damage(groups.path, "flip", 10)
    _damage(groups.copy_path, "flip", SEGMENT + 10)
    restored = ClosedGroupFile(tmp_path / "g.bin")
    restored.restore(mark)
    assert restored.repaired == [0]
    assert [restored.get(offset) for offset in offsets] == blobs


def test_a_format_4_mark_is_checked_whole_and_the_copy_is_made(tmp_path: Path) -> None:
    groups, blobs, offsets = _big(tmp_path / "g.bin")
    data = (tmp_path / "g.bin").read_bytes()
    os.unlink(groups.copy_path)  # format 4 wrote no copy
    old_mark = (len(data), zlib.crc32(data))
    restored = ClosedGroupFile(tmp_path / "g.bin")
    restored.restore(old_mark)
    assert restored.copy_path.read_bytes() == data and restored.mark() == groups.mark()
    assert [restored.get(offset) for offset in offsets] == blobs
    restored.close()
    _damage(tmp_path / "g.bin", "flip", 99)
    with pytest.raises(ClosedGroupsTorn, match="CRC-32"):
        ClosedGroupFile(tmp_path / "g.bin").restore(old_mark)


def test_a_read_error_is_not_damage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    groups, _, _ = _big(tmp_path / "g.bin")
    mark = groups.mark()

    def failing(fd: int, size: int, offset: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pread", failing)
    with pytest.raises(OSError, match="Input/output"):
        ClosedGroupFile(tmp_path / "g.bin").restore(mark)
