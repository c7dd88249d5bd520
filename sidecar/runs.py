"""Live state of one run, rebuilt identically from the journal on restart.

A :class:`RunState` composes the perf core (``DispatchLatencyTracker``, perf-summary state,
``build_ng_perf``) and the health pipeline (per-row digest, ``HealthReducer``) and keeps
the counters the metrics and the report read. Events are applied in journal order; every
time-dependent input (the rate clock, the budget deadline) uses the event's journaled
arrival time, so a replay reproduces the live state exactly.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from health.compact import VERDICTS
from health.reduce import release_gradually
from health.registry import CHECK_IDS, TASK_CHECK_IDS
from health.types import TaskIndex
from sidecar.accounting import Accounting, RolloutKey, normalize_index
from sidecar.engines import Engines
from sidecar.events import (
    Completed,
    Drained,
    Event,
    Failed,
    Heartbeat,
    Latency,
    RunEnded,
    RunStarted,
    Started,
    event_identity,
    row_of,
)
from sidecar.inflight import InflightRegistry, InflightRules, straggler_threshold
from sidecar.prepare import Prepared, rebase_digest

__all__ = [
    "DURATION_BUCKETS",
    "FAILURE_CLASSES",
    "INFLIGHT_REPORT_LIMIT",
    "TOKEN_KINDS",
    "DurationHistogram",
    "HealthView",
    "RunState",
    "latency_ms",
]

#: In-flight rollouts ``/report`` lists at the run's end (oldest first); the count covers all.
INFLIGHT_REPORT_LIMIT = 1000
DURATION_BUCKETS: tuple[float, ...] = (
    1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200, 10800, 14400, 21600,
)  # fmt: skip
#: Spec §6.4 failure classes; anything else is exported as ``other`` to keep label values bounded.
FAILURE_CLASSES = frozenset(
    {
        "agent_request_failed",
        "agent_run_error",
        "environment_server_failed",
        "cancelled",
        "kill_shaped",
        "judge_invalid",
        "timeout_exceeded",
        "skipped",
        "reference_missing",
        "eval_missing",
        "transport_ineligible",
    }
)
#: ``rollout_sidecar_tokens_total`` kind label -> ``ng_perf`` field.
TOKEN_KINDS = {
    "prompt": "prompt_tokens",
    "completion": "completion_tokens",
    "reasoning": "reasoning_tokens",
    "cached": "cached_prompt_tokens",
}
_FAILURE_CLASS_KEY = "_ng_failure_class"
_TERMINAL_KEY = "_ng_failure_terminal"
_NO_PERSIST_KEY = "_ng_no_persist"
_DRAINED_KEY = "_ng_dispatch_drained"


class _EventClock:
    """Wall clock that reads the event's arrival time while an event is applied, and stops at
    the run's end: an ended run's rates are frozen, so its report is the same whenever (and
    after however many journal replays) it is read."""

    __slots__ = ("fallback", "frozen", "pinned")

    def __init__(self, fallback: Callable[[], float] = time.time) -> None:
        self.pinned: float | None = None
        self.frozen: float | None = None
        self.fallback = fallback

    def __call__(self) -> float:
        if self.pinned is not None:
            return self.pinned
        return self.frozen if self.frozen is not None else self.fallback()


@dataclass(slots=True)
class DurationHistogram:
    """Cumulative-bucket histogram over :data:`DURATION_BUCKETS` (plus ``+Inf``)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    total: float = 0.0
    observations: int = 0
    #: Smallest and largest observation (the OTLP histogram carries them), ``None`` before the first.
    low: float | None = None
    high: float | None = None

    def observe(self, seconds: float) -> None:
        if seconds != seconds:  # NaN has no bucket
            return
        self.counts[bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.total += seconds
        self.observations += 1
        self.low = seconds if self.low is None else min(self.low, seconds)
        self.high = seconds if self.high is None else max(self.high, seconds)

    def cumulative(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*DURATION_BUCKETS, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


@dataclass(frozen=True, slots=True)
class HealthView:
    """Current verdict and finding counts (from the reducer's summary) and closed-task flags."""

    verdicts: dict[str, int]
    issues: dict[str, int]
    tasks_closed: int
    task_flags: dict[str, int]


class RunState:
    """Everything the service knows about one run."""

    def __init__(
        self,
        run_id: str,
        started: RunStarted,
        *,
        received_at: float,
        engines: Engines,
        plan: dict[str, int] | None = None,
        health_interval_s: float = 2.0,
        inflight_rules: InflightRules | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.run_id = run_id
        self.config = started
        self.generation = started.generation or 0
        self.received_at = received_at
        self.started_at = started.started_at if started.started_at is not None else received_at
        self.plan = plan if plan is not None else started.plan
        self.ended_at: float | None = None
        self._engines = engines
        self._clock = _EventClock(clock)
        self._clock.pinned = received_at
        self.tracker = engines.new_tracker(self._clock)
        self._clock.pinned = None
        self.reducer = engines.new_reducer(started.ignored_checks)
        self.perf = engines.new_perf_summary()
        self.accounting = Accounting(self.plan, started.max_attempts)
        self.ignored_checks = frozenset(started.ignored_checks)
        self.completed = 0
        self.drained = 0
        self.failed: dict[tuple[str, bool], int] = {}
        self.durations = {"completed": DurationHistogram(), "failed": DurationHistogram()}
        self.tokens = dict.fromkeys(TOKEN_KINDS, 0)
        self.perf_rollouts = 0
        self._next_ordinal = 0
        self._closed: dict[TaskIndex, tuple[str, ...]] = {}
        self._health_interval_s = health_interval_s
        self._health_cache: tuple[float, dict[str, int], dict[str, int]] | None = None
        self._health_interval = health_interval_s
        self._verdicts = [0, 0, 0]
        self._issues = [0] * len(CHECK_IDS)
        self._maybe_duplicates = False
        self._version = 0
        self._health_version = -1
        self.inflight = InflightRegistry(inflight_rules or InflightRules())
        #: The ``/inflight`` body at ``run_ended`` (identities and ages at the end), else ``None``.
        self.inflight_at_end: dict[str, Any] | None = None

    # -- applying events ------------------------------------------------------------------

    @property
    def budget_deadline(self) -> float | None:
        budget = self.config.dispatch_budget_s
        return None if budget is None else self.started_at + budget

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def apply(
        self, event: Event, received_at: float, prepared: Prepared | None = None
    ) -> dict[str, Any] | None:
        """Apply one committed event; a completion returns its ``ng_perf`` (or ``None``)."""
        self._version += 1
        self._clock.pinned = received_at
        try:
            if isinstance(event, Completed):
                self.inflight.ended(self._key(event), None)
                return self._completed(event, prepared)
            if isinstance(event, Failed):
                self.inflight.ended(self._key(event), event_identity(event)[2])
                self._failed(event)
            elif isinstance(event, Drained):
                self.inflight.ended(self._key(event), event_identity(event)[2])
                self._drained(event)
            elif isinstance(event, Started):
                self._started(event, received_at)
            elif isinstance(event, RunEnded):
                self._ended(event, received_at)
            elif isinstance(event, Latency):
                self._latency(event)
            return None
        finally:
            self._clock.pinned = None

    def ng_perf_for(self, event: Completed) -> dict[str, Any] | None:
        """``build_ng_perf`` for a completion's row (pure; used for duplicates too)."""
        row = row_of(event)
        if row is None:
            return None
        return self._engines.build_ng_perf(row, latency_ms(event))

    def _key(self, event: Completed | Failed | Drained | Started) -> RolloutKey:
        task, rollout, _ = event_identity(event)
        return normalize_index(task), normalize_index(rollout)

    def _completed(self, event: Completed, prepared: Prepared | None) -> dict[str, Any] | None:
        """A reply: always a tracker completion (as in NeMo Gym 0.7.0). Only a row the collector
        would write to the main file is health-checked and summarized; a row with a failure
        class (sidecar file) counts as a failed attempt too, a no-persist row as neither."""
        self.completed += 1
        if event.seconds is not None:
            self.tracker.record(event.seconds)
            self.durations["completed"].observe(event.seconds)
        row = row_of(event)
        if prepared is not None and (prepared.source_path, prepared.ignored_checks) != (
            self.config.source_path,
            self.ignored_checks,
        ):
            prepared = None  # made for another generation of this run
        ng_perf = prepared.ng_perf if prepared is not None else self.ng_perf_for(event)
        if row is not None and row.get(_NO_PERSIST_KEY):
            if row.get(_DRAINED_KEY):
                self._settle(self.accounting.drained(self._key(event)))
            return ng_perf
        if row is not None and row.get(_FAILURE_CLASS_KEY) is not None:
            terminal = bool(row.get(_TERMINAL_KEY))
            self._count_failure(row.get(_FAILURE_CLASS_KEY), terminal)
            self._settle(self.accounting.failed(self._key(event), terminal=terminal))
            return ng_perf
        digest = self._digest(event, prepared)
        task = self._engines.digest_task_index(digest)
        self.reducer.add_compact(digest)
        self._verdicts[digest.verdict] += 1
        for position in digest.finding_checks:
            if position >= 0:
                self._issues[position] += 1
        if ng_perf is None and row is not None and isinstance(row.get("ng_perf"), dict):
            ng_perf = row["ng_perf"]  # attach_ng_perf keeps an agent-supplied object it cannot rebuild
        self.perf_rollouts += 1
        if ng_perf is not None:
            self.perf.add(ng_perf)
            for kind, name in TOKEN_KINDS.items():
                value = ng_perf.get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    self.tokens[kind] += value
        key = (task, normalize_index(event_identity(event)[1]))
        if self.accounting.has_succeeded(key) or digest.stage_index is not None:
            self._maybe_duplicates = True  # the reducer's duplicate pass may change verdicts
        completed_task = self.accounting.succeeded(key)
        if completed_task is None and task in self._closed:
            completed_task = task  # a late repeat re-opens a closed task: recompute it
        self._settle(completed_task)
        return ng_perf

    def _digest(self, event: Completed, prepared: Prepared | None) -> Any:
        ordinal = self._next_ordinal
        self._next_ordinal += 1
        if prepared is not None:
            rebased = rebase_digest(prepared.digest, ordinal)
            if rebased is not None:
                return rebased
        common = {
            "source_path": self.config.source_path,
            "source_index": 0,
            "line_number": event.line_number if event.line_number is not None else ordinal + 1,
            "ordinal": ordinal,
            "ignored_checks": self.ignored_checks,
        }
        record, parse_error = event.parsed
        return self._engines.digest_record(record, parse_error=parse_error, **common)

    def _count_failure(self, failure_class: Any, terminal: bool) -> None:
        known = isinstance(failure_class, str) and failure_class in FAILURE_CLASSES
        label = failure_class if known else "other"
        self.failed[(label, terminal)] = self.failed.get((label, terminal), 0) + 1

    def _failed(self, event: Failed) -> None:
        if event.seconds is not None:
            self.tracker.record_failure(event.seconds)
            self.durations["failed"].observe(event.seconds)
        failure_class = (
            event.failure_class if event.failure_class is not None else event.row.get(_FAILURE_CLASS_KEY)
        )
        terminal = event.terminal if event.terminal is not None else bool(event.row.get(_TERMINAL_KEY))
        self._count_failure(failure_class, terminal)
        self._settle(self.accounting.failed(self._key(event), terminal=terminal))

    def _latency(self, event: Latency) -> None:
        """Identity-less tracker call (RemoteLatencyTracker): tracker, histogram, drained count only."""
        if event.op == "record_drained":
            self.drained += 1
            self.tracker.record_drained()
        elif event.seconds is not None:
            if event.op == "record":
                self.tracker.record(event.seconds)
                self.durations["completed"].observe(event.seconds)
            else:
                self.tracker.record_failure(event.seconds)
                self.durations["failed"].observe(event.seconds)

    def heartbeat(self, event: Heartbeat, at: float) -> bool:
        """A heartbeat (memory only); False when that attempt is not in flight."""
        if self.ended_at is not None:
            return False
        task, rollout, attempt = event_identity(event)
        return self.inflight.heartbeat((normalize_index(task), normalize_index(rollout)), attempt, at)

    def _started(self, event: Started, received_at: float) -> None:
        """In flight from now, unless the run ended or the rollout already succeeded (a late start)."""
        key = self._key(event)
        if self.ended_at is None and not self.accounting.has_succeeded(key):
            self.inflight.started(key, event.attempt, received_at)

    def _drained(self, event: Drained) -> None:
        self.drained += 1
        self.tracker.record_drained()
        self._settle(self.accounting.drained(self._key(event)))

    def _ended(self, event: RunEnded, received_at: float) -> None:
        self.ended_at = event.ended_at if event.ended_at is not None else received_at
        self._clock.frozen = self.ended_at
        self.inflight_at_end = self.inflight_body(received_at, limit=INFLIGHT_REPORT_LIMIT, at_end=True)
        self.inflight.clear()
        for task in self.accounting.succeeded_tasks():
            self._close(task)

    def _settle(self, task: TaskIndex | None) -> None:
        if task is not None:
            self._close(task)

    def _close(self, task: TaskIndex) -> None:
        findings = self.reducer.close_task(task)
        self._closed[task] = tuple(finding.check for finding in findings)

    # -- reading --------------------------------------------------------------------------

    def health_view(self, *, fresh: bool = False) -> HealthView:
        """Current verdict and finding counts, cheap to read on every scrape.

        Counts are kept incrementally from each digest's preliminary verdict and findings, which
        equal the reducer's until two rows claim one identity (the duplicate post-pass then
        changes verdicts). Only in that case is the reducer's O(rollouts) summary used, at most
        every ``health_interval_s`` (stretched to 20x its own cost) unless ``fresh``. Task-check
        counts are those of closed tasks in both cases (an open task is not judged yet).
        """
        flags: dict[str, int] = {}
        for checks in self._closed.values():
            for check in checks:
                flags[check] = flags.get(check, 0) + 1
        if not self._maybe_duplicates:
            verdicts: dict[str, int] = dict(zip(VERDICTS, self._verdicts, strict=True))
            issues = dict(zip(CHECK_IDS, self._issues, strict=True))
        else:
            now = time.monotonic()
            cached = self._health_cache
            stale = cached is None or self._health_version != self._version
            if stale and (fresh or cached is None or now - cached[0] >= self._health_interval):
                started = time.perf_counter()
                summary = self.reducer.summary()
                run = summary["run"]
                release_gradually(summary.pop("tasks", {}))
                self._health_interval = max(self._health_interval_s, 20 * (time.perf_counter() - started))
                self._health_cache = cached = (now, dict(run["verdicts"]), dict(run["issues"]))
                self._health_version = self._version
            assert cached is not None
            verdicts, issues = dict(cached[1]), dict(cached[2])
        for check in TASK_CHECK_IDS:
            issues[check] = flags.get(check, 0)
        return HealthView(verdicts, issues, len(self._closed), flags)

    def drain_margin(self, configured: float | None, *, now: float | None = None) -> dict[str, Any]:
        """The tracker's margin, samples, and (with a budget) time left and the start-now decision."""
        margin = self.tracker.drain_margin(configured)
        body: dict[str, Any] = {
            "run_id": self.run_id,
            "drain_margin": margin,
            "configured": configured,
            "samples": self.tracker.count,
            "drained": self.tracker.drained,
        }
        deadline = self.budget_deadline
        if deadline is not None:
            remaining = deadline - (self._clock.fallback() if now is None else now)
            body["budget_deadline"] = deadline
            body["seconds_left"] = remaining
            body["start_now"] = not (remaining <= 0 or (margin is not None and remaining < margin))
        return body

    def straggler_threshold(self) -> float | None:
        """Age past which an in-flight rollout of this run straggles (see :mod:`sidecar.inflight`)."""
        tracker = self.tracker
        return straggler_threshold(
            self.inflight.rules,
            p95=tracker.quantile(0.95) if tracker.count else None,
            samples=tracker.count,
            task_timeout_s=self.config.task_timeout_s,
        )

    def inflight_body(self, now: float, *, limit: int, at_end: bool = False) -> dict[str, Any]:
        """Count, ages and the ``limit`` oldest in-flight rollouts at ``now``.

        ``at_end`` keeps only what a replay reproduces (identities, ages, the straggling rule),
        not the heartbeat state or the evaluator's stamps, so a report is the same after a restart.
        """
        registry = self.inflight.as_dict(now, self.straggler_threshold(), limit)
        body = {"run_id": self.run_id, "as_of": now, **registry}
        if at_end:  # the report around it carries the run id and the end time
            body.pop("run_id")
            body.pop("as_of")
            body.pop("flagged")
            body.pop("stalled")
            keep = ("task_index", "rollout_index", "attempt", "started_at", "age_s", "straggling")
            body["oldest"] = [{key: entry[key] for key in keep} for entry in body["oldest"]]
        return body

    def latency(self) -> dict[str, Any]:
        tracker = self.tracker
        return {
            "summary": tracker.summary(),
            "samples": tracker.count,
            "drained": tracker.drained,
            "total_seconds": tracker.total_seconds,
            "quantiles": {str(q): tracker.quantile(q) for q in (0.5, 0.75, 0.9, 0.95, 0.99, 1.0)},
            "drain_margin": tracker.drain_margin(self.config.drain_margin_s),
            "completions_per_hour": tracker.completions_per_hour(),
        }

    def report(self) -> dict[str, Any]:
        """The post-run report minus the verdict rows (streamed separately)."""
        failed = [
            {"failure_class": label, "terminal": terminal, "count": count}
            for (label, terminal), count in sorted(self.failed.items())
        ]
        return {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "plan_tasks": len(self.plan) if self.plan is not None else None,
            "quality_summary": self.reducer.summary(),
            "latency": self.latency(),
            "perf_summary": self.perf.result(self.perf_rollouts),
            "accounting": self.accounting.snapshot(ended=self.ended).as_dict(),
            "events": {"completed": self.completed, "failed": failed, "drained": self.drained},
            "health": {"tasks_closed": len(self._closed)},
            "inflight_at_end": self.inflight_at_end,
        }


def latency_ms(event: Completed) -> float | None:
    """``ng_perf.total_latency_ms`` of a completion: ``latency_ms``, else ``seconds * 1000``, else none."""
    if event.latency_ms is not None:
        return event.latency_ms
    return None if event.seconds is None else event.seconds * 1000.0
