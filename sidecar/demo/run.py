"""``rollout-sidecar demo``: the sidecar, a fake agent server and a dispatcher on one machine, live.

The fake NeMo Gym agent answers ``POST /run`` after the task's duration with its row
(:mod:`sidecar.demo.agent`): a request-level failure is an HTTP error the dispatcher turns into Gym's
failure row, an agent-reported one a 200 whose row has ``_ng_failure_class``, a task past the
timeout is cut there with ``timeout_exceeded``. The dispatcher is shaped as NeMo Gym's: a
concurrency gate, then a row is drained if the budget is spent or the sidecar's drain margin
(polled in the background; a missing answer keeps the last one) exceeds the time left, else it
is reported ``started`` and posted. It writes the run directory as NeMo Gym's collector does.

Time is compressed by :data:`SCALE`: the agent sleeps the real equivalent of each simulated
duration, the dispatcher reports real time scaled back up and the service runs on a simulated
wall clock, so every duration, quantile, margin, budget and age shown is in simulated seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import orjson
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dispatcher_client import ClientConfig, SidecarClient, SidecarError
from sidecar.demo.agent import agent_reply, gym_failure, timeout_row
from sidecar.http.report_files import fetch_page, fetch_report
from sidecar.http.server import ServerThread, ServiceThread, loop_factory
from sidecar.http.settings import ServiceSettings
from sidecar.perf import drained_result, should_drain
from sidecar.state.inflight import InflightRules
from sidecar.web.saved import write_html

__all__ = ["SCALE", "DemoConfig", "DispatchStats", "gym_failure_row", "live_line", "reply_for", "run_demo"]

SCALE: Final = 600.0
"""Simulated seconds per real second: one simulated minute per 0.1 s."""
REPEATS: Final = 4
MEAN_TASK_SECONDS: Final = 139.0
"""Mean of ``sample_task_seconds`` capped at an hour (200k draws): sizes the default plan."""
REQUEST_FAILURES: Final = frozenset({"agent_request_failed", "agent_run_error"})
"""Failure classes Gym builds from a ``/run`` that raised: the agent answers them as HTTP errors."""
_STAMPED: Final = ("_ng_task_index", "_ng_rollout_index", "agent_ref")


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """One demo; ``tasks=None`` plans 10% more than the budget can take, so the margin drains some."""

    duration_s: float = 30.0
    """Real seconds of dispatch budget; tasks in flight then finish, within one task timeout."""
    tasks: int | None = None
    concurrency: int = 8
    task_timeout_s: float = 3600.0
    seed: int = 2026
    out_dir: Path | None = None

    @property
    def budget_s(self) -> float:
        return self.duration_s * SCALE

    @property
    def num_tasks(self) -> int:
        return self.tasks or math.ceil(1.1 * self.concurrency * self.budget_s / MEAN_TASK_SECONDS / REPEATS)


def reply_for(seconds: float, row: dict[str, Any], timeout_s: float) -> tuple[float, int, bytes]:
    """``(simulated seconds, HTTP status, body)`` of the agent's answer to an attempt that takes
    ``seconds`` and ends with ``row``."""
    stamped = {key: row[key] for key in _STAMPED if key in row}
    if seconds > timeout_s:
        return timeout_s, 200, orjson.dumps(timeout_row(timeout_s, False) | stamped)
    if row.get("_ng_failure_class") in REQUEST_FAILURES:
        status = row["_ng_failure_http_status"] or 503
        return seconds, status, (row["_ng_failure_response_body"] or "").encode()
    return seconds, 200, orjson.dumps(row)


class _Agent(ServerThread):
    """The fake agent server, in its own thread and loop so its timing does not follow the dispatcher's."""

    label = "fake agent server"

    def __init__(self, seed: int, timeout_s: float, clock: Callable[[], float]) -> None:
        super().__init__()

        async def run(request: Request) -> Response:
            received = time.monotonic()
            try:
                row = orjson.loads(await request.body())
                task, rollout = int(row["_ng_task_index"]), int(row["_ng_rollout_index"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                return Response(f"a row with integer _ng_task_index and _ng_rollout_index: {exc!r}", 422)
            seconds, status, body = reply_for(*agent_reply(seed, task, rollout, clock()), timeout_s)
            await asyncio.sleep(max(0.0, seconds / SCALE - (time.monotonic() - received)))
            return Response(body, status, media_type="application/json" if status == 200 else "text/plain")

        self._app = Starlette(routes=[Route("/run", run, methods=["POST"])])

    async def _serve(self, sock: socket.socket) -> None:
        config = uvicorn.Config(self._app, log_config=None, access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        await self._server.serve(sockets=[sock])


@dataclass(slots=True)
class DispatchStats:
    """The dispatcher's counters, in simulated seconds (``report/dispatch.json``)."""

    planned: int
    budget_s: float
    dispatched: int = 0
    in_flight: int = 0
    succeeded: int = 0
    failed: int = 0
    drained: int = 0
    margin: float | None = None
    """The drain margin the latest drain check used."""
    first_drain: dict[str, float | None] | None = None
    last_dispatch_at_s: float | None = None
    stragglers_flagged: int = 0


def gym_failure_row(row: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """The failure row NeMo Gym writes when ``/run`` raised."""
    status, body, message = None, None, str(exc)
    if isinstance(exc, httpx.HTTPStatusError):
        status, body = exc.response.status_code, exc.response.text
        body = body[:2000] + "…" if len(body) > 2000 else body
        message = f"{status}, message={exc.response.reason_phrase!r}, url={str(exc.request.url)!r}"
    failure = gym_failure(status, type(exc).__name__, message, body)
    return failure | {key: row[key] for key in _STAMPED}


class _Dispatcher:
    """Dispatch the plan to the agent within the budget, tell the sidecar every step, write the run."""

    def __init__(self, config: DemoConfig, sidecar: SidecarClient, agent: httpx.AsyncClient, run_dir: Path):
        self.sidecar, self.agent, self.run_dir = sidecar, agent, run_dir
        self.stats = DispatchStats(planned=config.num_tasks * REPEATS, budget_s=config.budget_s)
        self.gate = asyncio.Semaphore(config.concurrency)
        self.origin = time.monotonic()

    def now(self) -> float:
        """Simulated seconds since dispatch began."""
        return (time.monotonic() - self.origin) * SCALE

    def write(self, name: str, row: dict[str, Any]) -> None:
        with (self.run_dir / name).open("ab") as handle:  # a line at a time, as the collector appends
            handle.write(orjson.dumps(row) + b"\n")

    async def run(self, rows: list[dict[str, Any]]) -> None:
        async def poll_margin() -> None:
            while True:
                with contextlib.suppress(SidecarError):  # fail open: keep the last margin
                    self.stats.margin = await self.sidecar.drain_margin()
                await asyncio.sleep(0.05)

        poller = asyncio.create_task(poll_margin())
        try:
            async with asyncio.TaskGroup() as group:
                for row in rows:
                    group.create_task(self.one(row))
        finally:
            poller.cancel()

    async def one(self, row: dict[str, Any]) -> None:
        stats, error, result = self.stats, None, None
        async with self.gate:  # held for the drain check and the /run call only, as in NeMo Gym
            now, margin = self.now(), stats.margin
            left = stats.budget_s - now
            if should_drain(left, margin):
                stats.drained += 1
                if stats.first_drain is None:
                    stats.first_drain = {"at_s": now, "time_left_s": left, "drain_margin_s": margin}
                drained = drained_result(left, margin) | {key: row[key] for key in _STAMPED}
                await self.sidecar.drained(row, drained)
                return
            stats.dispatched, stats.in_flight = stats.dispatched + 1, stats.in_flight + 1
            stats.last_dispatch_at_s = now
            await self.sidecar.started(row)
            try:
                response = (await self.agent.post("/run", content=orjson.dumps(row))).raise_for_status()
                result = orjson.loads(response.content)
            except (httpx.HTTPError, ValueError) as exc:
                error = exc
            finally:
                stats.in_flight -= 1
        seconds = self.now() - now
        if error is not None or not isinstance(result, dict):
            failure = gym_failure_row(row, error or ValueError(f"the agent answered {result!r:.100}"))
            stats.failed += 1
            self.write("rollouts_failures.jsonl", failure)
            await self.sidecar.failed(row, failure, seconds=seconds)
            return
        result |= {key: row[key] for key in _STAMPED}
        ng_perf = await self.sidecar.completed(row, result, seconds=seconds)
        if ng_perf is not None:
            result["ng_perf"] = ng_perf
        failed = result.get("_ng_failure_class") is not None
        stats.failed, stats.succeeded = stats.failed + failed, stats.succeeded + (not failed)
        self.write("rollouts_failures.jsonl" if failed else "rollouts.jsonl", result)


def _scrape(text: str, run_id: str) -> dict[str, float]:
    """One run's samples in a Prometheus exposition, keyed ``name`` or ``name{label value}``."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.pop("run_id", None) == run_id:
                label = "".join(f"{{{v}}}" for k, v in sample.labels.items() if k in ("quantile", "verdict"))
                samples[sample.name.removeprefix("rollout_sidecar_") + label] = sample.value
    return samples


def _clock(seconds: float) -> str:
    sign, total = "-" if seconds < 0 else "", round(abs(seconds))
    return f"{sign}{total // 3600}h{total % 3600 // 60:02d}m{total % 60:02d}s"


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def live_line(stats: DispatchStats, now: float, metrics: dict[str, float]) -> str:
    """The run now: the dispatcher's counters beside the sidecar's own metrics."""
    left, margin = stats.budget_s - now, stats.margin
    if left <= 0:
        state = "budget spent: nothing new starts"
    elif margin is not None and left < margin:
        state = "time left < drain margin: new rows are drained"
    else:
        state = "dispatching" if margin is not None else "dispatching (no margin before 5 samples)"
    quantiles = {p: metrics.get(f"task_duration_quantile_seconds{{0.{p}}}") for p in ("5", "75", "95")}
    health = {v: metrics.get(f"health_rollouts{{{v}}}", 0) for v in ("healthy", "unhealthy", "unobserved")}
    return (
        f"[sim {_clock(now)}/{_clock(stats.budget_s)}] dispatched {stats.dispatched} "
        f"in flight {stats.in_flight} ok {stats.succeeded} failed {stats.failed} drained {stats.drained} | "
        f"{(stats.succeeded + stats.failed) * 3600 / max(now, 1.0):,.0f} rollouts/h | "
        + " ".join(f"p{p:0<2} {_minutes(value)}" for p, value in quantiles.items())
        + f" | drain margin {_minutes(margin)} vs {_clock(left)} left: {state} | health "
        + ", ".join(f"{count:.0f} {verdict}" for verdict, count in health.items())
        + f" | stragglers {metrics.get('inflight_stragglers', 0):.0f}"
    )


def report_lines(report: dict[str, Any], summary: dict[str, Any], stats: DispatchStats) -> Iterator[str]:
    """The closing report, from the files ``rollout-sidecar report`` writes."""
    verdicts, issues = summary["run"]["verdicts"], summary["run"]["issues"]
    yield f"Report of run {report['run_id']} (durations are simulated: 1 minute = {60 / SCALE:g} s real)"
    yield (
        f"Rollout health: {sum(verdicts.values())} checked, {verdicts['healthy']} healthy, "
        f"{verdicts['unhealthy']} unhealthy, {verdicts['unobserved']} unobserved"
    )
    found = sorted(((count, check) for check, count in issues.items() if count), reverse=True)
    yield "  findings: " + (", ".join(f"{check} {count}" for count, check in found) or "none")
    yield "Latency (the sidecar's DispatchLatencyTracker):"
    yield from (f"  {line}" for line in str(report["latency"]["summary"]).splitlines())
    first = stats.first_drain or {}
    yield "  drain: " + (
        f"{stats.drained} rows drained; the first at {_clock(first['at_s'] or 0)} with "
        f"{_clock(first['time_left_s'] or 0)} left and a drain margin of {_minutes(first['drain_margin_s'])}"
        if first
        else "no row was drained (the plan fit in the budget)"
    )
    yield f"  stragglers: {stats.stragglers_flagged} in-flight rollouts flagged by the sidecar"
    perf = report.get("perf_summary") or {}
    keys = ("total_prompt_tokens", "total_completion_tokens", "mean_num_turns", "total_latency_p50_ms")
    yield "Perf summary (ng_perf): " + (
        ", ".join(f"{k} {round(perf[k], 3):,}" for k in keys if k in perf) or "none"
    )
    a = report["accounting"]
    balances = a["expected"] == a["succeeded"] + a["failed"] + a["drained"] + a["missing"]
    yield (
        f"Accounting: expected {a['expected']} = succeeded {a['succeeded']} + failed {a['failed']} "
        f"(terminal {a['failed_terminal']}) + drained {a['drained']} + missing {a['missing']}: "
        + ("balances" if balances else "DOES NOT BALANCE")
    )


async def _dispatch(
    wall: Callable[[], float], config: DemoConfig, run_id: str, urls: tuple[str, str], out_dir: Path,
    say: Callable[[str], None],
) -> tuple[DispatchStats, str]:
    """Declare the run, dispatch it with a live line every 2 s, end it: the stats and the last scrape."""
    named, prompt = {"name": "demo_agent"}, {"input": [{"role": "user", "content": "Solve the task."}]}
    rows = [
        {"responses_create_params": prompt, "_ng_task_index": t, "_ng_rollout_index": r, "agent_ref": named}
        for t in range(config.num_tasks)
        for r in range(REPEATS)
    ]
    inputs = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    (out_dir / "rollouts_materialized_inputs.jsonl").write_bytes(inputs)
    timeout, limits = config.task_timeout_s / SCALE + 10.0, httpx.Limits(max_connections=config.concurrency)
    async with (
        SidecarClient(urls[0], run_id=run_id, config=ClientConfig(clock=wall)) as sidecar,
        httpx.AsyncClient(base_url=urls[1], limits=limits, timeout=timeout) as agent,
        httpx.AsyncClient(base_url=urls[0], timeout=5.0) as reads,
    ):
        plan, timeout_s = dict.fromkeys(range(config.num_tasks), REPEATS), config.task_timeout_s
        await sidecar.start_run(plan=plan, task_timeout_s=timeout_s, dispatch_budget_s=config.budget_s)
        dispatcher, metrics = _Dispatcher(config, sidecar, agent, out_dir), ""

        async def show(every: float | None = None) -> None:
            nonlocal metrics
            while True:
                with contextlib.suppress(httpx.HTTPError):  # a failed scrape keeps the last one
                    metrics = (await reads.get("/metrics")).text
                say(live_line(dispatcher.stats, dispatcher.now(), _scrape(metrics, run_id)))
                if every is None:
                    return
                await asyncio.sleep(every)

        live = asyncio.create_task(show(every=2.0))
        try:
            await dispatcher.run(rows)
            await sidecar.run_ended()
            if not await sidecar.flush(30.0):
                raise RuntimeError(f"the sidecar at {urls[0]} left events unsent after 30 s: {sidecar.stats}")
        finally:
            live.cancel()
        await show()
        inflight = await reads.get(f"/v1/runs/{run_id}/inflight", params={"limit": 0})
        dispatcher.stats.stragglers_flagged = inflight.json()["flagged"]["stragglers"]
    return dispatcher.stats, metrics


def run_demo(config: DemoConfig, say: Callable[[str], None]) -> tuple[DispatchStats, dict[str, Any]]:
    """Run the whole demo, telling ``say`` what happens: the dispatcher's stats and the run's report.
    Both servers are stopped and their threads joined on return."""
    started = time.monotonic()
    say(
        f"rollout-sidecar demo: {config.num_tasks} tasks x {REPEATS} rollouts, "
        f"concurrency {config.concurrency}, dispatch budget {config.budget_s / 3600:.2f} simulated hours "
        f"({config.duration_s:g} s real); 1 simulated minute = {60 / SCALE:g} s real (x{SCALE:g})"
    )
    out_dir = (config.out_dir or Path(tempfile.mkdtemp(prefix="rollout-sidecar-demo-"))).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in [*out_dir.glob("journal.sqlite3*"), *out_dir.glob("rollouts*.jsonl")]:
        shutil.rmtree(old) if old.is_dir() else old.unlink()  # a fresh run replaces the previous demo's
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    journal, report_dir = out_dir / "journal.sqlite3", out_dir / "report"
    # The service's, the client's and the rows' clock: simulated seconds since a start placed a
    # budget and half a task timeout before now, so the run ends about when its page is written
    # (a run that ended over an hour ago would have left /metrics: metrics_retain_ended_s).
    origin_wall = time.time() - (config.budget_s + config.task_timeout_s / 2)
    origin = time.monotonic()

    def wall() -> float:
        return origin_wall + (time.monotonic() - origin) * SCALE

    # Straggling past 2x the p95 task duration (the service's default is 3x; the task timeout cuts
    # the demo's tail, so 3x would rarely show one), looked at every 0.05 s real.
    rules = InflightRules(straggler_factor=2.0, eval_interval_s=0.05)
    settings = ServiceSettings(host="127.0.0.1", port=0, journal_path=journal, inflight=rules)
    service = ServiceThread(settings, clock=wall)
    agent = _Agent(config.seed, config.task_timeout_s, wall)
    with contextlib.ExitStack() as stack:
        sidecar_url = service.start()
        stack.callback(service.stop)
        say(f"Live page: {sidecar_url}/runs/{run_id}")
        agent_url = agent.start()
        stack.callback(agent.stop)
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            urls = (sidecar_url, agent_url)
            stats, metrics = runner.run(_dispatch(wall, config, run_id, urls, out_dir, say))
        files = fetch_report(sidecar_url, run_id, report_dir)
        write_html(report_dir / "run.html", *fetch_page(sidecar_url, run_id))
    (report_dir / "metrics.prom").write_text(metrics, encoding="utf-8")
    (report_dir / "dispatch.json").write_bytes(orjson.dumps(asdict(stats), option=orjson.OPT_INDENT_2))
    report = orjson.loads(files.report.read_bytes())
    for line in ("", *report_lines(report, orjson.loads(files.summary.read_bytes()), stats)):
        say(line)
    say("Where things are:")
    say(f"  run directory (NeMo Gym layout): {out_dir}")
    say(f"  report: {report_dir} (quality_summary.json, rollout_verdicts.jsonl, report.json)")
    say(f"  page: {report_dir / 'run.html'} (one file, opens offline)")
    say(f"  metrics: the last scrape of {sidecar_url}/metrics in {report_dir / 'metrics.prom'}")
    say(f"  dispatcher's counters: {report_dir / 'dispatch.json'}")
    say(f"  journal: {journal} (replay it: rollout-sidecar serve --journal {journal})")
    say(f"  check it: rollout-sidecar health-check {out_dir} (writes the same two report files)")
    say(f"\nDemo finished in {time.monotonic() - started:.1f} s.")
    return stats, report
