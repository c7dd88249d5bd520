"""The metric, parameter and artifact names logged into MLflow and W&B (docs/operations.md)."""

from __future__ import annotations

import platform
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sidecar.export import version
from sidecar.state.forecast import current

if TYPE_CHECKING:
    from sidecar.state.run import RunState

PREFIX = "rollout_sidecar/"
#: Logged with every live step, its value the step itself: a resumed exporter reads it back.
STEP_KEY = PREFIX + "step"
#: W&B table of the unhealthy rollouts (columns: :data:`UNHEALTHY_COLUMNS`).
UNHEALTHY_TABLE = PREFIX + "unhealthy_rollouts"
UNHEALTHY_COLUMNS = ("task_index", "rollout_index", "rollout_id", "checks", "findings")
#: Most unhealthy rollouts put into the table (the verdicts artifact has them all).
MAX_TABLE_ROWS = 10_000

_VERDICTS = ("healthy", "unhealthy", "unobserved")
_LIVE_QUANTILES = (("p50_s", 0.5), ("p75_s", 0.75), ("p95_s", 0.95))
_FINAL_QUANTILES = (("p50_s", "0.5"), ("p75_s", "0.75"), ("p90_s", "0.9"), ("p95_s", "0.95"),
                    ("p99_s", "0.99"), ("max_s", "1.0"))  # fmt: skip
_ACCOUNTING = ("expected", "succeeded", "failed", "failed_terminal", "failed_attempts", "drained",
               "missing", "pending", "unplanned", "tasks_planned", "tasks_complete")  # fmt: skip


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _kept(pairs: Iterable[tuple[str, Any]]) -> dict[str, float]:
    return {key: number for key, value in pairs if (number := _number(value)) is not None}


def live_metrics(run: RunState, now: float) -> dict[str, float]:
    """The run's figures at ``now`` (called on the read thread, as ``/metrics`` builds are)."""
    tracker = run.tracker
    margin = run.drain_margin(run.config.drain_margin_s, now=now)
    inflight = run.inflight.view(now, run.straggler_threshold())
    verdicts = run.health_view().verdicts
    failed_attempts = sum(run.failed.values())

    def pairs() -> Iterator[tuple[str, Any]]:
        rate, recent = run.rates()
        yield PREFIX + "throughput/rollouts_per_hour", rate
        yield PREFIX + "throughput/rollouts_per_hour_15m", recent
        for name, q in _LIVE_QUANTILES:
            yield PREFIX + "latency/" + name, tracker.quantile(q) if tracker.count else None
        yield PREFIX + "drain/margin_s", margin["drain_margin"]
        yield PREFIX + "drain/seconds_left", margin.get("seconds_left")
        yield PREFIX + "inflight/count", inflight.count
        yield PREFIX + "inflight/stragglers", inflight.stragglers
        yield PREFIX + "inflight/stalled", inflight.stalled
        yield PREFIX + "rollouts/completed", run.completed
        yield PREFIX + "rollouts/failed_attempts", failed_attempts
        yield PREFIX + "rollouts/drained", run.drained
        for verdict in _VERDICTS:
            yield PREFIX + "health/" + verdict, verdicts.get(verdict, 0)
        yield from _forecast_pairs(current(run, now))

    return _kept(pairs())


def _forecast_pairs(body: Mapping[str, Any] | None) -> Iterator[tuple[str, Any]]:
    """The forecast's figures as live keys (none while it says null)."""
    if body is None:
        return
    end, eta = body["by_budget_end"], body["eta_all_s"]
    if end is not None:
        for band in ("p10", "p50", "p90"):
            yield PREFIX + "forecast/finished_" + band, end["finished"][band]
        yield PREFIX + "forecast/drained_p50", end["drained"]["p50"]
        yield PREFIX + "forecast/cut_off_p50", body["cut_off"]["p50"]
    if eta is not None:
        yield PREFIX + "forecast/eta_all_p50_s", eta["p50"]
        yield PREFIX + "forecast/eta_all_p90_s", eta["p90"]
    yield PREFIX + "forecast/budget_for_all_s", body["budget_for_all_s"]


def final_metrics(report: Mapping[str, Any]) -> dict[str, float]:
    """The summary metrics of a ``/report`` body (``quality_summary`` included)."""
    latency = report.get("latency") or {}
    quantiles = latency.get("quantiles") or {}
    accounting = report.get("accounting") or {}
    run = (report.get("quality_summary") or {}).get("run") or {}
    verdicts = run.get("verdicts") or {}
    started, ended = report.get("started_at"), report.get("ended_at")

    def pairs() -> Iterator[tuple[str, Any]]:
        yield PREFIX + "final/rollouts_per_hour", latency.get("completions_per_hour")
        for name, label in _FINAL_QUANTILES:
            yield PREFIX + "final/latency/" + name, quantiles.get(label)
        yield PREFIX + "final/drain_margin_s", latency.get("drain_margin")
        yield PREFIX + "final/samples", latency.get("samples")
        events = report.get("events") or {}
        yield PREFIX + "final/completed", events.get("completed")
        yield PREFIX + "final/drained", events.get("drained")
        for name in _ACCOUNTING:
            yield PREFIX + "final/accounting/" + name, accounting.get(name)
        for verdict in _VERDICTS:
            yield PREFIX + "final/health/" + verdict, verdicts.get(verdict)
        yield PREFIX + "final/health/records", (run.get("artifacts") or {}).get("records")
        began, end = _number(started), _number(ended)
        if began is not None and end is not None:
            yield PREFIX + "final/duration_s", end - began
        forecast = report.get("forecast") or {}
        band = ((forecast.get("last") or {}).get("by_budget_end") or {}).get("finished") or {}
        yield PREFIX + "final/forecast/finished_p50", band.get("p50")
        yield PREFIX + "final/forecast/error", forecast.get("error")

    return _kept(pairs())


def run_params(config: Mapping[str, Any], report: Mapping[str, Any], tracker: str) -> dict[str, str]:
    """The run's parameters from its ``run_started`` ``config`` (empty for ``health-check``)."""
    summary_run = (report.get("quality_summary") or {}).get("run") or {}
    ignored = config.get("ignored_checks", summary_run.get("ignored_checks")) or []
    accounting = report.get("accounting") or {}
    values: dict[str, Any] = {
        "dispatch_budget_s": config.get("dispatch_budget_s"),
        "drain_margin_s": config.get("drain_margin_s"),
        "task_timeout_s": config.get("task_timeout_s"),
        "max_attempts": config.get("max_attempts"),
        "plan_tasks": report.get("plan_tasks"),
        "plan_rollouts": accounting.get("expected"),
        "ignored_checks": ",".join(sorted(ignored)) or "none",
        "run_id": report.get("run_id"),
        "version": version("rollout-sidecar"),
        "python": platform.python_version(),
        f"{tracker}_version": version(tracker),
    }
    return {PREFIX + name: str(value) for name, value in values.items() if value is not None}


def unhealthy_rows(verdicts: bytes) -> list[list[Any]]:
    """Rows of the unhealthy-rollouts table from ``rollout_verdicts.jsonl``'s bytes (capped)."""
    import orjson

    rows: list[list[Any]] = []
    for line in verdicts.splitlines():
        if b'"unhealthy"' not in line:
            continue
        record = orjson.loads(line)
        if record.get("verdict") != "unhealthy":
            continue
        findings = record.get("findings") or []
        checks = sorted({str(finding.get("check")) for finding in findings})
        rows.append([
            str(record.get("_ng_task_index")),
            str(record.get("_ng_rollout_index")),
            str(record.get("rollout_id")),
            ",".join(checks),
            orjson.dumps(findings).decode()[:4000],
        ])  # fmt: skip
        if len(rows) >= MAX_TABLE_ROWS:
            break
    return rows
