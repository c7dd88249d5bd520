"""Writers of the self-contained page: from a live sidecar's page and timeline
(``report --html``, fetched by :func:`sidecar.http.report_files.fetch_page`) or from the batch
health check's files (``health-check --html``), both through :func:`sidecar.web.page.saved_html`.

No HTTP import, so the batch writer loads neither HTTP nor the service.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from sidecar.state.agents import AgentBody, AgentTotals, agent_name
from sidecar.web.data import batch_body, unhealthy_rows
from sidecar.web.page import saved_html

__all__ = ["HtmlError", "batch_page", "write_html"]


class HtmlError(RuntimeError):
    """The page could not be made or written; the message names the URL or file and the reason."""


def write_html(path: Path, page: dict[str, Any], timeline: dict[str, Any] | None) -> Path:
    """Write the page of ``page`` (and ``timeline``) to ``path`` atomically (temp file, rename),
    stamped with the wall-clock time it is written."""
    text = saved_html(page, timeline, time.time())
    part = path.with_name(f".{path.name}.part")
    try:
        part.write_text(text, encoding="utf-8")
        os.replace(part, path)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise HtmlError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    return path


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                yield line


def _perf(rollout_paths: Iterable[Path]) -> tuple[dict[str, Any] | None, list[AgentBody] | None]:
    """NeMo Gym's perf summary over the rows' ``ng_perf`` (their own, else built from the
    trajectory), and per agent (rows naming an ``agent_ref``) as the live page has it
    (:class:`sidecar.state.agents.AgentTotals`): rollouts, latency from ``ng_perf.total_latency_ms``
    where the row has one, turns, tool calls, tokens; no failures and no rate (the files hold
    neither)."""
    from sidecar.perf import PerfSummaryState, build_ng_perf

    state = PerfSummaryState()
    agents = AgentTotals()
    rows = 0
    for path in rollout_paths:
        for line in _lines(path):
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # an unreadable line is a finding of the health check, not a perf record
            if not isinstance(row, dict):
                continue
            rows += 1
            own = row.get("ng_perf")
            perf = own if isinstance(own, dict) else build_ng_perf(row)
            if perf is not None:
                state.add(perf)
            name = agent_name(row)
            if name is not None:
                agents.rollout(name, _latency_s(perf), perf)
    return state.result(rows), agents.rows(None, failures=False)


def _latency_s(perf: dict[str, Any] | None) -> float | None:
    """A row's ``ng_perf.total_latency_ms`` in seconds (``None``: absent, not a finite number >= 0)."""
    value = None if perf is None else perf.get("total_latency_ms")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        return None
    return float(value) / 1000.0


def batch_page(run_id: str, output_dir: Path, rollout_paths: Iterable[Path]) -> dict[str, Any]:
    """The page body of a batch check whose reports are in ``output_dir``."""
    summary_path = output_dir / "quality_summary.json"
    verdicts_path = output_dir / "rollout_verdicts.jsonl"
    try:
        summary = orjson.loads(summary_path.read_bytes())
        unhealthy = unhealthy_rows(_lines(verdicts_path))
    except (OSError, orjson.JSONDecodeError) as exc:
        raise HtmlError(f"cannot read the health check's reports in {str(output_dir)!r}: {exc}") from exc
    perf, agents = _perf(rollout_paths)
    body = batch_body(run_id, summary, unhealthy, perf)
    body["agents"] = agents
    return body
