"""Byte splits of a run's files for a distributed map, planned from file sizes alone.

A split owns the lines whose first byte falls inside it. A task digests them with split-local
positions and sends back its line counts, plain-tuple digests (pickled in C) and what the driver
needs to finish the few position-dependent ones (unreadable lines, records without
``_ng_task_index``); the driver places them globally (:class:`SplitPlacer`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .compact import CompactDigest
from .jsonl import is_blank
from .process_tuning import collector_paused
from .unreadable import unreadable_compact

__all__ = [
    "FileSplit",
    "SplitOutcome",
    "SplitPlacer",
    "WireDigest",
    "digest_split",
    "globalize",
    "iter_split_lines",
    "plan_splits",
    "plan_tapering_splits",
]

_BLOCK_BYTES = 1 << 20
_BOUNDARY_BYTES = 1 << 16
_HAS_PREADV = hasattr(os, "preadv")
_new_tuple = tuple.__new__

WireDigest = tuple[Any, ...]
"""A :class:`~health.compact.CompactDigest`'s fields as a plain tuple, as a task sends it back."""


@dataclass(frozen=True, slots=True)
class FileSplit:
    """Bytes ``[start, end)`` of input file ``source_index``; ``index`` orders splits globally."""

    index: int
    path: str
    """The input path as given: what locators name."""
    file: str
    """The same file as an absolute path: what a task opens, whatever its working directory."""
    source_index: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class SplitOutcome:
    """What a task sends back: counts for the driver's prefix sums, digests, lines to finish."""

    index: int
    lines: int
    """Physical lines owned (blank ones included): the next split of the file numbers on from here."""
    records: int
    """Non-blank lines owned: the next split's ordinals start this much later."""
    digests: list[WireDigest]
    """Position-independent digests; ``ordinal`` (the first field) is split-local (0-based)."""
    unreadable: list[tuple[int, int, dict[str, Any]]]
    """``(local line number, local ordinal, record_unreadable detail)`` of lines without a readable
    identity."""
    by_ordinal: list[tuple[WireDigest, str | None]]
    """Digests of records without ``_ng_task_index`` (local ``ordinal``; ``task_index`` and
    ``rollout_id`` to be rewritten) with :attr:`~health.digest.OrdinalIdentity.rollout_suffix`."""
    node: str = ""
    """Where the task ran (set by the distributed runner; empty in-process)."""


def plan_splits(paths: Sequence[str], split_bytes: int) -> list[FileSplit]:
    """Cut every file into ``split_bytes`` pieces (the last one shorter) from ``stat`` alone."""
    if split_bytes < 1:
        raise ValueError(f"split_bytes must be at least 1, got {split_bytes}")
    return plan_tapering_splits(paths, 1, split_bytes, split_bytes)


def plan_tapering_splits(paths: Sequence[str], parts: int, smallest: int, largest: int) -> list[FileSplit]:
    """Cut the files, in order, into splits of ``1 / parts`` of the bytes not yet planned, kept
    within ``[smallest, largest]`` (the last split of a file shorter), from ``stat`` alone.

    Splits shrink toward the end of the input: few large ones while much is left, small ones
    last, so workers taking them in order finish within a small split of each other.
    """
    if parts < 1 or smallest < 1 or largest < smallest:
        raise ValueError(f"need parts >= 1 and 1 <= smallest <= largest, got {parts}, {smallest}, {largest}")
    sizes = [os.path.getsize(path) for path in paths]
    remaining = sum(sizes)
    splits: list[FileSplit] = []
    for source_index, (path, size) in enumerate(zip(paths, sizes, strict=True)):
        file = os.path.abspath(path)
        start = 0
        while start < size:
            end = min(size, start + max(smallest, min(largest, remaining // parts)))
            splits.append(FileSplit(len(splits), path, file, source_index, start, end))
            remaining -= end - start
            start = end
    return splits


def _first_owned_line(handle: int, start: int) -> int | None:
    """Offset of the first line starting at or after ``start``; ``None`` past the end of the file."""
    if start == 0:
        return 0
    position = start - 1
    while True:
        block = os.pread(handle, _BOUNDARY_BYTES, position)
        if not block:
            return None
        newline = block.find(b"\n")
        if newline >= 0:
            return position + newline + 1
        position += len(block)


def _read_into(handle: int, view: memoryview, position: int) -> int:
    """Fill ``view`` from ``position`` of the file; the number of bytes read (0 at its end)."""
    if _HAS_PREADV:
        return os.preadv(handle, [view], position)
    block = os.pread(handle, len(view), position)
    view[: len(block)] = block
    return len(block)


def iter_split_lines(path: str, start: int, end: int) -> Iterator[bytes]:
    """Every physical line (without its ``\\n``) whose first byte lies in ``[start, end)``."""
    for line in _iter_split_views(path, start, end):
        yield line if type(line) is bytes else bytes(line)


def _iter_split_views(path: str, start: int, end: int) -> Iterator[bytes | memoryview]:
    """:func:`iter_split_lines`, a line inside one block as a view of the reused read buffer (no
    copy); valid until the next line is asked for. A line straddling two blocks comes as ``bytes``."""
    with open(path, "rb", buffering=0) as file:
        handle = file.fileno()
        first = _first_owned_line(handle, start)
        if first is None or first >= end:
            return
        unfinished = bytearray()  # the line that runs past the last block read
        position = first
        buffer = bytearray(min(_BLOCK_BYTES, max(_BOUNDARY_BYTES, end - first)))
        view = memoryview(buffer)
        find = buffer.find
        while True:
            size = _read_into(handle, view, position)
            if not size:
                if unfinished:
                    yield bytes(unfinished)
                return
            block_offset = position
            position += size
            cursor = 0
            while True:
                newline = find(b"\n", cursor, size)
                if newline < 0:
                    unfinished += view[cursor:size]
                    break
                if unfinished:
                    unfinished += view[cursor:newline]
                    line: bytes | memoryview = bytes(unfinished)
                    unfinished.clear()
                else:
                    line = view[cursor:newline]
                yield line
                cursor = newline + 1
                if block_offset + cursor >= end:
                    return


def digest_split(split: FileSplit, ignored_checks: frozenset[str]) -> SplitOutcome:
    """Digest the lines ``split`` owns, with split-local line numbers and ordinals."""
    from .digest import UnreadableLine, digest_line_compact

    lines = records = 0
    digests: list[WireDigest] = []
    unreadable: list[tuple[int, int, dict[str, Any]]] = []
    by_ordinal: list[tuple[WireDigest, str | None]] = []
    with collector_paused():  # acyclic digests: a pass would re-scan them all
        for line in _iter_split_views(split.file, split.start, split.end):
            lines += 1
            if is_blank(line):
                continue
            digest, dependence = digest_line_compact(
                line,
                source_path=split.path,
                source_index=split.source_index,
                line_number=lines,
                ordinal=records,
                ignored_checks=ignored_checks,
            )
            if dependence is None:
                digests.append(tuple(digest))
            elif isinstance(dependence, UnreadableLine):
                unreadable.append((lines, records, dependence.detail))
            else:
                by_ordinal.append((tuple(digest), dependence.rollout_suffix))
            records += 1
    return SplitOutcome(split.index, lines, records, digests, unreadable, by_ordinal)


def globalize(
    outcome: SplitOutcome,
    split: FileSplit,
    line_base: int,
    ordinal_base: int,
    ignored_checks: frozenset[str],
) -> list[CompactDigest]:
    """The outcome's digests at global positions: ordinals shifted, position-dependent ones finished."""
    cls = CompactDigest
    if ordinal_base:
        placed = [_new_tuple(cls, (ordinal_base + digest[0], *digest[1:])) for digest in outcome.digests]
    else:
        placed = [_new_tuple(cls, digest) for digest in outcome.digests]
    for fields, rollout_suffix in outcome.by_ordinal:
        digest = _new_tuple(cls, fields)
        ordinal = ordinal_base + digest.ordinal
        rollout_id = digest.rollout_id if rollout_suffix is None else f"{ordinal}-{rollout_suffix}"
        placed.append(digest._replace(ordinal=ordinal, task_index=ordinal, rollout_id=rollout_id))
    for line_number, ordinal, detail in outcome.unreadable:
        placed.append(
            unreadable_compact(
                detail,
                split.path,
                split.source_index,
                line_base + line_number,
                ordinal_base + ordinal,
                ignored_checks,
            )
        )
    return placed


class SplitPlacer:
    """Turns outcomes arriving in any order into globally placed digests, in split order.

    Split ``k``'s line numbers continue from the earlier splits of its file and its ordinals
    from every earlier split, so an outcome waits here until all earlier ones are placed.
    """

    def __init__(self, splits: Sequence[FileSplit], ignored_checks: frozenset[str]) -> None:
        self._splits = splits
        self._ignored = ignored_checks
        self._waiting: dict[int, SplitOutcome] = {}
        self.placed = 0
        """Splits placed so far (all splits before this index)."""
        self._line_base = 0
        self._ordinal_base = 0

    def add(self, outcome: SplitOutcome) -> list[CompactDigest]:
        """Take one outcome; return every digest that can now be placed (possibly none)."""
        self._waiting[outcome.index] = outcome
        placed: list[CompactDigest] = []
        while self.placed in self._waiting:
            ready = self._waiting.pop(self.placed)
            split = self._splits[self.placed]
            if split.start == 0:
                self._line_base = 0
            placed.extend(globalize(ready, split, self._line_base, self._ordinal_base, self._ignored))
            self._line_base += ready.lines
            self._ordinal_base += ready.records
            self.placed += 1
        return placed
