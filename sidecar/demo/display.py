"""The demo's live progress: a rich panel on a terminal, plain periodic lines otherwise.

Numbers come from two places, as an operator would see them: the dispatcher's own counters
(dispatched, in flight, queued, drained, time left) and the sidecar's ``/metrics`` (latency
quantiles, drain margin, completions, health verdicts and findings). Rendering is pure
(:func:`render_panel`, :func:`render_line`); :func:`show_live` owns the refresh loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from sidecar.demo.dispatcher import DispatchStats
from sidecar.demo.live import SidecarView, scrape

__all__ = ["Frame", "clock_text", "minutes", "render_line", "render_panel", "show_live"]


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything one refresh shows."""

    run_id: str
    scale_text: str
    now: float
    """Simulated seconds since dispatch began."""
    stats: DispatchStats
    view: SidecarView


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def clock_text(seconds: float) -> str:
    sign = "-" if seconds < 0 else ""
    total = round(abs(seconds))
    return f"{sign}{total // 3600}h{total % 3600 // 60:02d}m{total % 60:02d}s"


def _per_hour(frame: Frame) -> float | None:
    return frame.view.completed * 3600.0 / frame.now if frame.now > 0 else None


def _margin(frame: Frame) -> float | None:
    """The margin the dispatcher decides with (polled from the sidecar), else the scraped gauge."""
    return frame.stats.margin if frame.stats.margin is not None else frame.view.drain_margin


def _drain_status(frame: Frame) -> tuple[str, str]:
    """``(text, style)`` of the drain decision a row starting now would get."""
    left = frame.stats.budget_s - frame.now
    margin = _margin(frame)
    if left <= 0:
        return "budget spent: nothing new starts", "bold red"
    if margin is not None and left < margin:
        return "time left < drain margin: new rows are drained", "bold yellow"
    if margin is None:
        return "dispatching (no margin before 5 samples)", "green"
    return "dispatching", "green"


def _counts(counter: Counter[str], limit: int = 4) -> str:
    items = [f"{name} {count}" for name, count in counter.most_common(limit) if count]
    return " · ".join(items) if items else "none"


def _quantiles(view: SidecarView) -> str:
    q = view.quantiles
    return (
        f"p50 {minutes(q.get('0.5'))} · p75 {minutes(q.get('0.75'))} · p95 {minutes(q.get('0.95'))}"
        f"  ({view.samples} samples)"
    )


def _inflight(view: SidecarView) -> str:
    """In-flight count, stragglers past the threshold, and the oldest rollout's age."""
    return (
        f"{view.inflight} · stragglers {view.stragglers} (older than {minutes(view.straggler_threshold)}) · "
        f"oldest {minutes(view.oldest_age)}"
    )


def render_panel(frame: Frame) -> RenderableType:
    """The terminal view of one frame."""
    stats, view = frame.stats, frame.view
    status, style = _drain_status(frame)
    rate = _per_hour(frame)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold cyan", no_wrap=True)
    grid.add_column()
    spent = min(max(frame.now, 0.0), stats.budget_s)
    grid.add_row(
        "Simulated time",
        Group(
            Text(f"{clock_text(frame.now)} of a {clock_text(stats.budget_s)} dispatch budget"),
            ProgressBar(total=stats.budget_s, completed=spent, width=50),
        ),
    )
    grid.add_row("Throughput", "-" if rate is None else f"{rate:,.0f} rollouts/hour")
    grid.add_row("Task latency", _quantiles(view))
    grid.add_row(
        "Drain margin",
        Text.assemble(
            f"{minutes(_margin(frame))} vs {clock_text(stats.budget_s - frame.now)} left → ", (status, style)
        ),
    )
    grid.add_row(
        "Dispatch",
        f"planned {stats.planned} · dispatched {stats.dispatched} · in flight {stats.in_flight} · "
        f"queued {stats.queued} · drained {stats.drained}",
    )
    grid.add_row(
        "Outcomes",
        f"succeeded {stats.succeeded} · failed {stats.failed} ({_counts(stats.failures, 3)})",
    )
    grid.add_row(
        "Health",
        f"healthy {view.verdicts['healthy']} · unhealthy {view.verdicts['unhealthy']} · "
        f"unobserved {view.verdicts['unobserved']} · tasks closed {view.tasks_closed}",
    )
    grid.add_row("Top findings", _counts(view.findings, 3))
    grid.add_row("In flight (sidecar)", _inflight(view))
    return Panel(
        grid, title=f"rollout-sidecar demo · run {frame.run_id}", subtitle=frame.scale_text, expand=False
    )


def render_line(frame: Frame) -> str:
    """One plain progress line (stdout is not a terminal)."""
    stats, view = frame.stats, frame.view
    rate = _per_hour(frame)
    q = view.quantiles
    status, _ = _drain_status(frame)
    return (
        f"[sim {clock_text(frame.now)}/{clock_text(stats.budget_s)}] "
        f"dispatched {stats.dispatched} in-flight {stats.in_flight} queued {stats.queued} "
        f"ok {stats.succeeded} failed {stats.failed} drained {stats.drained} | "
        f"{'-' if rate is None else f'{rate:,.0f}'} rollouts/h | "
        f"p50 {minutes(q.get('0.5'))} p75 {minutes(q.get('0.75'))} p95 {minutes(q.get('0.95'))} | "
        f"margin {minutes(_margin(frame))} vs {clock_text(stats.budget_s - frame.now)} left: {status} | "
        f"health {view.verdicts['healthy']} healthy {view.verdicts['unhealthy']} unhealthy "
        f"{view.verdicts['unobserved']} unobserved | in flight {_inflight(view)}"
    )


async def show_live(
    console: Console,
    metrics: httpx.AsyncClient,
    make_frame: Callable[[SidecarView], Frame],
    run_id: str,
    stop: asyncio.Event,
    *,
    interval_s: float = 0.25,
    line_interval_s: float = 2.0,
) -> SidecarView:
    """Refresh until ``stop`` is set; returns the last view scraped (a failed scrape keeps the previous)."""
    view = SidecarView()
    live = console.is_terminal
    last_line = 0.0
    context = Live(console=console, auto_refresh=False, transient=False) if live else None
    with context if context is not None else contextlib.nullcontext():
        while True:
            with contextlib.suppress(httpx.HTTPError):
                _, view = await scrape(metrics, run_id)
            frame = make_frame(view)
            if context is not None:
                context.update(render_panel(frame), refresh=True)
            elif time.monotonic() - last_line >= line_interval_s or stop.is_set():
                console.print(render_line(frame), soft_wrap=True, highlight=False, markup=False)
                last_line = time.monotonic()
            if stop.is_set():
                return view
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s if live else min(interval_s, line_interval_s))
