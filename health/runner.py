"""The batch map phase: digest every line of the inputs and feed a reducer.

Workers digest byte splits (planned from file sizes, so the parent never reads the inputs) with
split-local positions; the parent places the outcomes in split order and feeds the reducer.
Splits taper (each ``1 / (workers * 2)`` of the bytes left, 4-64 MiB): each costs the parent
~0.3 ms whatever its size, and the last ones decide how evenly the workers finish.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .jsonl import is_blank
from .process_tuning import collector_paused, take_over
from .reduce import HealthReducer
from .splits import FileSplit, SplitOutcome, SplitPlacer, digest_split, iter_split_lines, plan_tapering_splits

__all__ = [
    "PoolFactory",
    "ProgressCallback",
    "default_workers",
    "map_into_reducer",
    "process_pool",
]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(bytes_done, bytes_total)`` after each range is reduced."""

PoolFactory = Callable[[int], Executor]
"""Builds the executor for a worker count; the default is :func:`process_pool`."""

_MAX_SPLIT_BYTES = 64 << 20
_MIN_SPLIT_BYTES = 4 << 20
_SPLITS_PER_WORKER = 4
_TAPER_PER_WORKER = 2
_IN_FLIGHT_PER_WORKER = 2
_HORIZON_WINDOWS = 4
_SMALL_INPUT_BYTES = 1 << 20


def default_workers() -> int:
    """NeMo Gym's default pool size: the CPU count, at most 8."""
    return min(os.cpu_count() or 1, 8)


def _init_worker() -> None:
    import health.digest  # noqa: F401  (import once per worker, before the first range)

    # the worker's entry point: what it imported lives as long as it (frozen), and its ranges
    # run without collector passes where the parent owns its settings too (health.process_tuning)
    take_over("worker")


def process_pool(workers: int) -> Executor:
    """A process pool whose workers inherit the per-record step the parent imported (forked), or
    import it in their initializer."""
    if multiprocessing.get_start_method(allow_none=False) == "fork":
        import health.digest  # noqa: F401
    return ProcessPoolExecutor(max_workers=workers, initializer=_init_worker)


def _plan(paths: Sequence[str], workers: int, total_bytes: int) -> list[FileSplit]:
    smallest = max(1, min(_MIN_SPLIT_BYTES, total_bytes // (workers * _SPLITS_PER_WORKER)))
    return plan_tapering_splits(paths, workers * _TAPER_PER_WORKER, smallest, _MAX_SPLIT_BYTES)


def _at_most_one_record(paths: Sequence[str], total_bytes: int) -> bool:
    """True for a small input with at most one non-blank line: a pool would only cost start-up."""
    if total_bytes > _SMALL_INPUT_BYTES:
        return False
    records = 0
    for path in paths:
        for line in iter_split_lines(path, 0, os.path.getsize(path)):
            records += not is_blank(line)
            if records > 1:
                return False
    return True


def _run_serially(
    splits: list[FileSplit], reducer: HealthReducer, progress: ProgressCallback | None, total: int
) -> None:
    placer = SplitPlacer(splits, reducer.ignored_checks)
    done = 0
    for split in splits:
        reducer.extend(placer.add(digest_split(split, reducer.ignored_checks)))
        done += split.end - split.start
        if progress is not None:
            progress(done, total)


def _run_pool(
    pool: Executor,
    splits: list[FileSplit],
    reducer: HealthReducer,
    progress: ProgressCallback | None,
    total: int,
    workers: int,
) -> None:
    ignored = reducer.ignored_checks
    placer = SplitPlacer(splits, ignored)
    pending: dict[Future[SplitOutcome], FileSplit] = {}
    window = workers * _IN_FLIGHT_PER_WORKER
    horizon = window * _HORIZON_WINDOWS
    submitted = done = 0
    while placer.placed < len(splits):
        while submitted < len(splits) and len(pending) < window and submitted - placer.placed < horizon:
            pending[pool.submit(digest_split, splits[submitted], ignored)] = splits[submitted]
            submitted += 1
        finished, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in finished:
            split = pending.pop(future)
            done += split.end - split.start
            reducer.extend(placer.add(future.result()))
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
    """Digest every non-blank line of ``paths`` (in order) into a fresh reducer: serially with one
    worker or one line, else in a pool; a pool that breaks falls back to a serial re-run with NeMo
    Gym's ``RuntimeWarning``."""
    total = sum(os.path.getsize(path) for path in paths)
    reducer = HealthReducer(ignored_checks)
    splits = _plan(paths, workers, total)
    if workers == 1 or len(splits) <= 1 or _at_most_one_record(paths, total):
        _run_serially(splits, reducer, progress, total)
        return reducer
    try:
        pool = pool_factory(workers)
    except (NotImplementedError, OSError) as exc:
        warnings.warn(
            f"Process pool unavailable ({exc}); running rollout health checks serially.",
            RuntimeWarning,
            stacklevel=2,
        )
        _run_serially(splits, reducer, progress, total)
        return reducer
    # The parent only accumulates acyclic compact digests: re-scanning them is wasted work.
    with collector_paused():
        try:
            _run_pool(pool, splits, reducer, progress, total, workers)
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
    return reducer
