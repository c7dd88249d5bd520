"""The JSON bodies the HTTP surface answers with: ``TypedDict``\\s (a handler's dict is sent as
built), which mypy checks and from which ``/openapi.json``'s schemas are generated."""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from pydantic import ConfigDict
from typing_extensions import TypedDict, is_typeddict

from sidecar.state.accounting import AccountingSnapshot
from sidecar.state.agents import AgentBody
from sidecar.state.run import DrainMarginBody
from sidecar.state.timeline import TimelineBody, TimelineSeries
from sidecar.wire import FollowerState, OutcomeStatus

__all__ = [
    "AgentBody",
    "DrainMarginBody",
    "ErrorBody",
    "EventResult",
    "FollowerStatus",
    "ForecastBody",
    "GroupsBody",
    "HealthzBody",
    "InflightBody",
    "InflightEntryBody",
    "InflightRulesBody",
    "IngestBody",
    "NotReadyBody",
    "OpenAPIBody",
    "PageBody",
    "QualitySummaryBody",
    "ReadyBody",
    "ReportBody",
    "RunListBody",
    "RunListing",
    "TimelineBody",
    "TimelineSeries",
]

_CLOSED = ConfigDict(extra="forbid")


class ErrorBody(TypedDict):
    """Every refusal, unknown route and internal error: the reason code, the field, the detail."""

    error: str
    field: str | None
    detail: str


class EventResult(TypedDict):
    """One event's answer; ``seq`` is the journal's (stored events), ``ng_perf`` on completions."""

    index: int
    kind: str
    status: OutcomeStatus
    seq: NotRequired[int]
    ng_perf: NotRequired[dict[str, Any] | None]


class IngestBody(TypedDict):
    """``POST /v1/runs/{run_id}/events`` and ``/lines``: one result per event, in order."""

    run_id: str
    results: list[EventResult]


class RunListing(TypedDict):
    run_id: str
    ended: bool
    completed: int


class RunListBody(TypedDict):
    """``GET /v1/runs``: every run the service holds."""

    runs: list[RunListing]


class PageBody(TypedDict):
    """``GET /v1/runs/{run_id}/page``: what the run page draws besides the timeline, O(1) in the
    run's size (``docs/report.md`` "The run page"); ``source`` ``live`` here, ``batch`` in a file
    ``health-check --html`` wrote."""

    schema: int
    source: Literal["live", "batch"]
    run_id: str
    status: Literal["running", "ended"]
    as_of: float
    started_at: float | None
    ended_at: float | None
    budget_s: float | None
    plan_tasks: int | None
    drain: DrainMarginBody
    latency: dict[str, Any]
    durations: dict[str, Any]
    accounting: AccountingSnapshot
    events: dict[str, Any]
    health: dict[str, Any]
    perf_summary: dict[str, Any] | None
    perf_rollouts: int | None
    tokens: dict[str, int]
    inflight: dict[str, Any]
    agents: list[AgentBody] | None
    """Per agent, by name (rows naming an ``agent_ref``); ``None`` when no row named one."""
    forecast: NotRequired[ForecastBody | None]
    forecast_history: NotRequired[list[tuple[float, int, int, int, int]]]
    """``[as_of, finished, p10, p50, p90]`` of the recent forecasts' finished-by-the-budget band."""
    groups: NotRequired[list[GroupBody]]


class InflightEntryBody(TypedDict):
    """One in-flight rollout (identities and times, never payloads); a report's
    ``inflight_at_end`` keeps only the first six keys."""

    task_index: int | str
    rollout_index: int | str
    attempt: int
    started_at: float
    age_s: float
    straggling: bool
    flagged_at: NotRequired[float | None]
    flagged_threshold_s: NotRequired[float | None]
    last_heartbeat: NotRequired[float | None]
    heartbeat_age_s: NotRequired[float | None]
    stalled: NotRequired[bool]
    stalled_at: NotRequired[float | None]


class InflightRulesBody(TypedDict):
    straggler_factor: float
    min_samples: int
    stall_after_s: float
    eval_interval_s: float


class InflightFlags(TypedDict):
    stragglers: int
    stalled: int


class InflightBody(TypedDict):
    """``GET /v1/runs/{run_id}/inflight``: count, age distribution, the oldest ``limit``;
    ``ended``: the view at ``run_ended`` (then without ``as_of``)."""

    run_id: str
    as_of: NotRequired[float]
    count: int
    oldest_age_s: float | None
    age_quantiles_s: dict[str, float]
    straggler_threshold_s: float | None
    stragglers: int
    stalled: NotRequired[int]
    untracked: int
    flagged: InflightFlags
    rules: InflightRulesBody
    oldest: list[InflightEntryBody]
    ended: bool


class LatencyBody(TypedDict):
    summary: str
    samples: int
    drained: int
    total_seconds: float
    quantiles: dict[str, float | None]
    drain_margin: float | None
    completions_per_hour: float | None


class FailedCount(TypedDict):
    failure_class: str
    terminal: bool
    count: int


class EventCounts(TypedDict):
    completed: int
    failed: list[FailedCount]
    drained: int


class HealthCounts(TypedDict):
    tasks_closed: int


class QualitySummaryBody(TypedDict):
    """``quality_summary.json``, the batch health check's format (fields in docs/report.md)."""

    run: dict[str, Any]
    tasks: dict[str, dict[str, Any]]


class ReportBody(TypedDict):
    """``GET /report``: the post-run report minus the verdict rows (``/report/verdicts``)."""

    run_id: str
    started_at: float | None
    ended_at: float | None
    plan_tasks: int | None
    quality_summary: QualitySummaryBody
    latency: LatencyBody
    perf_summary: dict[str, Any] | None
    accounting: AccountingSnapshot
    events: EventCounts
    health: HealthCounts
    inflight_at_end: dict[str, Any] | None
    forecast: NotRequired[ForecastAccuracy | None]
    """Once the run ended: its last live forecast against how it ended (``None``: none was made)."""


class HealthzBody(TypedDict):
    """``GET /healthz``: the process answers."""

    status: Literal["ok"]


class FollowerStatus(TypedDict):
    """The in-process follower (``serve --follow``), when there is one."""

    state: FollowerState
    last_error: str | None
    retries: int
    lines_sent: int


class ReadyBody(TypedDict):
    """``GET /readyz`` 200: replayed and the journal writable."""

    status: Literal["ready"]
    runs: int
    replayed: int
    follower: NotRequired[FollowerStatus]


class NotReadyBody(TypedDict):
    """``GET /readyz`` 503: why not (the replay's progress while replaying)."""

    status: Literal["replaying", "replay_failed", "journal_unavailable", "follower_stopped"]
    detail: NotRequired[str]
    replayed: NotRequired[int]
    journal_events: NotRequired[int]
    snapshot_seq: NotRequired[int]
    follower: NotRequired[FollowerStatus]


class OpenAPIBody(TypedDict):
    """``GET /openapi.json``: this document (OpenAPI 3.1)."""

    openapi: Literal["3.1.0"]
    info: dict[str, str]
    paths: dict[str, dict[str, Any]]
    components: dict[str, Any]


class Spread(TypedDict):
    p10: int
    p50: int
    p90: int


class BudgetEnd(TypedDict):
    finished: Spread
    drained: Spread


class ForecastBasis(TypedDict):
    method: str
    samples: int
    censored: int
    replicates: int
    seed: int
    scale: NotRequired[float]
    fail_share: NotRequired[float]
    reason: str | None
    """Why fields are ``null`` (too few completions, no plan, no budget), else ``None``."""


class ForecastBody(TypedDict):
    """``GET /v1/runs/{run_id}/forecast`` (``docs/http-api.md`` "Forecast")."""

    run_id: str
    as_of: float
    planned: int | None
    finished: int
    in_flight: int
    not_started: int | None
    concurrency: int
    by_budget_end: BudgetEnd | None
    cut_off: Spread | None
    eta_all_s: dict[str, float] | None
    budget_for_all_s: float | None
    basis: ForecastBasis


class ForecastActual(TypedDict):
    finished: int
    drained: int


class ForecastAccuracy(TypedDict):
    """``/report``'s ``forecast``: the last live forecast and how the run really ended."""

    last: ForecastBody
    actual: ForecastActual | None
    error: NotRequired[int]
    inside_p10_p90: NotRequired[bool]


class GroupBody(TypedDict):
    task_index: int | str
    planned: int | None
    finished: int
    in_flight: int
    duration_cv: float | None
    oldest_age_s: float


class GroupsBody(TypedDict):
    """``GET /v1/runs/{run_id}/groups``: open task groups, the longest-waiting first."""

    run_id: str
    as_of: float
    open: int
    untracked: int
    groups: list[GroupBody]


for _body in list(globals().values()):  # every body here is closed: an undeclared key is an error
    if is_typeddict(_body) and _body.__module__ == __name__:
        _body.__pydantic_config__ = _CLOSED
