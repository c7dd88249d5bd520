"""Live state of one run: perf core, health pipeline and counters, applied in journal order
by each fact's journaled ``at``, so a replay rebuilds it exactly."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, NotRequired, cast

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from health.compact import VERDICTS
from health.reduce import GroupStore, HealthReducer, release_gradually
from health.registry import CHECK_IDS, TASK_CHECK_IDS
from health.types import TaskIndex
from sidecar.ingest.engines import Engines
from sidecar.ingest.events import Heartbeat, RunStarted, event_identity
from sidecar.journal import (
    CompletedFact,
    Disposition,
    DrainedFact,
    Fact,
    FailedFact,
    LatencyFact,
    RunEndedFact,
    RunStartedFact,
    StartedFact,
    parse_deferred,
)
from sidecar.perf import DispatchLatencyTracker, PerfSummaryState
from sidecar.state.accounting import Accounting, normalize_index
from sidecar.state.agents import AgentBody, AgentTotals
from sidecar.state.durations import DurationHistogram
from sidecar.state.forecast import ForecastMemo
from sidecar.state.groups import OpenGroups
from sidecar.state.inflight import InflightBudget, InflightRegistry, InflightRules, straggler_threshold
from sidecar.state.timeline import Timeline, TimelineBody, TimelineSample, TimelineSeries

# A fact's disposition is journaled as the plain int of its :class:`Disposition`.
NOT_PERSISTED = int(Disposition.NOT_PERSISTED)
NOT_PERSISTED_DRAINED = int(Disposition.NOT_PERSISTED_DRAINED)
FAILURE_ROW = int(Disposition.FAILURE_ROW)

__all__ = ["TOKEN_KINDS", "DrainMarginBody", "HealthView", "ReportCut", "RunState"]

#: Unhealthy rollouts a run keeps for its page (:attr:`RunState.recent_unhealthy`).
RECENT_UNHEALTHY = 50
_UNHEALTHY = VERDICTS.index("unhealthy")
#: In-flight rollouts ``/report`` lists at the run's end (oldest first); the count covers all.
INFLIGHT_REPORT_LIMIT = 1000
#: The window of the recent completion rate (the page's "now" and ``recent_completions_per_hour``).
RATE_WINDOW_S = 900.0
#: ``rollout_sidecar_tokens_total`` kind label -> ``ng_perf`` field.
TOKEN_KINDS = {
    "prompt": "prompt_tokens",
    "completion": "completion_tokens",
    "reasoning": "reasoning_tokens",
    "cached": "cached_prompt_tokens",
}
_TOKEN_ITEMS = tuple(TOKEN_KINDS.items())


@with_config(ConfigDict(extra="forbid"))
class DrainMarginBody(TypedDict):
    """``GET /drain_margin``; the budget keys only when the run declared a dispatch budget."""

    run_id: str
    drain_margin: float | None
    configured: float | None
    samples: int
    drained: int
    budget_deadline: NotRequired[float]
    seconds_left: NotRequired[float]
    start_now: NotRequired[bool]


@dataclass(frozen=True, slots=True)
class HealthView:
    """Current verdict and finding counts (from the reducer's summary) and closed-task flags."""

    verdicts: dict[str, int]
    issues: dict[str, int]
    tasks_closed: int
    task_flags: dict[str, int]


_NUMBER = (int, float)
#: What a snapshot holds of a run as is (name -> its type), and the parts that snapshot themselves.
_PLAIN: dict[str, type | tuple[type, ...]] = {
    "run_id": str,
    "received_at": _NUMBER,
    "started_at": _NUMBER,
    "plan": (dict, type(None)),
    "ended_at": (*_NUMBER, type(None)),
    "completed": int,
    "drained": int,
    "tokens": dict,
    "perf_rollouts": int,
    "_next_ordinal": int,
    "_task_flags": dict,
    "_verdicts": dict,
    "_issues": list,
    "_maybe_duplicates": bool,
    "inflight_at_end": (dict, type(None)),
    "timed": list,
}
_PARTS: dict[str, Any] = {
    "tracker": DispatchLatencyTracker,
    "reducer": HealthReducer,
    "perf": PerfSummaryState,
    "accounting": Accounting,
    "timeline": Timeline,
    "agents": AgentTotals,
}


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
        closed_groups: GroupStore | None = None,
        inflight_budget: InflightBudget | None = None,
    ) -> None:
        self.run_id = run_id
        self.config = started
        self.generation = started.generation or 0
        self.received_at = received_at
        self.started_at = started.started_at if started.started_at is not None else received_at
        self.plan = plan if plan is not None else started.plan
        self.ended_at: float | None = None
        self._engines = engines
        self._clock = clock
        self.tracker = DispatchLatencyTracker()
        self.reducer = HealthReducer(started.ignored_checks, packed=True)
        self._spilling = self._spill_to(closed_groups)
        self.perf = PerfSummaryState()
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
        #: Closed tasks flagged by each task check, kept as tasks close (a scrape reads it as is).
        self._task_flags: dict[str, int] = {}
        #: The summary's refresh interval: the configured floor, and in force (20x its last cost).
        self._health_min_interval_s = health_interval_s
        self._health_cache: tuple[float, dict[str, int], dict[str, int]] | None = None
        self._health_interval_s = health_interval_s
        #: Rollouts per preliminary verdict, keyed by the verdict's name.
        self._verdicts: dict[str, int] = dict.fromkeys(VERDICTS, 0)
        #: The run page's latest unhealthy rollouts (task, rollout, stage, findings JSON), newest last.
        self.recent_unhealthy: deque[tuple[Any, Any, Any, bytes]] = deque(maxlen=RECENT_UNHEALTHY)
        self._issues = [0] * len(CHECK_IDS)
        self._maybe_duplicates = False
        self._version = 0
        self._health_version = -1
        self.inflight = InflightRegistry(inflight_rules or InflightRules(), budget=inflight_budget)
        #: The ``/inflight`` body at ``run_ended`` (identities and ages at the end), else ``None``.
        self.inflight_at_end: dict[str, Any] | None = None
        #: Events with a time (started, completed, failed, drained): what the timeline and rates count.
        self.timed = [0, 0, 0, 0]
        self.timeline = Timeline(started.started_at)
        #: Per agent (rows naming an ``agent_ref``): counts, latency buckets, ``ng_perf`` sums.
        self.agents = AgentTotals()
        self.groups = OpenGroups()
        #: The last forecast (memory only; :mod:`sidecar.state.forecast`).
        self.forecast = ForecastMemo()

    def to_snapshot(self) -> dict[str, Any]:
        """The run as plain values (:mod:`sidecar.state.snapshot`): no engines, clock, health cache
        or in-flight flag stamps (memory only, as a replay rebuilds it)."""
        data = {name: getattr(self, name) for name in _PLAIN}
        data.update({name: getattr(self, name).to_snapshot() for name in (*_PARTS, "inflight")})
        return data | {
            "config": self.config.model_dump_json(exclude_none=True).encode(),
            "failed": [[label, terminal, count] for (label, terminal), count in self.failed.items()],
            "durations": {name: histogram.to_snapshot() for name, histogram in self.durations.items()},
            "closed": [[task, list(checks)] for task, checks in self._closed.items()],
            "recent_unhealthy": [list(entry) for entry in self.recent_unhealthy],
            "groups": self.groups.to_snapshot(),
            "forecast": self.forecast.body,
        }

    @classmethod
    def from_snapshot(
        cls,
        data: dict[str, Any],
        engines: Engines,
        *,
        health_interval_s: float = 2.0,
        inflight_rules: InflightRules | None = None,
        clock: Callable[[], float] = time.time,
        closed_groups: GroupStore | None = None,
        inflight_budget: InflightBudget | None = None,
    ) -> RunState:
        """The run :meth:`to_snapshot` described, with engines, rules, budget, clock and group store
        re-attached; ``KeyError``/``TypeError``/``ValueError`` on a wrong shape."""
        config = RunStarted.model_validate_json(data["config"])
        state = cls(
            data["run_id"], config, received_at=0.0, engines=engines, health_interval_s=health_interval_s,
            inflight_rules=inflight_rules, clock=clock, inflight_budget=inflight_budget,
        )  # fmt: skip
        for name, kind in _PLAIN.items():
            if not isinstance(data[name], kind):
                raise ValueError(f"run snapshot: {name} is {data[name]!r:.80}")
            setattr(state, name, data[name])
        if (len(state._issues), len(state.timed)) != (len(CHECK_IDS), 4) or (
            state._verdicts.keys() != set(VERDICTS) or state.tokens.keys() != TOKEN_KINDS.keys()
        ):
            raise ValueError("run snapshot: issue, timed, verdict or token counts of the wrong shape")
        for name, part in _PARTS.items():
            setattr(state, name, part.from_snapshot(data[name]))
        state._spilling = state._spill_to(closed_groups)
        state.failed = {(str(label), bool(terminal)): int(count) for label, terminal, count in data["failed"]}
        durations = data["durations"]
        state.durations = {
            name: DurationHistogram.from_snapshot(durations[name]) for name in ("completed", "failed")
        }
        state._closed = {task: tuple(checks) for task, checks in data["closed"]}
        state.recent_unhealthy.extend(tuple(entry) for entry in data["recent_unhealthy"])
        state.inflight = InflightRegistry.from_snapshot(data["inflight"], inflight_rules)
        state.inflight.budget = inflight_budget
        state.groups = OpenGroups.from_snapshot(data["groups"])
        state.forecast = ForecastMemo(body=data["forecast"])
        return state

    def _spill_to(self, store: GroupStore | None) -> bool:
        """Give the reducer the store closed task groups move to (none: they stay in memory)."""
        if store is None:
            return False
        self.reducer.spill_to(store)
        return True

    @property
    def budget_deadline(self) -> float | None:
        budget = self.config.dispatch_budget_s
        return None if budget is None else self.started_at + budget

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def apply_fact(self, fact: Fact) -> dict[str, Any] | None:
        """Apply one committed fact; a completion returns its ``ng_perf`` (or ``None``)."""
        self._version += 1
        at = None if isinstance(fact, RunEndedFact | RunStartedFact) else fact.at
        if at is not None:
            self.timeline.advance(at, self)  # closes points with the state before the fact
            self._count_timed(fact)
        if self.ended_at is None:
            self.groups.apply(fact)
        if isinstance(fact, CompletedFact):
            self.inflight.ended((fact.task, fact.rollout), None)
            return self._completed(fact)
        if isinstance(fact, FailedFact):
            self.inflight.ended((fact.task, fact.rollout), fact.attempt)
            self._failed(fact)
        elif isinstance(fact, DrainedFact):
            self.inflight.ended((fact.task, fact.rollout), fact.attempt)
            self._drained()
            self._settle(self.accounting.drained((fact.task, fact.rollout)))
        elif isinstance(fact, StartedFact):
            self._started(fact)
        elif isinstance(fact, RunEndedFact):
            self.timeline.end(fact.at, self)  # unstamped: at the latest event with a time
            self._ended(fact.ended_at)
        elif isinstance(fact, LatencyFact):
            self._latency(fact)
        return None

    def _count_timed(self, fact: Fact) -> None:
        timed = self.timed
        if isinstance(fact, CompletedFact):
            timed[1] += 1
            if fact.disposition == FAILURE_ROW:
                timed[2] += 1
        elif isinstance(fact, StartedFact):
            timed[0] += 1
        elif isinstance(fact, FailedFact):
            timed[2] += 1
        elif isinstance(fact, DrainedFact):
            timed[3] += 1
        elif isinstance(fact, LatencyFact) and fact.op != "record_failure":
            timed[1 if fact.op == "record" else 3] += 1

    def _completed(self, fact: CompletedFact) -> dict[str, Any] | None:
        """A reply: always a tracker completion (as in NeMo Gym 0.7.0); only a main-file row is
        health-checked, a failure-class row is also a failed attempt, a no-persist row neither."""
        self.completed += 1
        if fact.seconds is not None:
            self.tracker.record(fact.seconds)
            self.durations["completed"].observe(fact.seconds)
        ng_perf = fact.ng_perf
        disposition = fact.disposition
        if disposition == NOT_PERSISTED:
            return ng_perf
        if disposition == NOT_PERSISTED_DRAINED:
            self._settle(self.accounting.drained((fact.task, fact.rollout)))
            return ng_perf
        if disposition == FAILURE_ROW:
            self._count_failure(fact)
            return ng_perf
        digest = self._digest(fact)
        task = digest.task_index
        self.reducer.add_compact(digest)
        self._verdicts[VERDICTS[digest.verdict]] += 1
        if digest.verdict == _UNHEALTHY:
            self.recent_unhealthy.append(
                (digest.task_index, digest.rollout_index, digest.stage_index, digest.findings)
            )
        for position in digest.finding_checks:
            if position >= 0:
                self._issues[position] += 1
        perf = ng_perf if ng_perf is not None else fact.agent_perf
        self._summarize(perf, fact)
        again, completed_task = self.accounting.succeeded_again((task, fact.rollout))
        if again or digest.stage_index is not None:
            self._maybe_duplicates = True  # the reducer's duplicate pass may change verdicts
        if completed_task is None and task in self._closed:
            completed_task = task  # a late repeat re-opens a closed task: recompute it
        self._settle(completed_task)
        return perf

    def _summarize(self, perf: dict[str, Any] | None, fact: CompletedFact) -> None:
        """A rollout for the main file: into the perf summary, the token totals and its agent's."""
        if fact.agent is not None:
            self.agents.rollout(fact.agent, fact.seconds, perf)
        self.perf_rollouts += 1
        if perf is not None:
            self.perf.add(perf)
            tokens, get = self.tokens, perf.get
            for kind, name in _TOKEN_ITEMS:
                value = get(name)
                if type(value) is int:  # JSON and MessagePack integers; never a bool
                    tokens[kind] += value

    def _digest(self, fact: CompletedFact) -> Any:
        ordinal = self._next_ordinal
        self._next_ordinal += 1
        if fact.digest is not None:
            return fact.compact(ordinal)
        record, parse_error = parse_deferred(fact)
        return self._engines.digest_record(
            record,
            parse_error=parse_error,
            source_path=self.config.source_path,
            source_index=0,
            line_number=fact.line_number if fact.line_number is not None else ordinal + 1,
            ordinal=ordinal,
            ignored_checks=self.ignored_checks,
        )

    def _count_failure(self, fact: FailedFact | CompletedFact) -> None:
        """A failed attempt (a failure event, or a reply whose row has a failure class)."""
        if fact.agent is not None:
            self.agents.failure(fact.agent)
        key = (fact.failure_class, fact.terminal)
        self.failed[key] = self.failed.get(key, 0) + 1
        self._settle(self.accounting.failed((fact.task, fact.rollout), terminal=fact.terminal))

    def _failed(self, fact: FailedFact) -> None:
        if fact.seconds is not None:
            self.tracker.record_failure(fact.seconds)
            self.durations["failed"].observe(fact.seconds)
        self._count_failure(fact)

    def _latency(self, fact: LatencyFact) -> None:
        """Identity-less tracker call (RemoteLatencyTracker): tracker, histogram, drained count only."""
        if fact.op == "record_drained":
            self._drained()
        elif fact.seconds is not None:
            if fact.op == "record":
                self.tracker.record(fact.seconds)
                self.durations["completed"].observe(fact.seconds)
            else:
                self.tracker.record_failure(fact.seconds)
                self.durations["failed"].observe(fact.seconds)

    def heartbeat(self, event: Heartbeat, at: float) -> bool:
        """A heartbeat (memory only); False when that attempt is not in flight."""
        if self.ended_at is not None:
            return False
        task, rollout, attempt = event_identity(event)
        return self.inflight.heartbeat((normalize_index(task), normalize_index(rollout)), attempt, at)

    def _started(self, fact: StartedFact) -> None:
        """In flight from when it started (its ``at``, else its arrival) unless the run ended or the
        rollout already succeeded (a late start)."""
        key = (fact.task, fact.rollout)
        if self.ended_at is None and not self.accounting.has_succeeded(key):
            self.inflight.started(key, fact.attempt, fact.received_at if fact.at is None else fact.at)

    def _drained(self) -> None:
        self.drained += 1
        self.tracker.record_drained()

    def _ended(self, ended_at: float) -> None:
        self.ended_at = ended_at
        self.inflight_at_end = self.inflight_body(ended_at, limit=INFLIGHT_REPORT_LIMIT, at_end=True)
        self.inflight.clear()
        self.groups.clear()
        for task in self.accounting.succeeded_tasks():
            self._close(task)

    def _settle(self, task: TaskIndex | None) -> None:
        if task is not None:
            self._close(task)

    def _close(self, task: TaskIndex) -> None:
        findings = self.reducer.close_task(task)
        flags = self._task_flags
        for check in self._closed.get(task, ()):  # closed again (a late repeat): its old flags go
            flags[check] -= 1
        checks = self._closed[task] = tuple(finding.check for finding in findings)
        for check in checks:
            flags[check] = flags.get(check, 0) + 1
        self.groups.close(task)
        if self._spilling:
            self.reducer.spill(task)

    def health_view(self, *, fresh: bool = False) -> HealthView:
        """Verdict and finding counts, kept incrementally; once two rows claim one identity, the
        reducer's O(rollouts) summary at most every ``health_interval_s`` (20x its cost) unless ``fresh``."""
        flags = {check: count for check, count in self._task_flags.items() if count}
        if not self._maybe_duplicates:
            verdicts = dict(self._verdicts)
            issues = dict(zip(CHECK_IDS, self._issues, strict=True))
        else:
            now = time.monotonic()
            cached = self._health_cache
            stale = cached is None or self._health_version != self._version
            if stale and (fresh or cached is None or now - cached[0] >= self._health_interval_s):
                started = time.perf_counter()
                summary = self.reducer.summary()
                run = summary["run"]
                release_gradually(summary.pop("tasks", {}))
                cost_s = time.perf_counter() - started
                self._health_interval_s = max(self._health_min_interval_s, 20 * cost_s)
                self._health_cache = cached = (now, dict(run["verdicts"]), dict(run["issues"]))
                self._health_version = self._version
            assert cached is not None
            verdicts, issues = dict(cached[1]), dict(cached[2])
        for check in TASK_CHECK_IDS:
            issues[check] = flags.get(check, 0)
        return HealthView(verdicts, issues, len(self._closed), flags)

    def drain_margin(self, configured: float | None, *, now: float | None = None) -> DrainMarginBody:
        """The tracker's margin, samples, and (with a budget) time left and the start-now decision."""
        margin = self.tracker.drain_margin(configured)
        body: DrainMarginBody = {
            "run_id": self.run_id,
            "drain_margin": margin,
            "configured": configured,
            "samples": self.tracker.count,
            "drained": self.tracker.drained,
        }
        deadline = self.budget_deadline
        if deadline is not None:
            remaining = deadline - (self._clock() if now is None else now)
            body["budget_deadline"] = deadline
            body["seconds_left"] = remaining
            body["start_now"] = not (remaining <= 0 or (margin is not None and remaining < margin))
        return body

    def straggler_threshold(self) -> float | None:
        """Age past which an in-flight rollout of this run straggles (see :mod:`sidecar.state.inflight`)."""
        tracker = self.tracker
        return straggler_threshold(
            self.inflight.rules,
            p95=tracker.quantile(0.95) if tracker.count else None,
            samples=tracker.count,
            task_timeout_s=self.config.task_timeout_s,
        )

    def inflight_body(self, now: float, *, limit: int, at_end: bool = False) -> dict[str, Any]:
        """Count, ages and the ``limit`` oldest in-flight rollouts at ``now``; ``at_end`` keeps only
        what a replay reproduces, so a report is the same after a restart."""
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

    def timeline_samples(self, times: Sequence[float]) -> list[TimelineSample]:
        """The run now, at each of ``times`` (:class:`sidecar.state.timeline.TimelineSource`)."""
        margin = self.tracker.drain_margin(self.config.drain_margin_s)
        stragglers = self.inflight.straggler_counts(times, self.straggler_threshold())
        deadline = self.budget_deadline
        verdicts = self._verdicts
        healthy, unhealthy = verdicts["healthy"], verdicts["unhealthy"]
        started, completed, failed, drained = self.timed
        fixed = (started, completed, failed, drained, len(self.inflight))
        return [
            TimelineSample(*fixed, count, margin, _left(deadline, at), healthy, unhealthy)
            for at, count in zip(times, stragglers, strict=True)
        ]

    def rates(self) -> tuple[float | None, float | None]:
        """Completions per hour over the run's timeline span and over its last 15 minutes (``None``
        without a span)."""
        done = self.timed[1]
        return self.timeline.rate(done), self.timeline.rate(done, RATE_WINDOW_S)

    def timeline_body(self) -> TimelineBody:
        """The ``GET /v1/runs/{run_id}/timeline`` body (documented in ``docs/report.md``)."""
        timeline = self.timeline
        times, columns = timeline.columns(self)
        series = cast(TimelineSeries, columns)  # the names are checked by tests/sidecar/test_timeline.py
        return {
            "run_id": self.run_id,
            "status": "ended" if self.ended else "running",
            "frozen": timeline.frozen,
            "bucket_s": timeline.bucket_s,
            "max_points": timeline.max_points,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "t": times,
            "series": series,
        }

    def agent_rows(self) -> list[AgentBody] | None:
        """The page's per-agent rows: each agent's rate over the run's time, the span of its
        ``completions_per_hour`` (none without one)."""
        origin = self.timeline.origin
        return self.agents.rows(None if origin is None else self.timeline.latest - origin)

    def latency(self, *, summary: bool = True) -> dict[str, Any]:
        """``/report``'s ``latency`` (``summary``: with NeMo Gym's text, which walks every sample)."""
        tracker = self.tracker
        return {
            **({"summary": tracker.summary()} if summary else {}),
            "samples": tracker.count,
            "drained": tracker.drained,
            "total_seconds": tracker.total_seconds,
            "quantiles": {str(q): tracker.quantile(q) for q in (0.5, 0.75, 0.9, 0.95, 0.99, 1.0)},
            "drain_margin": tracker.drain_margin(self.config.drain_margin_s),
            "completions_per_hour": self.rates()[0],
        }

    def report(self) -> dict[str, Any]:
        """The post-run report minus the verdict rows (streamed separately)."""
        return self.report_cut().report()

    def report_cut(self) -> ReportCut:
        """What ``/report`` reads, cut in microseconds to milliseconds, so the O(rollouts) parts are
        built from it on another thread while ingest goes on."""
        failed = [
            {"failure_class": label, "terminal": terminal, "count": count}
            for (label, terminal), count in sorted(self.failed.items())
        ]
        return ReportCut(
            {
                "run_id": self.run_id,
                "started_at": self.started_at,
                "ended_at": self.ended_at,
                "plan_tasks": len(self.plan) if self.plan is not None else None,
            },
            {
                "latency": self.latency(),
                "perf_summary": self.perf.result(self.perf_rollouts),
                "accounting": self.accounting.snapshot(ended=self.ended).as_dict(),
                "events": {"completed": self.completed, "failed": failed, "drained": self.drained},
                "health": {"tasks_closed": len(self._closed)},
                "inflight_at_end": self.inflight_at_end,
                **({"forecast": self.forecast_accuracy()} if self.ended else {}),
            },
            self.reducer.cut(),
        )

    def forecast_accuracy(self) -> dict[str, Any] | None:
        """``/report``'s ``forecast``: the last live forecast against how the run really ended
        (``None`` when none was made in this process)."""
        last = self.forecast.body
        if last is None or last.get("by_budget_end") is None:
            return None if last is None else {"last": last, "actual": None}
        snapshot = self.accounting.snapshot(ended=True)
        finished = snapshot.succeeded + snapshot.failed_terminal
        band = last["by_budget_end"]["finished"]
        return {
            "last": last,
            "actual": {"finished": finished, "drained": snapshot.drained},
            "error": band["p50"] - finished,
            "inside_p10_p90": band["p10"] <= finished <= band["p90"],
        }


class ReportCut(NamedTuple):
    """A run's report as of one moment, read later on any thread (see :meth:`RunState.report_cut`)."""

    head: dict[str, Any]
    tail: dict[str, Any]
    reducer: HealthReducer

    def report(self) -> dict[str, Any]:
        return {**self.head, "quality_summary": self.reducer.summary(), **self.tail}


def _left(deadline: float | None, at: float) -> float | None:
    return None if deadline is None else deadline - at
