"""The run-level reducer: duplicate identities, task reduction, summary, rows.

One :class:`HealthReducer` serves both callers. The batch runner feeds it every digest of
a run, in whatever order its workers finish; the live service keeps one per run and feeds
digests as rollouts complete. Either way the summary and rows can be produced at any
moment and equal what a batch run over the same digests writes.

Resident state is one :class:`~health.compact.CompactDigest` per rollout, the task groups
(a task's only digest, or the list of them) and running totals. Identities are not indexed
per rollout: two digests can only share an identity within one task group, so a new digest
is compared with its group's members (a large group gets an identity index of its own), and
only identities seen twice or more are counted.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from sortedcontainers import SortedKeyList

from .compact import (
    CAPTURE_OBSERVED,
    DUPLICATE_CHECK_POS,
    ENDED_ON_ERROR,
    POLICY_CALLS_OBSERVED,
    VERDICTS,
    CompactDigest,
    compact_digest,
    expand_digest,
)
from .ignored import normalize_ignored_checks
from .registry import CHECK_IDS, ROLLOUT_CHECK_IDS, TASK_CHECK_IDS
from .report import render_rows, render_summary, row_sort_key, task_sort_key, write_reports
from .tasks import RepeatInput, TaskOutcome, reduce_task, task_findings
from .types import Finding, RolloutDigest, TaskIndex

__all__ = ["HealthReducer", "release_gradually"]

_Identity = tuple[TaskIndex | None, TaskIndex, TaskIndex]
_Group = CompactDigest | list[CompactDigest]
_INDEXED_GROUP = 32
"""A task group this large gets an identity index instead of a linear scan per new member."""
_ROLLOUT_POS = {check: pos for pos, check in enumerate(ROLLOUT_CHECK_IDS)}
_DUPLICATE_CHECK = "rollout_duplicate_identity"
_TOKEN_KEYS = ("prompt", "completion", "capture_prompt", "capture_completion")


def release_gradually(mapping: dict[Any, Any]) -> None:
    """Empty a large map entry by entry.

    Dropping a map of 100k small entries at once frees them all in one C-level cascade that
    holds the interpreter lock for tens of ms (the event loop waits meanwhile); one entry per
    step lets other threads in between.
    """
    popitem = mapping.popitem
    while mapping:
        popitem()


def _new_task_order() -> SortedKeyList:
    return SortedKeyList(key=task_sort_key)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic collector around a burst of allocations over the whole run's digests.

    The digests (tuples of plain values) hold no cycles, but every generation-2 pass re-scans
    all of them; sorting or summarizing 100k rollouts would trigger several such passes.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _same(a: object, b: object) -> bool:
    """Key equality as a ``dict`` applies it (identity first, then ``==``)."""
    return a is b or a == b


_as_digest = partial(tuple.__new__, CompactDigest)
"""A plain tuple of digest fields as a ``CompactDigest`` (C-level: no Python frame per call)."""


@lru_cache(maxsize=4096)
def _mask_positions(mask: int) -> tuple[int, ...]:
    return tuple(pos for pos in range(len(ROLLOUT_CHECK_IDS)) if mask >> pos & 1)


class HealthReducer:
    """Accumulates rollout digests and renders the run's reports on demand.

    Digests may arrive in any order; ``ordinal`` (input position) restores input order
    wherever it matters. Adding a digest to a task that was already closed simply
    re-opens it: task outcomes are always recomputed from the current digests.
    """

    def __init__(self, ignored_checks: str | Iterable[str] | None = ()) -> None:
        self.ignored_checks: frozenset[str] = frozenset(normalize_ignored_checks(ignored_checks))
        self._check_duplicates = _DUPLICATE_CHECK not in self.ignored_checks
        self._entries: list[CompactDigest] = []
        self._duplicates: dict[_Identity, int] = {}
        """Count of every identity claimed by two or more digests (the others are not indexed)."""
        self._tasks: dict[TaskIndex, _Group] = {}
        self._group_index: dict[TaskIndex, dict[tuple[TaskIndex | None, TaskIndex], int]] = {}
        """``(stage, rollout) -> count`` of each task group of ``_INDEXED_GROUP`` members or more."""
        self._captures = 0
        self._unobserved = [0] * len(ROLLOUT_CHECK_IDS)
        self._issues = [0] * len(CHECK_IDS)
        self._errors_total = 0
        self._errors_by_status: dict[str, int] = {}
        self._rollouts_affected = 0
        self._ended_on_error = 0
        self._replayed = 0
        self._replay_rollouts = 0
        self._tokens = [0, 0, 0, 0]
        self._task_order = _new_task_order()
        """Task indexes in ``tasks`` map order, kept up to date by ``_ordered_tasks``."""

    def __len__(self) -> int:
        return len(self._entries)

    def __getstate__(self) -> dict[str, Any]:
        """Digests as plain tuples and task groups as positions into them: a snapshot of a
        million rollouts then loads without a Python-level constructor call per digest."""
        state = dict(self.__dict__)
        # The map-order index is derived (rebuilt by the first summary after a load), and a
        # snapshot's unpickler admits only the project's own classes.
        state.pop("_task_order", None)
        entries = self._entries
        position = {id(digest): index for index, digest in enumerate(entries)}
        state["_entries"] = [tuple(digest) for digest in entries]
        state["_tasks"] = {
            task: [position[id(member)] for member in group]
            if isinstance(group, list)
            else position[id(group)]
            for task, group in self._tasks.items()
        }
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        entries: list[CompactDigest] = list(map(_as_digest, state["_entries"]))
        state["_entries"] = entries
        state["_tasks"] = {
            task: [entries[index] for index in group] if isinstance(group, list) else entries[group]
            for task, group in state["_tasks"].items()
        }
        self.__dict__.update(state)

    def add(self, digest: RolloutDigest) -> None:
        """Take one rollout's digest (preliminary verdict, before the duplicate pass)."""
        self.add_compact(compact_digest(digest))

    def add_compact(self, digest: CompactDigest) -> None:
        """Same as :meth:`add`, for a digest already packed by :func:`~health.compact.compact_digest`."""
        self._entries.append(digest)
        self._join_task(digest)
        if digest.flags & CAPTURE_OBSERVED:
            self._captures += 1
        if isinstance(digest.unobserved, int):
            for pos in _mask_positions(digest.unobserved):
                self._unobserved[pos] += 1
        else:
            for check in set(digest.unobserved):
                if check in _ROLLOUT_POS:
                    self._unobserved[_ROLLOUT_POS[check]] += 1
        for pos in digest.finding_checks:
            if pos >= 0:
                self._issues[pos] += 1
        if digest.model_call_errors:
            self._errors_total += digest.model_call_errors
            self._rollouts_affected += 1
        for status, count in digest.errors_by_status:
            self._errors_by_status[status] = self._errors_by_status.get(status, 0) + count
        if digest.flags & ENDED_ON_ERROR:
            self._ended_on_error += 1
        if digest.duplicated_calls:
            self._replayed += digest.duplicated_calls
            self._replay_rollouts += 1
        tokens = self._tokens
        tokens[0] += digest.transcript_prompt_tokens
        tokens[1] += digest.transcript_completion_tokens
        tokens[2] += digest.capture_prompt_tokens
        tokens[3] += digest.capture_completion_tokens

    def _join_task(self, digest: CompactDigest) -> None:
        """Add ``digest`` to its task group and count its identity if another digest claims it."""
        task = digest.task_index
        group = self._tasks.get(task)
        if group is None:
            self._tasks[task] = digest
            return
        if isinstance(group, list):
            members = group
            members.append(digest)
        else:
            members = self._tasks[task] = [group, digest]
        stage, rollout = digest.stage_index, digest.rollout_index
        index = self._group_index.get(task)
        if index is not None:
            before = index.get((stage, rollout), 0)
            index[(stage, rollout)] = before + 1
        else:
            before = 0
            for member in members[:-1]:
                if _same(member.rollout_index, rollout) and _same(member.stage_index, stage):
                    before += 1
            if len(members) >= _INDEXED_GROUP:
                index = self._group_index[task] = {}
                for member in members:
                    key = (member.stage_index, member.rollout_index)
                    index[key] = index.get(key, 0) + 1
        if before:
            self._duplicates[(stage, task, rollout)] = before + 1

    def extend(self, digests: Iterable[CompactDigest]) -> None:
        """Add many packed digests."""
        for digest in digests:
            self.add_compact(digest)

    def _duplicate_count(self, digest: CompactDigest) -> int:
        if not self._check_duplicates or not self._duplicates:
            return 0
        return self._duplicates.get((digest.stage_index, digest.task_index, digest.rollout_index), 0)

    def _task_outcome(self, task_index: TaskIndex, group: _Group) -> TaskOutcome:
        # Runs for every task of every summary, so the duplicate lookup is inlined.
        duplicates = self._duplicates if self._check_duplicates else None
        members = []
        for digest in group if isinstance(group, list) else (group,):
            verdict = digest.verdict
            if duplicates and duplicates.get((digest.stage_index, digest.task_index, digest.rollout_index)):
                verdict = 1
            members.append(
                RepeatInput(
                    digest.rollout_index,
                    VERDICTS[verdict],
                    bool(digest.flags & POLICY_CALLS_OBSERVED),
                    digest.successful_model_calls,
                )
            )
        return reduce_task(task_index, members, self.ignored_checks)

    def close_task(self, task_index: TaskIndex) -> list[Finding]:
        """Task-level findings for ``task_index`` given the digests seen so far (empty if unknown)."""
        group = self._tasks.get(task_index)
        if group is None:
            return []
        return task_findings(self._task_outcome(task_index, group))

    def task_outcomes(self) -> list[TaskOutcome]:
        """Every task group's outcome, in first-seen order."""
        return [self._task_outcome(task, group) for task, group in self._tasks.items()]

    def summary(self) -> dict[str, Any]:
        """``quality_summary.json`` content as if the run ended now (fields in docs/report.md)."""
        with _gc_paused():
            return self._summary()

    def _summary(self) -> dict[str, Any]:
        records = len(self._entries)
        verdicts = [0, 0, 0]
        duplicate_findings = 0
        duplicates = self._duplicates if self._check_duplicates else None
        for digest in self._entries:
            if duplicates and duplicates.get((digest.stage_index, digest.task_index, digest.rollout_index)):
                verdicts[1] += 1
                duplicate_findings += 1
            else:
                verdicts[digest.verdict] += 1
        outcomes = self.task_outcomes()
        issues = list(self._issues)
        issues[DUPLICATE_CHECK_POS] += duplicate_findings
        task_coverage = {check: {"evaluated": 0, "unobserved": 0, "ignored": 0} for check in TASK_CHECK_IDS}
        for outcome in outcomes:
            task_coverage["task_consistently_unhealthy"][outcome.consistently_unhealthy] += 1
            task_coverage["task_no_successful_model_calls"][outcome.no_successful_calls] += 1
            for flag in outcome.flags:
                issues[CHECK_IDS.index(flag)] += 1
        coverage: dict[str, dict[str, int]] = {}
        for pos, check in enumerate(ROLLOUT_CHECK_IDS):
            if check in self.ignored_checks:
                coverage[check] = {"evaluated": 0, "unobserved": 0, "ignored": records}
            else:
                unobserved = self._unobserved[pos]
                coverage[check] = {"evaluated": records - unobserved, "unobserved": unobserved, "ignored": 0}
        coverage.update(task_coverage)
        tasks: dict[str, dict[str, Any]] = {}
        by_task = {outcome.task_index: outcome for outcome in outcomes}
        del outcomes
        for outcome in map(by_task.__getitem__, self._ordered_tasks()):
            tasks[str(outcome.task_index)] = {
                "repeats": outcome.repeats,
                "healthy": outcome.healthy,
                "unhealthy": outcome.unhealthy,
                "unobserved": outcome.unobserved,
                "flags": list(outcome.flags),
            }
        release_gradually(by_task)
        return {
            "run": {
                "ignored_checks": sorted(self.ignored_checks),
                "artifacts": {"records": records, "captures": self._captures, "coverage": coverage},
                "verdicts": dict(zip(VERDICTS, verdicts, strict=True)),
                "issues": dict(zip(CHECK_IDS, issues, strict=True)),
                "stats": {
                    "model_call_errors": {
                        "total": self._errors_total,
                        "by_status": dict(sorted(self._errors_by_status.items())),
                        "rollouts_affected": self._rollouts_affected,
                        "ended_on_error": self._ended_on_error,
                    },
                    "duplicated_calls": {"replayed": self._replayed, "rollouts": self._replay_rollouts},
                    "tokens": dict(zip(_TOKEN_KEYS, self._tokens, strict=True)),
                },
            },
            "tasks": tasks,
        }

    def _ordered_tasks(self) -> SortedKeyList:
        """Every task index in ``tasks`` map order, without sorting them all on each summary.

        Tasks are only ever added, so the ones first seen since the last call are inserted one at
        a time (a whole sort of 100k keys would hold the interpreter lock for tens of ms); equal
        keys keep first-seen order, as a stable sort keeps them.
        """
        order: SortedKeyList | None = getattr(self, "_task_order", None)
        if order is None:  # a reducer restored from a state that did not carry it
            order = self._task_order = _new_task_order()
        if len(order) < len(self._tasks):
            add = order.add
            for task in itertools.islice(self._tasks, len(order), None):
                add(task)
        return order

    def summary_bytes(self) -> bytes:
        """Exact ``quality_summary.json`` content (no trailing newline)."""
        summary = self.summary()
        try:
            return render_summary(summary)
        finally:
            release_gradually(summary["tasks"])

    def iter_verdict_lines(self) -> Iterator[bytes]:
        """Exact ``rollout_verdicts.jsonl`` lines, newline included, in report order (task,
        rollout, stage, input order)."""
        with _gc_paused():
            ordered = sorted(self._entries, key=row_sort_key)
        yield from render_rows(ordered, self._duplicate_count)

    def compact_digests(self) -> list[CompactDigest]:
        """The packed digests in input (ordinal) order, before the duplicate pass."""
        return sorted(self._entries, key=lambda digest: digest.ordinal)

    def digests(self) -> list[RolloutDigest]:
        """Post-duplicate digests in input (ordinal) order, as ``HealthCheckResult.rollouts`` holds them."""
        with _gc_paused():
            return [expand_digest(digest, self._duplicate_count(digest)) for digest in self.compact_digests()]

    def write(self, output_dir: str | Path) -> tuple[Path, Path]:
        """Write ``quality_summary.json``, then ``rollout_verdicts.jsonl``, into ``output_dir``."""
        return write_reports(Path(output_dir), self.summary_bytes(), self.iter_verdict_lines())
