"""Simulated dispatch: which row finishes when, with retries, drains and re-written rows.

Rows are emitted in completion order of a dispatcher running ``concurrency`` rollouts at once
(so repeats of a task interleave). Failed attempts are re-dispatched after the first pass, the
way a resumed run appends to the same files, with ``_ng_attempt_index`` counting prior failures.
Each row's content depends only on ``(seed, identity)`` and its start time, never on the rest of
the schedule.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from ._assemble import assemble_row
from ._config import SyntheticConfig
from ._durations import sample_task_seconds
from ._failures import drained_row, failure_row
from ._rollout import build_rollout, task_question

__all__ = ["EventKind", "RolloutEvent", "generate_events", "rollout_event"]

JSON = dict[str, Any]
EventKind = Literal["result", "failure", "drained", "unreadable"]
_DRAIN_MARGIN_S: Final = 157.0


@dataclass(frozen=True, slots=True)
class RolloutEvent:
    """One finished dispatch as the collector sees it."""

    kind: EventKind
    task_index: int
    rollout_index: int
    attempt_index: int
    row: JSON | None
    """The row (stamped keys included); ``None`` for a torn ``unreadable`` line."""
    line: bytes | None
    """For ``unreadable`` events, the exact bytes written (newline included)."""
    fault: str | None
    """The injected fault (a ``FaultRates`` field or ``broken_task``); ``None``: healthy or a failure."""
    started_at: float | None
    """Wall-clock dispatch time; ``None`` for drained rows, which never start."""
    finished_at: float

    @property
    def latency_seconds(self) -> float | None:
        """Dispatch-to-finish seconds (what the latency tracker records)."""
        return None if self.started_at is None else self.finished_at - self.started_at

    def to_line(self) -> bytes:
        """The JSONL line the collector writes for this event (drained rows are never written)."""
        if self.line is not None:
            return self.line
        return orjson.dumps(self.row) + b"\n"


@dataclass(frozen=True, slots=True)
class _Job:
    task_index: int
    rollout_index: int
    attempt_index: int = 0
    copy: int = 0


@dataclass(slots=True)
class _Running:
    job: _Job
    rng: random.Random
    started_at: float
    failed: bool
    terminal: bool


def _pick_fault(rng: random.Random, table: tuple[tuple[str, float], ...]) -> str | None:
    roll = rng.random()
    for name, rate in table:
        if roll < rate:
            return name
        roll -= rate
    return None


def _task_is_broken(config: SyntheticConfig, seed: int, task_index: int) -> bool:
    if config.broken_task_fraction <= 0.0:
        return False
    return random.Random(f"broken:{seed}:{task_index}").random() < config.broken_task_fraction


def _dispatch(config: SyntheticConfig, seed: int, job: _Job, now: float) -> tuple[_Running, float]:
    """Start ``job`` at ``now``: its own random stream decides its duration and whether it fails."""
    rng = random.Random(f"row:{seed}:{job.task_index}:{job.rollout_index}:{job.attempt_index}:{job.copy}")
    seconds = sample_task_seconds(rng)
    failed = job.copy == 0 and rng.random() < config.failure_rate
    terminal = failed and rng.random() < config.terminal_failure_fraction
    return _Running(job, rng, now, failed, terminal), now + seconds


def _finish(
    config: SyntheticConfig, seed: int, table: tuple[tuple[str, float], ...], running: _Running, now: float
) -> RolloutEvent:
    job, rng = running.job, running.rng
    identity = (job.task_index, job.rollout_index, job.attempt_index)
    if running.failed:
        row = failure_row(rng, config, identity, now - running.started_at, running.terminal)
        return RolloutEvent("failure", *identity, row, None, None, running.started_at, now)
    if job.copy:
        fault: str | None = "duplicate_identity"
    elif _task_is_broken(config, seed, job.task_index):
        fault = "broken_task"
    else:
        fault = _pick_fault(rng, table)
    question = task_question(seed, job.task_index, config.text_scale)
    built = build_rollout(rng, config, question, identity, (running.started_at, now), fault)
    row = assemble_row(built, config, question, identity, now, fault, rng)
    if fault == "unreadable_line":
        data = orjson.dumps(row)
        torn = data[: rng.randrange(len(data) // 4, 3 * len(data) // 4)] + b"\n"
        return RolloutEvent("unreadable", *identity, None, torn, fault, running.started_at, now)
    return RolloutEvent("result", *identity, row, None, fault, running.started_at, now)


def generate_events(config: SyntheticConfig, seed: int) -> Iterator[RolloutEvent]:
    """Every finished dispatch of a simulated run, in completion order (deterministic in ``seed``)."""
    total = config.num_rollouts
    drain_from = total - round(config.drained_fraction * total)
    originals = (_Job(t, r) for t in range(config.num_tasks) for r in range(config.repeats_per_task))
    dispatched = 0
    retries: deque[_Job] = deque()
    heap: list[tuple[float, int, _Running]] = []
    now, seq = config.start_time, 0
    drain_rng = random.Random(f"drain:{seed}")
    table = config.faults.items()
    while True:
        while len(heap) < config.concurrency:
            job = next(originals, None)
            if job is not None:
                dispatched += 1
                if dispatched > drain_from:
                    identity = (job.task_index, job.rollout_index, job.attempt_index)
                    remaining = drain_rng.uniform(-20.0, _DRAIN_MARGIN_S)
                    row = drained_row(config, identity, remaining, _DRAIN_MARGIN_S)
                    yield RolloutEvent("drained", *identity, row, None, None, None, now)
                    retries.append(job)
                    continue
            elif retries:
                job = retries.popleft()
            else:
                break
            running, finish_at = _dispatch(config, seed, job, now)
            heapq.heappush(heap, (finish_at, seq, running))
            seq += 1
        if not heap:
            return
        now, _, running = heapq.heappop(heap)
        event = _finish(config, seed, table, running, now)
        yield event
        job = running.job
        if running.failed and not running.terminal and job.attempt_index + 1 < config.max_attempts:
            retries.append(_Job(job.task_index, job.rollout_index, job.attempt_index + 1))
        elif event.fault == "duplicate_identity" and job.copy == 0:
            retries.append(_Job(job.task_index, job.rollout_index, job.attempt_index, copy=1))


def rollout_event(
    config: SyntheticConfig,
    seed: int,
    task_index: int,
    rollout_index: int,
    attempt_index: int = 0,
    *,
    started_at: float | None = None,
) -> RolloutEvent:
    """One dispatch attempt on its own, as ``generate_events`` would produce it.

    Apart from timestamps (shifted to ``started_at``, default ``config.start_time``), the row is
    the one the simulated run holds for this attempt. A fake agent server can sleep for
    ``latency_seconds`` and reply with ``row``.
    """
    job = _Job(task_index, rollout_index, attempt_index)
    start = config.start_time if started_at is None else started_at
    running, finish_at = _dispatch(config, seed, job, start)
    return _finish(config, seed, config.faults.items(), running, finish_at)
