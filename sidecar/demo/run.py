"""Orchestration of ``rollout-sidecar demo``: sidecar, fake agent, dispatcher, live view, report.

Order of events: the real sidecar service starts on an ephemeral loopback port with its
journal in the output directory; the fake agent server starts on another; the dispatcher
declares the run (its plan and task timeout) and dispatches within its budget while the live
view scrapes ``/metrics``; the run ends, every event is acknowledged, the report is fetched
with the code behind ``rollout-sidecar report``; then both servers stop and their threads
are joined, whatever happened.

The dispatch budget is applied by the dispatcher, as in NeMo Gym, and declared to the sidecar
too (``dispatch_budget_s``), so its page and ``/drain_margin`` show the time left against the
drain margin and the moment starting a task became pointless. The demo's service, its client
and its rows run on one simulated wall clock (simulated seconds since a start placed a budget and
half a task timeout before now, so the simulated run is over about when its page is written), so the ages
of in-flight rollouts, the straggler threshold and the rates are in the same unit; the
dispatcher reports each dispatch with ``started`` and the demo shows the first straggler the
sidecar flagged.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from rich.console import Console

from dispatcher_client import ClientConfig, SidecarClient
from sidecar.demo.agent_server import AgentServer
from sidecar.demo.config import DemoConfig, SimClock, TimeScale
from sidecar.demo.dispatcher import Dispatcher, DispatchStats
from sidecar.demo.display import Frame, show_live
from sidecar.demo.live import SidecarView, scrape
from sidecar.demo.report_view import DemoPaths
from sidecar.demo.run_files import RunFiles
from sidecar.demo.synthetic import materialized_rows
from sidecar.http.report_files import ReportFiles, fetch_report
from sidecar.http.server import ServiceThread, loop_factory
from sidecar.http.settings import ServiceSettings
from sidecar.state.inflight import InflightRules
from sidecar.web.saved import fetch_page, write_html

__all__ = ["DemoError", "DemoResult", "prepare_out_dir", "run_demo"]

_FLUSH_TIMEOUT_S = 30.0
#: Straggling past 2x the p95 task duration (the service default is 3x; the demo's long tail is
#: cut by the task timeout, so 3x would rarely show one), evaluated every 0.05 real seconds.
_STRAGGLER_RULES = InflightRules(straggler_factor=2.0, eval_interval_s=0.05)
_JOURNAL_FILES = ("journal.sqlite3", "journal.sqlite3-wal", "journal.sqlite3-shm", "journal.sqlite3.lock")


class DemoError(RuntimeError):
    """The demo could not complete (a server failed, or the sidecar did not take every event)."""


@dataclass(frozen=True, slots=True)
class DemoResult:
    run_id: str
    paths: DemoPaths
    files: ReportFiles
    stats: DispatchStats
    view: SidecarView
    """The final scrape of the run's metrics."""
    report: dict[str, Any]
    summary: dict[str, Any]
    sidecar_url: str
    agent_url: str
    rows_written: int
    failures_written: int
    real_seconds: float
    straggler: dict[str, Any] | None = None
    """The first in-flight rollout the sidecar flagged as straggling (identity and ages), if any."""
    stragglers_flagged: int = 0


def prepare_out_dir(out_dir: Path | None) -> DemoPaths:
    """``out_dir`` (created) or a fresh temporary directory; a previous demo's journal is replaced."""
    if out_dir is None:
        out_dir = Path(tempfile.mkdtemp(prefix="rollout-sidecar-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in _JOURNAL_FILES:
        (out_dir / name).unlink(missing_ok=True)
    return DemoPaths(out_dir.resolve())


@dataclass(slots=True)
class _Stragglers:
    """What the demo saw of the sidecar's straggler flags."""

    first: dict[str, Any] | None = None
    flagged: int = 0

    def look(self, view: SidecarView) -> None:
        oldest = view.oldest
        if self.first is None and oldest is not None and oldest.get("flagged_at") is not None:
            self.first = dict(oldest)


def simulated_wall_clock(scale: TimeScale, lead_s: float = 0.0) -> Callable[[], float]:
    """Unix time ``lead_s`` before creation plus simulated seconds since: the demo's clock."""
    origin_wall, origin = time.time() - lead_s, time.monotonic()
    return lambda: origin_wall + scale.to_sim(time.monotonic() - origin)


async def _dispatch_phase(
    wall: Callable[[], float],
    config: DemoConfig,
    run_id: str,
    sidecar_url: str,
    agent_url: str,
    files: RunFiles,
    console: Console,
    stragglers: _Stragglers,
) -> tuple[DispatchStats, SidecarView, str]:
    rows = list(materialized_rows(config.synthetic(), config.seed))
    files.write_inputs(rows)
    real_timeout = config.time_scale.to_real(config.task_timeout_s) + 10.0
    limits = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
    async with (
        SidecarClient(sidecar_url, run_id=run_id, config=ClientConfig(clock=wall)) as sidecar,
        httpx.AsyncClient(base_url=agent_url, limits=limits, timeout=real_timeout) as agent,
        httpx.AsyncClient(base_url=sidecar_url, timeout=5.0) as metrics,
    ):
        await sidecar.start_run(
            plan={task: config.repeats for task in range(config.num_tasks)},
            task_timeout_s=config.task_timeout_s,
            dispatch_budget_s=config.budget_s,
        )
        clock = SimClock(config.time_scale)
        dispatcher = Dispatcher(
            rows,
            agent=agent,
            sidecar=sidecar,
            files=files,
            clock=clock,
            budget_s=config.budget_s,
            concurrency=config.concurrency,
        )
        stats = dispatcher.stats

        def frame(view: SidecarView) -> Frame:
            stragglers.look(view)
            now = stats.ended_at if stats.ended_at is not None else clock.now()
            return Frame(run_id, config.time_scale.describe(), now, stats, view)

        stop = asyncio.Event()
        live = asyncio.create_task(show_live(console, metrics, frame, run_id, stop))
        try:
            await dispatcher.run()
            await sidecar.run_ended()
            if not await sidecar.flush(_FLUSH_TIMEOUT_S):
                raise DemoError(
                    f"the sidecar at {sidecar_url} did not acknowledge every event within "
                    f"{_FLUSH_TIMEOUT_S:.0f} s (client stats: {sidecar.stats})"
                )
        finally:
            stop.set()
            await live
        text, view = await scrape(metrics, run_id)
        inflight = await metrics.get(f"/v1/runs/{run_id}/inflight", params={"limit": 0})
        if inflight.status_code == 200:
            stragglers.flagged = int(inflight.json()["flagged"]["stragglers"])
    return stats, view, text


def run_demo(config: DemoConfig, console: Console) -> DemoResult:
    """Run the whole demo and return what it produced; servers and threads are gone on return."""
    started = time.monotonic()
    paths = prepare_out_dir(config.out_dir)
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    synthetic = config.synthetic()
    settings = ServiceSettings(
        host="127.0.0.1", port=0, journal_path=paths.journal, inflight=_STRAGGLER_RULES
    )
    # the service's, the client's and the rows' clock; the run ends about when its page is written
    # (a run that ended over an hour ago would have left /metrics: metrics_retain_ended_s)
    wall = simulated_wall_clock(config.time_scale, config.budget_s + config.task_timeout_s / 2)
    service = ServiceThread(settings, clock=wall)
    stragglers = _Stragglers()
    agent = AgentServer(synthetic, config.seed, config.time_scale, config.task_timeout_s, wall)
    with contextlib.ExitStack() as stack:
        sidecar_url = service.start()
        stack.callback(service.stop)
        page_url = f"{sidecar_url}/runs/{run_id}"
        console.print(f"Live page: {page_url}", soft_wrap=True, markup=False, highlight=False)
        agent_url = agent.start()
        stack.callback(agent.stop)
        with RunFiles(paths.run_dir) as files, asyncio.Runner(loop_factory=loop_factory()) as runner:
            stats, view, metrics_text = runner.run(
                _dispatch_phase(wall, config, run_id, sidecar_url, agent_url, files, console, stragglers)
            )
        report_files = fetch_report(sidecar_url, run_id, paths.report_dir)
        write_html(paths.page, *fetch_page(sidecar_url, run_id))  # the same page, one file
        paths.metrics.write_text(metrics_text, encoding="utf-8")
        dispatch = {"time_scale": config.time_scale.factor, **stats.as_dict()}
        paths.dispatch.write_bytes(orjson.dumps(dispatch, option=orjson.OPT_INDENT_2) + b"\n")
    return DemoResult(
        run_id=run_id,
        paths=paths,
        files=report_files,
        stats=stats,
        view=view,
        report=orjson.loads(report_files.report.read_bytes()),
        summary=orjson.loads(report_files.summary.read_bytes()),
        sidecar_url=sidecar_url,
        agent_url=agent_url,
        rows_written=files.rows_written,
        failures_written=files.failures_written,
        real_seconds=time.monotonic() - started,
        straggler=stragglers.first,
        stragglers_flagged=stragglers.flagged,
    )
