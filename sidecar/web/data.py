"""The page's data: one bounded JSON body per run, from the live service or from batch files.

The body is the same shape in three places (the live ``GET /v1/runs/{run_id}/page``, a saved
``report --html`` file and the batch ``health-check --html`` file), so one script draws all of
them. Its size does not grow with the run: counts and quantiles, a fixed number of histogram
buckets, at most :data:`UNHEALTHY_LIMIT` unhealthy rollouts and :data:`OLDEST_LIMIT` in-flight
ones. Nothing here imports the server (``health-check --html`` must stay HTTP-free).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

import orjson

from health.explain import explain_unobserved

if TYPE_CHECKING:
    from sidecar.state.run import RunState

__all__ = [
    "OLDEST_LIMIT", "PAGE_SCHEMA", "UNHEALTHY_LIMIT", "batch_body", "live_body", "recent_unhealthy",
    "unhealthy_rows",
]

PAGE_SCHEMA: Final = 1
"""Version of the page body; the script refuses a body it does not know."""
UNHEALTHY_LIMIT: Final = 50
"""Unhealthy rollouts the body lists: live, the latest (newest first, as the run keeps them);
batch, the first in report order (task, rollout). ``unhealthy_total`` counts all."""
OLDEST_LIMIT: Final = 10
"""Oldest in-flight rollouts the body lists."""
GROUPS_LIMIT: Final = 10
"""Open task groups the body lists (the longest waiting)."""
_DETAIL_CAP: Final = 300
"""Characters of one finding's detail kept (as JSON text); the rest is cut with an ellipsis."""


def _detail_text(detail: Any) -> str:
    text = detail if isinstance(detail, str) else orjson.dumps(detail).decode()
    return text if len(text) <= _DETAIL_CAP else text[: _DETAIL_CAP - 1] + "\u2026"


def unhealthy_rows(lines: Iterable[bytes | str | dict[str, Any]], limit: int = UNHEALTHY_LIMIT) -> list[Any]:
    """The first ``limit`` unhealthy verdict rows of ``rollout_verdicts.jsonl`` lines, reduced to
    identity and findings (check and detail text); stops reading once it has them."""
    out: list[Any] = []
    for line in lines:
        row = line if isinstance(line, dict) else orjson.loads(line)
        if row.get("verdict") != "unhealthy":
            continue
        identity = row.get("_ng_task_index"), row.get("_ng_rollout_index"), row.get("stage_index")
        out.append(_unhealthy(*identity, row.get("findings", [])))
        if len(out) >= limit:
            break
    return out


def recent_unhealthy(run: RunState) -> list[Any]:
    """The run's latest unhealthy rollouts, newest first, in the shape of :func:`unhealthy_rows`."""
    return [
        _unhealthy(task, rollout, stage, orjson.loads(findings))
        for task, rollout, stage, findings in reversed(run.recent_unhealthy)
    ]


def _unhealthy(task: Any, rollout: Any, stage: Any, findings: list[Any]) -> dict[str, Any]:
    """One unhealthy rollout as the page lists it: identity and (at most 20) findings."""
    shown = [{"check": str(f.get("check")), "detail": _detail_text(f.get("detail"))} for f in findings[:20]]
    return {"task_index": task, "rollout_index": rollout, "stage_index": stage, "findings": shown}


def _health(
    verdicts: dict[str, int], issues: dict[str, int], coverage: dict[str, dict[str, int]], tasks_closed: int,
    unhealthy: list[Any], order: str,
) -> dict[str, Any]:
    """The body's ``health``, with ``coverage`` (per check: rows evaluated, unobserved, ignored)
    and, when most rows are unobserved, the CLI's one-line reason why (``unobserved_reason``)."""
    summary = {"run": {"verdicts": verdicts, "artifacts": {"coverage": coverage}}}
    return {
        "verdicts": verdicts, "issues": issues, "coverage": coverage,
        "unobserved_reason": explain_unobserved(summary), "tasks_closed": tasks_closed,
        "unhealthy": unhealthy, "unhealthy_order": order, "unhealthy_total": verdicts.get("unhealthy", 0),
    }


def live_body(run: RunState, now: float) -> dict[str, Any]:
    """The page body of a run held by the service, at ``now``. O(1) in the run's size except the
    health counts of a run with a duplicate identity (``RunState.health_view``), so the route
    builds it off the loop."""
    from sidecar.state.durations import DURATION_BUCKETS
    from sidecar.state.forecast import current

    view = run.health_view()
    ended = run.ended_at is not None
    if ended:
        inflight = dict(run.inflight_at_end or {"count": 0, "oldest": []})
        inflight["oldest"] = list(inflight.get("oldest", []))[:OLDEST_LIMIT]
    else:
        inflight = run.inflight_body(now, limit=OLDEST_LIMIT)
    failed = [
        {"failure_class": label, "terminal": terminal, "count": count}
        for (label, terminal), count in sorted(run.failed.items())
    ]
    return {
        "schema": PAGE_SCHEMA,
        "source": "live",
        "run_id": run.run_id,
        "status": "ended" if ended else "running",
        "as_of": now,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "budget_s": run.config.dispatch_budget_s,
        "plan_tasks": len(run.plan) if run.plan is not None else None,
        "drain": run.drain_margin(run.config.drain_margin_s, now=run.ended_at if ended else now),
        "latency": run.latency(summary=False),
        "durations": {
            kind: {"bounds": list(DURATION_BUCKETS), "counts": list(run.durations[kind].counts)}
            for kind in ("completed", "failed")
        },
        "accounting": run.accounting.snapshot(ended=ended).as_dict(),
        "events": {"completed": run.completed, "failed": failed, "drained": run.drained},
        # coverage of the rollout checks only: a task check's needs every task judged, not live
        "health": _health(
            view.verdicts, view.issues, run.reducer.rollout_coverage(), view.tasks_closed,
            recent_unhealthy(run), "latest",
        ),
        "perf_summary": run.perf.result(run.perf_rollouts),
        "perf_rollouts": run.perf_rollouts,
        "tokens": dict(run.tokens),
        "inflight": inflight,
        "agents": run.agent_rows(),
        "forecast": current(run, now),
        "forecast_history": [list(point) for point in run.forecast.history],
        "groups": run.groups.blocking(now, GROUPS_LIMIT, run.plan),
    }


def batch_body(
    run_id: str, summary: dict[str, Any], unhealthy: list[Any], perf_summary: dict[str, Any] | None
) -> dict[str, Any]:
    """The page body of a batch health check: health and ``ng_perf`` only (the files hold no
    timing, accounting or in-flight state, so those parts are ``None`` and the page omits them)."""
    run = summary["run"]
    tokens = run.get("stats", {}).get("tokens", {})
    tasks = len(summary.get("tasks", {}))
    return {
        "schema": PAGE_SCHEMA, "source": "batch", "run_id": run_id, "status": "checked",
        "as_of": None, "started_at": None, "ended_at": None, "budget_s": None, "plan_tasks": tasks,
        "drain": None, "latency": None, "durations": None, "accounting": None, "events": None,
        "health": _health(
            run["verdicts"], run["issues"], run["artifacts"]["coverage"], tasks, unhealthy, "first"
        ),
        "perf_summary": perf_summary,
        "perf_rollouts": run["artifacts"]["records"],
        "tokens": {"prompt": tokens.get("prompt"), "completion": tokens.get("completion")},
        "inflight": None,
        "agents": None,
    }
