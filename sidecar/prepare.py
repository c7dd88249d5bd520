"""Per-row CPU work (health digest, ``ng_perf``) in worker processes, ahead of the journal commit.

The two pure per-row steps cost most of a completion's CPU time. A :class:`Preparer` runs
them in a process pool while the event waits for its group commit, so the sequencer only
stamps the digest's input position and folds it into the run. The result is identical to
computing inline: a row is only prepared when its digest cannot depend on its position (it
carries ``_ng_task_index``), and a prepared digest whose findings carry a line locator (an
unreadable identity) is recomputed inline with the real line number.

Opt-in (``serve --workers N``): on the 2-core reference machine ``benchmarks/ingest.py``
measured no gain, because handing a row to the pool costs the event-loop process about as
much CPU as digesting it there; it may pay off with large rows and idle cores.

Workers die with the service, even when it is SIGKILLed (a crash-restart must not leak them):
the pool's initializer is :func:`sidecar._lifeline.init_worker` (the pool spawns its workers on
``submit``, from the event-loop thread, which lives as long as the service). multiprocessing's
resource tracker then exits by itself: it stops once every process holding its pipe (the
service and its workers) is gone.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
import structlog

from health.compact import CompactDigest, compact_digest
from health.contract import check_trajectory
from health.digest import TrajectoryCheck, digest_record_with_trajectory
from sidecar._lifeline import init_worker
from sidecar.events import dump_row
from sidecar.raw_rows import RawRow
from sidecar.rollout_perf import NG_TRAJECTORY_KEY, ng_perf_for_trajectory

__all__ = ["Prepared", "Preparer", "prepare_row", "rebase_digest"]

_log = structlog.get_logger("sidecar.prepare")
_LINE_LOCATOR = b'"line":'


@dataclass(frozen=True, slots=True)
class Prepared:
    """A row's compact digest (position 0), its ``ng_perf``, and the run settings it was made with."""

    digest: CompactDigest
    ng_perf: dict[str, Any] | None
    source_path: str
    ignored_checks: frozenset[str]


def prepare_row(
    row_bytes: bytes, source_path: str, ignored_checks: frozenset[str], latency_ms: float | None
) -> Prepared:
    """Digest and ``ng_perf`` of one serialized row (runs in a worker process).

    Both need the row's validated ``ng_trajectory``: the digest step validates it once and
    hands the outcome back, so ``ng_perf`` (equal to ``build_ng_perf``) does not validate again.
    """
    row = orjson.loads(row_bytes)
    digest, checked = digest_record_with_trajectory(
        row, source_path=source_path, line_number=0, ordinal=0, ignored_checks=ignored_checks
    )
    return Prepared(compact_digest(digest), _ng_perf(row, checked, latency_ms), source_path, ignored_checks)


def _ng_perf(row: Any, checked: TrajectoryCheck | None, latency_ms: float | None) -> dict[str, Any] | None:
    """``build_ng_perf(row, latency_ms)`` from the digest's validation ``checked`` (``None``: not done)."""
    raw = row.get(NG_TRAJECTORY_KEY) if isinstance(row, dict) else None
    if not isinstance(raw, dict):
        return None
    if checked is None:  # the digest stopped before validating (invalid identity)
        checked = check_trajectory(raw)
    trajectory = checked[0]
    return None if trajectory is None else ng_perf_for_trajectory(trajectory, latency_ms)


def rebase_digest(digest: Any, ordinal: int) -> Any | None:
    """The prepared digest at input position ``ordinal``, or ``None`` if it must be recomputed."""
    if not isinstance(digest, CompactDigest) or _LINE_LOCATOR in digest.findings:
        return None
    return digest._replace(ordinal=ordinal)


def _warm() -> None:
    """Import and exercise the pipeline once in a new worker, so its first row is not slow."""
    prepare_row(b'{"_ng_task_index": 0}', "", frozenset(), None)


class Preparer:
    """A process pool for :func:`prepare_row`; falls back to inline work if the pool breaks."""

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("spawn")  # the service has threads: never fork it
        self.workers = workers
        self.prepared = 0
        self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=init_worker,
            initargs=(os.getpid(), f"{__name__}:_warm"),
        )

    async def prepare(
        self,
        row: dict[str, Any] | RawRow,
        source_path: str,
        ignored_checks: frozenset[str],
        latency_ms: float | None,
    ) -> Prepared | None:
        """The prepared row, or ``None`` (compute inline): position-dependent row, or no pool."""
        if self._pool is None or "_ng_task_index" not in row:
            return None
        data = row.data if isinstance(row, RawRow) else dump_row(row)
        work = partial(prepare_row, data, source_path, ignored_checks, latency_ms)
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._pool, work)
            self.prepared += 1
            return result
        except (BrokenProcessPool, OSError) as exc:
            _log.warning("worker pool failed; preparing rows inline from now on", error=type(exc).__name__)
            self.close()
        except Exception as exc:  # the inline path recomputes, and logs, whatever went wrong
            _log.warning("preparing a row failed; computing it inline", error=type(exc).__name__)
        return None

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
