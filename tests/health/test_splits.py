"""Byte splits: every line owned by exactly one split; placed outcomes equal the local runner."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from health import splits
from health.compact import CompactDigest, compact_digest
from health.digest import digest_line
from health.reduce import HealthReducer
from health.runner import map_into_reducer
from health.splits import SplitPlacer, digest_split, iter_split_lines, plan_splits, plan_tapering_splits

from .shard_corpus import record, write_shards


def _owned(path: Path, split_bytes: int) -> list[bytes]:
    splits = plan_splits([str(path)], split_bytes)
    return [line for split in splits for line in iter_split_lines(split.file, split.start, split.end)]


def _lines_of(path: Path) -> list[bytes]:
    lines = path.read_bytes().split(b"\n")
    return lines[:-1] if lines[-1] == b"" else lines


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"a",
        b"\n",
        b"\n\n\n",
        b"a\nbb\nccc\n",
        b"a\nbb\nccc",
        b"a\r\nb\r\n\r\n  \nlast-without-newline",
        b"x" * 300 + b"\n" + b"y" * 5 + b"\n",
    ],
)
@pytest.mark.parametrize("split_bytes", [1, 2, 3, 7, 64, 1 << 20])
def test_every_line_owned_once(tmp_path: Path, content: bytes, split_bytes: int) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(content)
    assert _owned(path, split_bytes) == _lines_of(path)


@pytest.mark.parametrize("preadv", [True, False], ids=["preadv", "pread"])
def test_random_files_any_split_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preadv: bool) -> None:
    monkeypatch.setattr(splits, "_HAS_PREADV", preadv and splits._HAS_PREADV)
    rng = random.Random(5)
    for trial in range(30):
        path = tmp_path / f"f{trial}.jsonl"
        alphabet = [b"\n", b"\r", b" ", b"a", b"{}", b"\n\n"]
        path.write_bytes(b"".join(rng.choice(alphabet) for _ in range(rng.randrange(200))))
        for split_bytes in (1, rng.randrange(1, 40), 1000):
            assert _owned(path, split_bytes) == _lines_of(path), (trial, split_bytes)


@pytest.mark.parametrize("preadv", [True, False], ids=["preadv", "pread"])
def test_a_line_longer_than_a_read_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preadv: bool
) -> None:
    monkeypatch.setattr(splits, "_HAS_PREADV", preadv and splits._HAS_PREADV)
    path = tmp_path / "f.jsonl"
    long_line = b"z" * (3 << 20)
    path.write_bytes(b"a\n" + long_line + b"\nb\n")
    assert _owned(path, 1 << 20) == [b"a", long_line, b"b"]


def test_plan_uses_sizes_only_and_refuses_zero(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"0123456789")
    assert [(s.start, s.end) for s in plan_splits([str(path)], 4)] == [(0, 4), (4, 8), (8, 10)]
    with pytest.raises(ValueError, match="split_bytes must be at least 1"):
        plan_splits([str(path)], 0)


def test_tapering_splits_shrink_across_files_within_their_bounds(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(b"x" * 100)
    second.write_bytes(b"y" * 60)
    splits = plan_tapering_splits([str(first), str(second)], 4, 5, 30)
    # a quarter of what is left (160, 130, 100, 75, 60, 45, ...) kept within [5, 30]; each file's
    # last split as short as the file leaves it
    assert [(s.source_index, s.start, s.end) for s in splits] == [
        (0, 0, 30),
        (0, 30, 60),
        (0, 60, 85),
        (0, 85, 100),
        (1, 0, 15),
        (1, 15, 26),
        (1, 26, 34),
        (1, 34, 40),
        (1, 40, 45),
        (1, 45, 50),
        (1, 50, 55),
        (1, 55, 60),
    ]
    assert [s.index for s in splits] == list(range(len(splits)))
    with pytest.raises(ValueError, match="need parts >= 1 and 1 <= smallest <= largest"):
        plan_tapering_splits([str(first)], 2, 8, 4)


@pytest.mark.parametrize("split_bytes", [97, 1024, 1 << 20])
def test_tapering_splits_place_like_the_local_runner(tmp_path: Path, split_bytes: int) -> None:
    paths = [str(path) for path in write_shards(tmp_path / "run", pad=300)]
    local = map_into_reducer(paths, workers=1, ignored_checks=frozenset())
    splits = plan_tapering_splits(paths, 3, split_bytes // 4 + 1, split_bytes)
    outcomes = [digest_split(split, frozenset()) for split in reversed(splits)]
    reducer = HealthReducer()
    placer = SplitPlacer(splits, reducer.ignored_checks)
    for outcome in outcomes:
        reducer.extend(placer.add(outcome))
    assert reducer.summary_bytes() == local.summary_bytes()
    assert list(reducer.iter_verdict_lines()) == list(local.iter_verdict_lines())


def _placed_reducer(paths: list[str], split_bytes: int, order: list[int] | None = None) -> HealthReducer:
    splits = plan_splits(paths, split_bytes)
    outcomes = [digest_split(split, frozenset()) for split in splits]
    if order is not None:
        outcomes = [outcomes[i] for i in order]
    reducer = HealthReducer()
    placer = SplitPlacer(splits, reducer.ignored_checks)
    for outcome in outcomes:
        reducer.extend(placer.add(outcome))
    assert placer.placed == len(splits)
    return reducer


@pytest.mark.parametrize("split_bytes", [97, 1024, 1 << 20])
def test_placed_splits_equal_the_local_runner(tmp_path: Path, split_bytes: int) -> None:
    paths = [str(path) for path in write_shards(tmp_path / "run", pad=300)]
    local = map_into_reducer(paths, workers=1, ignored_checks=frozenset())
    splits = plan_splits(paths, split_bytes)
    order = list(range(len(splits)))
    random.Random(split_bytes).shuffle(order)
    placed = _placed_reducer(paths, split_bytes, order)
    assert placed.compact_digests() == local.compact_digests()
    assert placed.summary_bytes() == local.summary_bytes()
    assert list(placed.iter_verdict_lines()) == list(local.iter_verdict_lines())


def test_only_position_dependent_lines_are_left_to_the_driver(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(
        b'{"_ng_task_index": 1}\n{"_ng_rollout_index": 3}\n\n{torn\n'
        + b'{"_ng_task_index": "__unreadable_record__:input-0:line-1"}\n'
        + b'{"_ng_task_index": null}\n{"_ng_rollout_id": "own"}\n'
    )
    outcome = digest_split(plan_splits([str(path)], 1 << 20)[0], frozenset())
    assert (outcome.lines, outcome.records) == (7, 6)
    # Digests cross the pool as plain tuples of CompactDigest's fields (ordinal first).
    assert {type(digest) for digest in outcome.digests} | {type(d) for d, _ in outcome.by_ordinal} == {tuple}
    # A readable record's own identity, even one that looks synthetic, is not position-dependent.
    assert [CompactDigest(*digest).ordinal for digest in outcome.digests] == [0, 3]
    assert [(line, ordinal, detail["reason"]) for line, ordinal, detail in outcome.unreadable] == [
        (4, 2, "rollout record is unreadable"),
        (6, 4, "rollout record identity is invalid"),
    ]
    assert [(CompactDigest(*digest).ordinal, suffix) for digest, suffix in outcome.by_ordinal] == [
        (1, "3"),
        (5, None),
    ]


def _odd_identity_lines(rng: random.Random, pad: int) -> list[bytes]:
    """Lines whose digests depend on their position, mixed with ones that must not."""
    trajectory = {"task_id": "t", "rollout_id": "", "turns": [], "model_calls": []}
    rows: list[object] = [
        {"_ng_rollout_index": 2},
        {"_ng_rollout_index": "x", "_ng_rollout_id": ""},
        {"_ng_rollout_index": 2.0, "_ng_rollout_id": 0},
        {"_ng_rollout_index": True},
        {"_ng_rollout_id": "own", "_ng_rollout_index": 4},
        {"ng_trajectory": trajectory},
        {"ng_trajectory": dict(trajectory, rollout_id="traj-id")},
        {"ng_trajectory": dict(trajectory, unknown_key=1)},
        {"ng_trajectory": "not an object", "_ng_rollout_index": 7},
        {"_ng_rollout_index": None},
        {"_ng_rollout_index": 1.5},
        {"_ng_task_index": None},
        {"_ng_task_index": "__unreadable_record__:input-0:line-1", "_ng_rollout_index": 0},
        {"_ng_task_index": 1 << 60},
        [1, 2],
    ]
    lines = [orjson.dumps(row) for row in rows]
    lines += [b"{torn", b"", b"  \r", b"\xff\xfe", record(None, 1, pad=pad), record(7, 1, pad=pad)]
    rng.shuffle(lines)
    return lines


@pytest.mark.parametrize("split_bytes", [1, 97, 1 << 20])
@pytest.mark.parametrize("ignored", [frozenset(), frozenset({"record_unreadable"})])
def test_placed_digests_equal_digesting_each_line_at_its_global_position(
    tmp_path: Path, split_bytes: int, ignored: frozenset[str]
) -> None:
    rng = random.Random(split_bytes)
    paths = []
    for index in range(3):
        path = tmp_path / f"rollouts-{index}.jsonl"
        path.write_bytes(b"\n".join(_odd_identity_lines(rng, pad=200)) + b"\n")
        paths.append(str(path))
    expected = []
    ordinal = 0
    for source_index, path_name in enumerate(paths):
        for line_number, line in enumerate(Path(path_name).read_bytes().split(b"\n")[:-1], start=1):
            if line.strip():
                digest = digest_line(
                    line,
                    source_path=path_name,
                    source_index=source_index,
                    line_number=line_number,
                    ordinal=ordinal,
                    ignored_checks=ignored,
                )
                expected.append(compact_digest(digest))
                ordinal += 1
    splits = plan_splits(paths, split_bytes)
    reducer = HealthReducer(ignored)
    placer = SplitPlacer(splits, ignored)
    for split in reversed(splits):
        reducer.extend(placer.add(digest_split(split, ignored)))
    assert reducer.compact_digests() == expected


@pytest.mark.parametrize("block_bytes", [4096, 1 << 20])
def test_lines_read_in_place_digest_as_their_bytes_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int
) -> None:
    """Workers digest a line as a view of the read buffer (a copy only where it straddles two
    blocks): every digest equals the one of the line's own bytes."""
    from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

    monkeypatch.setattr(splits, "_BLOCK_BYTES", block_bytes)
    config = SyntheticConfig(num_tasks=5, repeats_per_task=4, faults=FaultRates.mixed(0.05))
    lines = [orjson.dumps(row) for row in generate_rows(config, 11)]
    lines[3] = b" \t" + lines[3] + b" \r"  # whitespace around a record is stripped as bytes.strip() does
    lines[5] = lines[5][: len(lines[5]) // 2]  # torn
    lines[7] = b"\x0b\x0c"  # blank
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"\n".join(lines))
    expected = []
    ordinal = 0
    for line_number, line in enumerate(lines, start=1):
        if line.strip():
            digest = digest_line(
                line, source_path=str(path), source_index=0, line_number=line_number, ordinal=ordinal
            )
            expected.append(compact_digest(digest))
            ordinal += 1
    reducer = _placed_reducer([str(path)], 1 << 20)
    assert reducer.compact_digests() == expected
