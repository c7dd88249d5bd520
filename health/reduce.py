"""The run-level reducer: duplicate identities, task reduction, summary, rows.

The batch runner and the live service (one per run) feed it digests in any order; the reports
it renders at any moment equal a batch run's over the same digests. Two digests can only share
an identity within one task group, so identities are compared per group, not indexed per rollout.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from sortedcontainers import SortedKeyList

from .check_terms import TaskIndex
from .compact import (
    CAPTURE_OBSERVED,
    DUPLICATE_CHECK_POS,
    ENDED_ON_ERROR,
    UNHEALTHY,
    VERDICTS,
    CompactDigest,
    compact_digest,
    expand_digest,
)
from .groups import DECODER, Group, Identity, mask_positions, pack, packed_append, tally_group
from .groups import members as group_digests
from .ignored import normalize_ignored_checks
from .process_tuning import collector_paused, yield_point
from .registry import CHECK_IDS, ROLLOUT_CHECK_IDS, TASK_CHECK_IDS
from .report import (
    RowRenderer,
    index_sort_part,
    render_summary,
    row_sort_key,
    task_sort_key,
)
from .tasks import (
    RepeatTally,
    TaskChecks,
    TaskOutcome,
    judge_task,
    task_checks,
    task_findings,
)

if TYPE_CHECKING:
    from .types import Finding, RolloutDigest

__all__ = ["GroupStore", "HealthReducer", "release_gradually"]


class GroupStore(Protocol):
    """Where a reducer puts the packed digests of closed task groups (see ``HealthReducer.spill``)."""

    def put(self, blob: bytes) -> int:
        """Keep ``blob``; returns the reference ``get`` takes."""
        ...

    def get(self, reference: int) -> bytes:
        """The blob ``put`` returned ``reference`` for."""
        ...


_INDEXED_GROUP = 32
"""A task group this large gets an identity index instead of a linear scan per new member."""
_STEP_MASK = 255
"""Long loops over every task call :func:`yield_point` every 256 steps."""
_ROLLOUT_POS = {check: pos for pos, check in enumerate(ROLLOUT_CHECK_IDS)}
_DUPLICATE_CHECK = "rollout_duplicate_identity"


@dataclass(slots=True)
class _TokenTotals:
    """Token counts summed over every digest, in ``stats.tokens`` order."""

    prompt: int = 0
    completion: int = 0
    capture_prompt: int = 0
    capture_completion: int = 0

    def add(self, digest: CompactDigest) -> None:
        self.prompt += digest.transcript_prompt_tokens
        self.completion += digest.transcript_completion_tokens
        self.capture_prompt += digest.capture_prompt_tokens
        self.capture_completion += digest.capture_completion_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt": self.prompt,
            "completion": self.completion,
            "capture_prompt": self.capture_prompt,
            "capture_completion": self.capture_completion,
        }


@dataclass(slots=True)
class _ErrorTotals:
    """Model-call error and replayed-call statistics summed over every digest."""

    total: int = 0
    rollouts_affected: int = 0
    ended_on_error: int = 0
    replayed: int = 0
    replay_rollouts: int = 0

    def add(self, digest: CompactDigest) -> None:
        if digest.model_call_errors:
            self.total += digest.model_call_errors
            self.rollouts_affected += 1
        if digest.flags & ENDED_ON_ERROR:
            self.ended_on_error += 1
        if digest.duplicated_calls:
            self.replayed += digest.duplicated_calls
            self.replay_rollouts += 1


def release_gradually(mapping: dict[Any, Any]) -> None:
    """Empty a large map entry by entry: dropping 100k entries at once holds the interpreter
    lock for tens of ms (the event loop waits); one entry per step lets other threads in."""
    popitem = mapping.popitem
    while mapping:
        popitem()
        if not len(mapping) & _STEP_MASK:
            yield_point()


def _new_task_order() -> SortedKeyList:
    return SortedKeyList(key=task_sort_key)


def _same(a: object, b: object) -> bool:
    """Key equality as a ``dict`` applies it (identity first, then ``==``)."""
    return a is b or a == b


def _sized(values: list[Any], size: int, what: str) -> list[int]:
    if len(values) != size:
        raise ValueError(f"reducer snapshot: {len(values)} {what} counts, expected {size}")
    return [int(value) for value in values]


def _digest_from_list(fields: list[Any]) -> CompactDigest:
    """A compact digest from its fields as MessagePack gave them back (arrays as lists)."""
    digest = CompactDigest(*fields)
    return digest._replace(
        finding_checks=tuple(digest.finding_checks),
        unobserved=digest.unobserved if isinstance(digest.unobserved, int) else tuple(digest.unobserved),
        errors_by_status=tuple((status, count) for status, count in digest.errors_by_status),
    )


class HealthReducer:
    """Accumulates rollout digests (any order; ``ordinal`` restores input order) and renders the
    run's reports on demand; a digest for a closed task re-opens it."""

    def __init__(self, ignored_checks: str | Iterable[str] | None = (), *, packed: bool = False) -> None:
        """``packed`` holds each task group as one MessagePack blob (tens of bytes a digest instead
        of hundreds): for a long-lived reducer, where memory matters more than decoding."""
        self.ignored_checks: frozenset[str] = frozenset(normalize_ignored_checks(ignored_checks))
        self._check_duplicates = _DUPLICATE_CHECK not in self.ignored_checks
        self._packed = packed
        self._count = 0
        self._verdict_counts = [0] * len(VERDICTS)
        """Digests per preliminary verdict (before the duplicate pass), indexed by verdict code."""
        self._duplicates: dict[Identity, int] = {}
        """Count of every identity claimed by two or more digests (the others are not indexed)."""
        self._tasks: dict[TaskIndex, Group] = {}
        self._group_index: dict[TaskIndex, dict[tuple[TaskIndex | None, TaskIndex], int]] = {}
        """``(stage, rollout) -> count`` of each task group of ``_INDEXED_GROUP`` members or more."""
        self._captures = 0
        self._unobserved = [0] * len(ROLLOUT_CHECK_IDS)
        """Digests leaving each rollout check unobserved, by ``ROLLOUT_CHECK_IDS`` position."""
        self._issues = [0] * len(CHECK_IDS)
        """Findings per check, by ``CHECK_IDS`` position."""
        self._errors = _ErrorTotals()
        self._errors_by_status: dict[str, int] = {}
        self._tokens = _TokenTotals()
        self._task_order = _new_task_order()
        """Task indexes in ``tasks`` map order, kept up to date by ``_ordered_tasks``."""
        self._store: GroupStore | None = None

    def __len__(self) -> int:
        return self._count

    def to_snapshot(self) -> dict[str, Any]:
        """Plain values for a state snapshot (the store is re-attached by :meth:`spill_to`)."""
        groups: list[list[Any]] = []
        for task, group in self._tasks.items():
            if type(group) is int:
                groups.append([task, 0, group])
                continue
            members = self._group_members(group)
            blob = pack(members)
            groups.append([task, 1, blob] if blob is not None else [task, 2, [list(d) for d in members]])
        return {
            "ignored": sorted(self.ignored_checks),
            "packed": self._packed,
            "count": self._count,
            "verdicts": self._verdict_counts,
            "duplicates": [[*identity, count] for identity, count in self._duplicates.items()],
            "groups": groups,
            "index": [
                [task, [[stage, rollout, count] for (stage, rollout), count in index.items()]]
                for task, index in self._group_index.items()
            ],
            "captures": self._captures,
            "unobserved": self._unobserved,
            "issues": self._issues,
            "errors": [getattr(self._errors, name) for name in _ErrorTotals.__slots__],
            "errors_by_status": self._errors_by_status,
            "tokens": [getattr(self._tokens, name) for name in _TokenTotals.__slots__],
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> HealthReducer:
        """The reducer :meth:`to_snapshot` described; raises ``ValueError``/``TypeError`` on a wrong shape."""
        reducer = cls(data["ignored"], packed=bool(data["packed"]))
        reducer._count = int(data["count"])
        reducer._verdict_counts = _sized(data["verdicts"], len(VERDICTS), "verdicts")
        reducer._duplicates = {
            (stage, task, rollout): count for stage, task, rollout, count in data["duplicates"]
        }
        for task, form, value in data["groups"]:
            group: Any
            if form == 0:
                group = int(value)
            elif form == 1:
                members = DECODER.decode(value)
                group = value if reducer._packed else (members[0] if len(members) == 1 else members)
            else:
                group = [_digest_from_list(fields) for fields in value]
            reducer._tasks[task] = group
        reducer._group_index = {
            task: {(stage, rollout): count for stage, rollout, count in index}
            for task, index in data["index"]
        }
        reducer._captures = int(data["captures"])
        reducer._unobserved = _sized(data["unobserved"], len(ROLLOUT_CHECK_IDS), "unobserved")
        reducer._issues = _sized(data["issues"], len(CHECK_IDS), "issues")
        reducer._errors = _ErrorTotals(*data["errors"])
        reducer._errors_by_status = {
            str(status): int(count) for status, count in data["errors_by_status"].items()
        }
        reducer._tokens = _TokenTotals(*data["tokens"])
        return reducer

    def cut(self) -> HealthReducer:
        """A frozen copy, in C-level copies, to build a report from on another thread while ingest
        goes on. Only for a packed reducer, whose task groups are never changed in place."""
        if not self._packed:
            raise ValueError("only a packed reducer can be cut")
        copy = HealthReducer.__new__(HealthReducer)
        copy.__dict__.update(self.__dict__)
        copy._verdict_counts = list(self._verdict_counts)
        copy._duplicates = dict(self._duplicates)
        copy._tasks = dict(self._tasks)
        copy._group_index = {}  # only adding reads it
        copy._unobserved = list(self._unobserved)
        copy._issues = list(self._issues)
        copy._errors = dataclasses.replace(self._errors)
        copy._errors_by_status = dict(self._errors_by_status)
        copy._tokens = dataclasses.replace(self._tokens)
        copy._task_order = _new_task_order()
        return copy

    # -- closed groups on disk ----------------------------------------------------------------

    def spill_to(self, store: GroupStore) -> None:
        """Let :meth:`spill` move closed task groups to ``store`` (and read spilled ones back)."""
        self._store = store

    def spill(self, task_index: TaskIndex) -> bool:
        """Move ``task_index``'s group to the store, keeping its reference; False where it stays
        (no store, unknown or spilled task, a digest MessagePack cannot hold exactly)."""
        store = self._store
        group = self._tasks.get(task_index)
        if store is None or group is None or type(group) is int:
            return False
        blob = group if type(group) is bytes else pack(group_digests(group))
        if blob is None:
            return False
        self._tasks[task_index] = store.put(blob)
        return True

    def _group_members(self, group: Group) -> list[CompactDigest]:
        """Any task group's digests, in arrival order (a spilled one read from the store); a new list."""
        if type(group) is list and not self._packed:  # an unpacked group holds digests only
            return cast("list[CompactDigest]", group.copy())
        if type(group) is int:
            if self._store is None:
                raise RuntimeError("a spilled task group needs the reducer's store (spill_to)")
            return DECODER.decode(self._store.get(group))
        return group_digests(group)

    def _reopen(self, task: TaskIndex, reference: int) -> Group:
        """Bring a spilled group back into memory (a digest arrived for a closed task)."""
        assert self._store is not None
        blob = self._store.get(reference)
        group: Group = blob if self._packed else list(DECODER.decode(blob))
        self._tasks[task] = group
        return group

    def add(self, digest: RolloutDigest) -> None:
        """Take one rollout's digest (preliminary verdict, before the duplicate pass)."""
        self.add_compact(compact_digest(digest))

    def add_compact(self, digest: CompactDigest) -> None:
        """Same as :meth:`add`, for a digest already packed by :func:`~health.compact.compact_digest`."""
        self._count += 1
        self._join_task(digest)
        self._verdict_counts[digest.verdict] += 1
        if digest.flags & CAPTURE_OBSERVED:
            self._captures += 1
        if digest.unobserved:  # most rollouts leave every check observed
            self._count_unobserved(digest.unobserved)
        for pos in digest.finding_checks:
            if pos >= 0:
                self._issues[pos] += 1
        self._errors.add(digest)
        for status, count in digest.errors_by_status:
            self._errors_by_status[status] = self._errors_by_status.get(status, 0) + count
        self._tokens.add(digest)

    def _count_unobserved(self, unobserved: int | tuple[str, ...]) -> None:
        counts = self._unobserved
        if isinstance(unobserved, int):
            for pos in mask_positions(unobserved):
                counts[pos] += 1
        else:
            for check in set(unobserved):
                if check in _ROLLOUT_POS:
                    counts[_ROLLOUT_POS[check]] += 1

    def extend(self, digests: Iterable[CompactDigest]) -> None:
        """:meth:`add_compact` for each digest, the batch run's road: counts and sums run in C over
        the batch's columns; only task groups and rare non-empty fields are walked in Python."""
        batch = digests if type(digests) is list else list(digests)
        if not batch:
            return
        join_task = self._join_task
        for digest in batch:
            join_task(digest)
        (
            _ordinal,
            _task,
            _rollout,
            _stage,
            _rollout_id,
            verdicts,
            _findings,
            finding_checks,
            unobserved,
            flags,
            _calls,
            _successful,
            call_errors,
            errors_by_status,
            duplicated_calls,
            prompt,
            completion,
            capture_prompt,
            capture_completion,
        ) = zip(*batch, strict=True)
        rows = len(batch)
        self._count += rows
        counts = self._verdict_counts
        for code in range(len(counts)):
            counts[code] += verdicts.count(code)
        self._captures += sum(map(CAPTURE_OBSERVED.__and__, flags)) // CAPTURE_OBSERVED
        for mask in unobserved:
            if mask:
                self._count_unobserved(mask)
        issues = self._issues
        for positions in finding_checks:
            for pos in positions:
                if pos >= 0:
                    issues[pos] += 1
        errors = self._errors
        errors.total += sum(call_errors)
        errors.rollouts_affected += rows - call_errors.count(0)
        errors.ended_on_error += sum(map(ENDED_ON_ERROR.__and__, flags)) // ENDED_ON_ERROR
        errors.replayed += sum(duplicated_calls)
        errors.replay_rollouts += rows - duplicated_calls.count(0)
        by_status = self._errors_by_status
        for statuses in errors_by_status:
            for status, count in statuses:
                by_status[status] = by_status.get(status, 0) + count
        tokens = self._tokens
        tokens.prompt += sum(prompt)
        tokens.completion += sum(completion)
        tokens.capture_prompt += sum(capture_prompt)
        tokens.capture_completion += sum(capture_completion)

    def _join_task(self, digest: CompactDigest) -> None:
        """Add ``digest`` to its task group and count its identity if another digest claims it."""
        task = digest.task_index
        group = self._tasks.get(task)
        if group is None:
            self._tasks[task] = (self._packed and pack([digest])) or digest
            return
        if type(group) is int:
            group = self._reopen(task, group)
        stage, rollout = digest.stage_index, digest.rollout_index
        index = self._group_index.get(task)
        members = None
        if index is not None:
            before = index.get((stage, rollout), 0)
            index[(stage, rollout)] = before + 1
        else:
            before = 0
            # An unpacked group is its only digest or the list of them (no blob to decode).
            unpacked = type(group) is list and not self._packed
            members = cast("list[CompactDigest]", group) if unpacked else group_digests(group)
            for member in members:  # _same(), inlined: this runs for every digest of a batch run
                member_rollout = member.rollout_index
                if member_rollout is rollout or member_rollout == rollout:
                    member_stage = member.stage_index
                    if member_stage is stage or member_stage == stage:
                        before += 1
            if len(members) + 1 >= _INDEXED_GROUP:
                index = self._group_index[task] = {}
                for member in (*members, digest):
                    key = (member.stage_index, member.rollout_index)
                    index[key] = index.get(key, 0) + 1
        if before:
            self._duplicates[(stage, task, rollout)] = before + 1
        if self._packed:
            self._tasks[task] = packed_append(group, digest, members)
        elif type(group) is list:
            group.append(digest)  # (an unpacked reducer is the batch check's: it is never cut)
        else:
            self._tasks[task] = [group, digest]  # type: ignore[list-item]

    def _duplicate_count(self, digest: CompactDigest) -> int:
        if not self._check_duplicates or not self._duplicates:
            return 0
        return self._duplicates.get((digest.stage_index, digest.task_index, digest.rollout_index), 0)

    def _task_outcome(self, task_index: TaskIndex, group: Group) -> TaskOutcome:
        members = group if type(group) is list and not self._packed else self._group_members(group)
        duplicates = self._duplicates if self._check_duplicates and self._duplicates else None
        tally = tally_group(members, duplicates)  # type: ignore[arg-type]
        return judge_task(task_index, tally, self.ignored_checks)

    def close_task(self, task_index: TaskIndex) -> list[Finding]:
        """Task-level findings for ``task_index`` given the digests seen so far (empty if unknown)."""
        group = self._tasks.get(task_index)
        if group is None:
            return []
        return task_findings(self._task_outcome(task_index, group))

    def task_outcomes(self) -> list[TaskOutcome]:
        """Every task group's outcome, in first-seen order."""
        return [self._task_outcome(task, group) for task, group in self._tasks.items()]

    def rollout_coverage(self) -> dict[str, dict[str, int]]:
        """The rollout checks' ``run.artifacts.coverage`` so far (kept as rows come: cheap)."""
        records = self._count
        coverage: dict[str, dict[str, int]] = {}
        for pos, check in enumerate(ROLLOUT_CHECK_IDS):
            if check in self.ignored_checks:
                coverage[check] = {"evaluated": 0, "unobserved": 0, "ignored": records}
            else:
                unobserved = self._unobserved[pos]
                coverage[check] = {"evaluated": records - unobserved, "unobserved": unobserved, "ignored": 0}
        return coverage

    def summary(self) -> dict[str, Any]:
        """``quality_summary.json`` content as if the run ended now (fields in docs/report.md)."""
        with collector_paused():  # acyclic digests: a full pass would re-scan every one
            return self._summary()

    def _summary(self) -> dict[str, Any]:
        records = self._count
        errors = self._errors
        verdicts, duplicate_findings = self._verdicts_after_duplicates()
        issues = list(self._issues)
        issues[DUPLICATE_CHECK_POS] += duplicate_findings
        tasks, judged = self._task_entries()
        task_coverage = {check: {"evaluated": 0, "unobserved": 0, "ignored": 0} for check in TASK_CHECK_IDS}
        for (consistency, no_success, flags), count in judged.items():
            task_coverage["task_consistently_unhealthy"][consistency] += count
            task_coverage["task_no_successful_model_calls"][no_success] += count
            for flag in flags:
                issues[CHECK_IDS.index(flag)] += count
        coverage = self.rollout_coverage()
        coverage.update(task_coverage)
        return {
            "run": {
                "ignored_checks": sorted(self.ignored_checks),
                "artifacts": {"records": records, "captures": self._captures, "coverage": coverage},
                "verdicts": dict(zip(VERDICTS, verdicts, strict=True)),
                "issues": dict(zip(CHECK_IDS, issues, strict=True)),
                "stats": {
                    "model_call_errors": {
                        "total": errors.total,
                        "by_status": dict(sorted(self._errors_by_status.items())),
                        "rollouts_affected": errors.rollouts_affected,
                        "ended_on_error": errors.ended_on_error,
                    },
                    "duplicated_calls": {"replayed": errors.replayed, "rollouts": errors.replay_rollouts},
                    "tokens": self._tokens.as_dict(),
                },
            },
            "tasks": tasks,
        }

    def _task_entries(self) -> tuple[dict[str, dict[str, Any]], dict[TaskChecks, int]]:
        """The summary's ``tasks`` map and how many tasks reached each task-check outcome; each
        distinct repeat tally is judged once and its entry copied."""
        duplicates = self._duplicates if self._check_duplicates else {}
        duplicated_tasks = {task for _, task, _ in duplicates}
        ignored = self.ignored_checks
        groups = self._tasks
        unpacked = not self._packed
        known: dict[RepeatTally, tuple[dict[str, Any], TaskChecks]] = {}
        tallies: dict[RepeatTally, int] = {}
        entries: dict[str, dict[str, Any]] = {}
        for position, task in enumerate(self._ordered_tasks()):
            if not position & _STEP_MASK:
                yield_point()
            group = groups[task]
            members = group if unpacked and type(group) is not int else self._group_members(group)
            tally = tally_group(members, duplicates if task in duplicated_tasks else None)  # type: ignore[arg-type]
            seen = known.get(tally)
            if seen is None:
                checks = task_checks(tally, ignored)
                repeats, healthy, unhealthy = tally.repeats, tally.healthy, tally.unhealthy
                template: dict[str, Any] = {
                    "repeats": repeats,
                    "healthy": healthy,
                    "unhealthy": unhealthy,
                    "unobserved": repeats - healthy - unhealthy,
                    "flags": None,
                }
                seen = known[tally] = (template, checks)
                tallies[tally] = 0
            template, checks = seen
            entry = template.copy()
            entry["flags"] = list(checks.flags)
            entries[str(task)] = entry
            tallies[tally] += 1
        judged: dict[TaskChecks, int] = {}
        for tally, count in tallies.items():
            checks = known[tally][1]
            judged[checks] = judged.get(checks, 0) + count
        return entries, judged

    def _verdicts_after_duplicates(self) -> tuple[list[int], int]:
        """Digests per verdict code after the duplicate pass, and its finding count (only groups
        holding a counted identity are read)."""
        verdicts = list(self._verdict_counts)
        duplicate_findings = 0
        if self._check_duplicates:
            for stage, task, rollout in self._duplicates:
                for digest in self._group_members(self._tasks[task]):
                    if _same(digest.rollout_index, rollout) and _same(digest.stage_index, stage):
                        verdicts[digest.verdict] -= 1
                        verdicts[UNHEALTHY] += 1
                        duplicate_findings += 1
        return verdicts, duplicate_findings

    def _ordered_tasks(self) -> SortedKeyList:
        """Every task index in map order; tasks new since the last call are inserted one at a time
        (a full sort of 100k keys would hold the interpreter lock for tens of ms)."""
        order: SortedKeyList = self._task_order
        if len(order) < len(self._tasks):
            add = order.add
            for position, task in enumerate(itertools.islice(self._tasks, len(order), None)):
                add(task)
                if not position & _STEP_MASK:
                    yield_point()
        return order

    def summary_bytes(self) -> bytes:
        """Exact ``quality_summary.json`` content (no trailing newline)."""
        summary = self.summary()
        try:
            return render_summary(summary)
        finally:
            release_gradually(summary["tasks"])

    def iter_verdict_lines(self) -> Iterator[bytes]:
        """Exact ``rollout_verdicts.jsonl`` lines in report order, one task group at a time (row
        order is task-major)."""
        with collector_paused():
            tasks = sorted(self._tasks, key=index_sort_part)
        duplicated = {task for _, task, _ in self._duplicates} if self._check_duplicates else set()
        count = self._duplicate_count
        renderer = RowRenderer()
        groups = self._tasks
        unpacked = not self._packed
        for position, task in enumerate(tasks):
            if not position & _STEP_MASK:
                yield_point()
            group = groups[task]
            if unpacked and type(group) is not list and type(group) is not int:
                members = [cast("CompactDigest", group)]
            else:
                members = self._group_members(group)
                members.sort(key=row_sort_key)
            yield from renderer.rows(members, count if task in duplicated else None)

    def compact_digests(self) -> list[CompactDigest]:
        """The packed digests in input (ordinal) order, before the duplicate pass."""
        return sorted(self._all_digests(), key=lambda digest: digest.ordinal)

    def _all_digests(self) -> list[CompactDigest]:
        digests: list[CompactDigest] = []
        for group in self._tasks.values():
            digests += self._group_members(group)
        return digests

    def digests(self) -> list[RolloutDigest]:
        """Post-duplicate digests in input (ordinal) order, as ``HealthCheckResult.rollouts`` holds them."""
        with collector_paused():
            return [expand_digest(digest, self._duplicate_count(digest)) for digest in self.compact_digests()]
