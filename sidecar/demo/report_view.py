"""The demo's closing report: health verdicts, latency, perf summary, accounting, and where things are.

Built from the files ``rollout-sidecar report`` writes (``quality_summary.json`` and
``report.json``), so what the demo prints is what an operator would read from them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from health.api import summary_report
from sidecar.demo.dispatcher import DispatchStats
from sidecar.demo.display import clock_text, minutes

__all__ = ["DemoPaths", "accounting_balances", "accounting_line", "report_lines"]


@dataclass(frozen=True, slots=True)
class DemoPaths:
    """Where one demo writes: the run directory is ``out_dir`` itself, as NeMo Gym's would be."""

    out_dir: Path

    @property
    def run_dir(self) -> Path:
        return self.out_dir

    @property
    def report_dir(self) -> Path:
        return self.out_dir / "report"

    @property
    def journal(self) -> Path:
        return self.out_dir / "journal.sqlite3"

    @property
    def page(self) -> Path:
        return self.report_dir / "run.html"

    @property
    def metrics(self) -> Path:
        return self.report_dir / "metrics.prom"

    @property
    def dispatch(self) -> Path:
        return self.report_dir / "dispatch.json"


def accounting_balances(accounting: Mapping[str, Any]) -> bool:
    """``expected == succeeded + failed + drained + missing`` (all present)."""
    parts = [accounting.get(name) for name in ("expected", "succeeded", "failed", "drained", "missing")]
    if any(not isinstance(part, int) for part in parts):
        return False
    expected, *rest = parts
    return expected == sum(rest)  # type: ignore[arg-type]


def accounting_line(accounting: Mapping[str, Any]) -> str:
    verdict = "balances" if accounting_balances(accounting) else "DOES NOT BALANCE"
    return (
        f"expected {accounting.get('expected')} = succeeded {accounting.get('succeeded')} "
        f"+ failed {accounting.get('failed')} (terminal {accounting.get('failed_terminal')}) "
        f"+ drained {accounting.get('drained')} + missing {accounting.get('missing')}: {verdict}"
    )


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{value:,}" if isinstance(value, int) else str(value)


def _findings(summary: Mapping[str, Any]) -> str:
    issues = summary["run"].get("issues", {})
    found = sorted(((count, check) for check, count in issues.items() if count), reverse=True)
    return ", ".join(f"{check} {count}" for count, check in found) or "none"


def _drain(stats: DispatchStats) -> str:
    if stats.first_drain is None:
        return "no row was drained (the plan fit in the budget)"
    at, left, margin = stats.first_drain
    return (
        f"{stats.drained} rows drained; the first at {clock_text(at)} with {clock_text(left)} left "
        f"and a drain margin of {minutes(margin)}"
    )


def _stragglers(first: Mapping[str, Any] | None, flagged: int) -> str:
    """How many in-flight rollouts the sidecar flagged as straggling, and the first of them."""
    if first is None:
        return f"{flagged} flagged by the sidecar (none seen by the live view)" if flagged else "none flagged"
    age = first["flagged_at"] - first["started_at"]
    return (
        f"{flagged} in-flight rollout(s) flagged by the sidecar; first: task {first['task_index']} "
        f"rollout {first['rollout_index']}, flagged at age {age / 60:.1f} min > threshold "
        f"{first['flagged_threshold_s'] / 60:.1f} min (GET /v1/runs/<run>/inflight)"
        if first.get("flagged_threshold_s") is not None
        else f"{flagged} flagged; first: task {first['task_index']} rollout {first['rollout_index']}"
    )


def report_lines(
    report: Mapping[str, Any],
    summary: Mapping[str, Any],
    stats: DispatchStats,
    paths: DemoPaths,
    *,
    sidecar_url: str,
    scale_text: str,
    straggler: Mapping[str, Any] | None = None,
    stragglers_flagged: int = 0,
) -> Iterator[str]:
    """The closing report, line by line (plain text; the CLI adds no markup)."""
    yield f"Report of run {report['run_id']} ({scale_text}; durations are simulated)"
    yield ""
    yield from summary_report(dict(summary), paths.report_dir / "quality_summary.json").splitlines()[:1]
    yield f"  findings: {_findings(summary)}"
    yield ""
    yield "Latency (the sidecar's DispatchLatencyTracker summary):"
    for line in str(report["latency"]["summary"]).splitlines():
        yield f"  {line}"
    yield f"  drain: {_drain(stats)}"
    yield f"  stragglers: {_stragglers(straggler, stragglers_flagged)}"
    yield ""
    perf = report.get("perf_summary")
    yield "Perf summary (ng_perf over the succeeded rollouts):"
    if isinstance(perf, Mapping):
        for key in (
            "overall_observability_coverage",
            "token_observability_coverage",
            "total_prompt_tokens",
            "total_completion_tokens",
            "mean_num_turns",
            "median_tokens_per_turn",
            "total_latency_p50_ms",
            "total_latency_p90_ms",
            "total_latency_p99_ms",
        ):
            if key in perf:
                yield f"  {key}: {_number(perf[key])}"
    else:
        yield "  none (no rollout carried an ng_perf)"
    yield ""
    yield f"Accounting: {accounting_line(report['accounting'])}"
    yield ""
    yield "Where things are:"
    yield f"  run directory (NeMo Gym layout): {paths.run_dir}"
    yield f"  report: {paths.report_dir} (quality_summary.json, rollout_verdicts.jsonl, report.json)"
    yield f"  page: {paths.page} (one file, opens offline); live at {sidecar_url}/runs/{report['run_id']}"
    yield f"  dispatcher's counters (simulated seconds): {paths.dispatch}"
    yield f"  metrics: {sidecar_url}/metrics during the run; final scrape in {paths.metrics}"
    yield f"  journal: {paths.journal}  (replay: rollout-sidecar serve --journal {paths.journal})"
    yield f"  check it: rollout-sidecar health-check {paths.run_dir}  (writes the same two report files)"
