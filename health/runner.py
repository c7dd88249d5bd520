"""The batch map phase (spec §16.4): digest every line of the inputs and feed a reducer.

Work is cut into large contiguous byte ranges (:func:`~health.jsonl.plan_ranges`) rather
than one task per line: a worker re-opens the file, reads the range's non-blank lines (one
``pread`` each, at the offsets the index found), digests each line and sends back compact
digests, so the parent only streams the index and the pool's IPC is well under a hundred
pickled bytes per rollout each way. The parent never imports the per-record step; workers
import it once, in their initializer. Ranges are planned lazily while the pool works, with
a bounded number in flight, so memory does not grow with the input.

Range size replaces NeMo Gym's chunk size (``ceil(n / (workers * 4))`` lines, at most 128):
about ``total_bytes / (workers * 4)``, at most 16 MiB and 1024 lines, so small inputs still
spread over every worker and large ones balance to within one small range. Workers hold one
line at a time, never a whole range, so the byte cap only trades the parent's per-range cost
(pool round trips, about a millisecond each on a loaded machine) against that balance.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from itertools import chain, islice

from .compact import CompactDigest, compact_digest
from .jsonl import ByteRange, iter_range_records, plan_ranges
from .reduce import HealthReducer

__all__ = [
    "PoolFactory",
    "ProgressCallback",
    "default_workers",
    "digest_range",
    "map_into_reducer",
    "process_pool",
]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(bytes_done, bytes_total)`` after each range is reduced."""

PoolFactory = Callable[[int], Executor]
"""Builds the executor for a worker count; the default is :func:`process_pool`."""

_MAX_RANGE_BYTES = 16 << 20
_MAX_RANGE_RECORDS = 1024
_RANGES_PER_WORKER = 4
_IN_FLIGHT_PER_WORKER = 2


def default_workers() -> int:
    """NeMo Gym's default pool size: the CPU count, at most 8."""
    return min(os.cpu_count() or 1, 8)


def digest_range(byte_range: ByteRange, ignored_checks: frozenset[str]) -> list[CompactDigest]:
    """Digest every non-blank line of ``byte_range`` (runs in a worker or in-process)."""
    from .digest import digest_line

    path = byte_range.path
    source_index = byte_range.source_index
    # Each record's parse tree is freed as soon as it is digested, so the cyclic collector
    # only re-scans young objects for nothing; pausing it for one range saves ~5-10% CPU and
    # any cyclic garbage is collected as soon as it is re-enabled.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return [
            compact_digest(
                digest_line(
                    line,
                    source_path=path,
                    source_index=source_index,
                    line_number=line_number,
                    ordinal=ordinal,
                    ignored_checks=ignored_checks,
                )
            )
            for line, line_number, ordinal in iter_range_records(byte_range)
        ]
    finally:
        if collecting:
            gc.enable()


def _init_worker() -> None:
    import health.digest  # noqa: F401  (import once per worker, before the first range)

    # Module-level objects live as long as the worker: keep the collector from re-scanning them.
    gc.freeze()


def process_pool(workers: int) -> Executor:
    """A process pool whose workers import the per-record step once, up front."""
    return ProcessPoolExecutor(max_workers=workers, initializer=_init_worker)


def _plan(paths: Sequence[str], workers: int, total_bytes: int) -> Iterator[ByteRange]:
    target = max(1, min(_MAX_RANGE_BYTES, total_bytes // (workers * _RANGES_PER_WORKER)))
    return plan_ranges(paths, target_bytes=target, max_records=_MAX_RANGE_RECORDS)


def _run_serially(
    ranges: Iterator[ByteRange], reducer: HealthReducer, progress: ProgressCallback | None, total: int
) -> None:
    done = 0
    for byte_range in ranges:
        reducer.extend(digest_range(byte_range, reducer.ignored_checks))
        done += byte_range.length
        if progress is not None:
            progress(done, total)


def _run_pool(
    pool: Executor,
    ranges: Iterator[ByteRange],
    reducer: HealthReducer,
    progress: ProgressCallback | None,
    total: int,
    workers: int,
) -> None:
    ignored = reducer.ignored_checks
    pending: dict[Future[list[CompactDigest]], int] = {}
    done = 0
    for byte_range in islice(ranges, workers * _IN_FLIGHT_PER_WORKER):
        pending[pool.submit(digest_range, byte_range, ignored)] = byte_range.length
    while pending:
        finished, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in finished:
            done += pending.pop(future)
            reducer.extend(future.result())
            for byte_range in islice(ranges, 1):
                pending[pool.submit(digest_range, byte_range, ignored)] = byte_range.length
        if progress is not None:
            progress(done, total)


def map_into_reducer(
    paths: Sequence[str],
    *,
    workers: int,
    ignored_checks: frozenset[str],
    progress: ProgressCallback | None = None,
    pool_factory: PoolFactory = process_pool,
) -> HealthReducer:
    """Digest every non-blank line of ``paths`` (in order) into a fresh reducer.

    Serial with one worker or at most one non-blank line; otherwise a process pool. A pool
    that cannot start, or breaks mid-run, falls back to a serial re-run with the same
    ``RuntimeWarning`` NeMo Gym issues. Any other worker exception propagates.
    """
    total = sum(os.path.getsize(path) for path in paths)
    reducer = HealthReducer(ignored_checks)
    ranges = _plan(paths, workers, total)
    head = list(islice(ranges, 2))
    if workers == 1 or sum(byte_range.records for byte_range in head) <= 1:
        _run_serially(chain(head, ranges), reducer, progress, total)
        return reducer
    try:
        pool = pool_factory(workers)
    except (NotImplementedError, OSError) as exc:
        warnings.warn(
            f"Process pool unavailable ({exc}); running rollout health checks serially.",
            RuntimeWarning,
            stacklevel=2,
        )
        _run_serially(chain(head, ranges), reducer, progress, total)
        return reducer
    # The parent only accumulates acyclic compact digests: re-scanning them is wasted work.
    collecting = gc.isenabled()
    gc.disable()
    try:
        _run_pool(pool, chain(head, ranges), reducer, progress, total, workers)
    except (BrokenProcessPool, OSError) as exc:
        warnings.warn(
            f"Process pool failed ({exc}); running rollout health checks serially.",
            RuntimeWarning,
            stacklevel=2,
        )
        reducer = HealthReducer(ignored_checks)
        _run_serially(_plan(paths, 1, total), reducer, progress, total)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if collecting:
            gc.enable()
    return reducer
