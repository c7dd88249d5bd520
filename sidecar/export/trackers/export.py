"""The service side of tracker export: every interval, each run's figures to each tracker, on one
fail-open thread per tracker (a hung MLflow holds up neither W&B nor ingest).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from sidecar.export.failopen import FailOpenWorker, JobResult
from sidecar.export.trackers import RunTarget, TrackerName, TrackerSettings
from sidecar.export.trackers.keys import live_metrics
from sidecar.export.trackers.session import Backend, ExportStore, TrackerSession, final_package
from sidecar.state.run import RunState

_log = structlog.get_logger("sidecar.export.trackers")
#: Trackers whose thread was still busy at a shutdown's deadline (see :func:`abandoned_trackers`).
_ABANDONED: set[str] = set()


@dataclass(frozen=True, slots=True)
class ServiceReads:
    """What the export reads from the service, as the service builds it."""

    #: The runs held now.
    runs: Callable[[], Iterable[RunState]]
    #: ``build(key, fn)``: ``fn()`` on the read thread, serialized with ingest (shared by key).
    build: Callable[[Hashable, Callable[[], Any]], Awaitable[Any]]
    clock: Callable[[], float]
    #: The run's ``/report`` body, byte for byte as served.
    report: Callable[[RunState], bytes]
    #: The run's page as ``report --html`` writes it, given the time and the parsed report.
    page: Callable[[RunState, float, dict[str, Any]], bytes]


def abandoned_trackers() -> frozenset[str]:
    """Trackers left hanging by a shutdown: their library may hold the exit, so ``serve`` ends at once."""
    return frozenset(_ABANDONED)


def target_of(run: RunState, name: TrackerName) -> RunTarget:
    """Where ``run`` goes in tracker ``name``: the run the client named, else a new one."""
    tracking = run.config.tracking
    if tracking is None:
        return RunTarget(run.run_id)
    return RunTarget(run.run_id, tracking.mlflow_run_id if name == "mlflow" else tracking.wandb_run_path)


class _Channel:
    """One tracker: its session (used on its thread only) and the loop's view of its runs."""

    def __init__(
        self, session: TrackerSession, worker: FailOpenWorker, finished: set[str], retry_s: float
    ) -> None:
        self.session = session
        self.worker = worker
        self.finished = finished  # written by the worker thread, read by the loop
        self.final_queued: set[str] = set()
        self.live_queued: set[str] = set()  # runs whose live step waits for the thread
        self.retry_s = retry_s
        self._retry_at = 0.0

    def resting(self, now: float) -> bool:
        """True when the tracker is down and this step is not a retry (one per ``retry_s``)."""
        if not self.worker.outage.down:
            return False
        if now >= self._retry_at:
            self._retry_at = now + self.retry_s
            return False
        return True

    def submit_live(self, target: RunTarget, metrics: dict[str, float]) -> None:
        """Queue one live step, unless the previous one of the run has not even started."""
        if target.run_id in self.live_queued:
            self.worker.skip("busy")
            return

        def job() -> None:
            self.live_queued.discard(target.run_id)
            self.session.log_live(target, metrics)

        self.live_queued.add(target.run_id)  # before the thread can take (and discard) it
        if not self.worker.submit(job):
            self.live_queued.discard(target.run_id)

    @property
    def name(self) -> TrackerName:
        return self.session.backend.name


class TrackerExport:
    """Exports every run ``reads`` shows to the configured trackers (see the module docstring)."""

    def __init__(
        self,
        reads: ServiceReads,
        settings: TrackerSettings,
        store: ExportStore,
        backends: list[Backend],
        *,
        on_result: Callable[[str, JobResult], None] = lambda tracker, result: None,
    ) -> None:
        self.reads = reads
        self.settings = settings
        self.store = store
        self.channels: list[_Channel] = []
        for backend in backends:
            name = backend.name
            worker = FailOpenWorker(
                f"tracker-{name}",
                maxsize=settings.queue_size,
                on_result=lambda result, name=name: on_result(name, result),  # type: ignore[misc]
            )
            session = TrackerSession(backend, store)
            retry_s = max(settings.interval_s, settings.retry_down_s)
            self.channels.append(_Channel(session, worker, store.finished(name), retry_s))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tracker-export")
        _log.info(
            "tracker export on", trackers=[c.name for c in self.channels], interval_s=self.settings.interval_s
        )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.interval_s)
            try:
                await self.tick()
            except Exception:  # a bug here must not stop later steps
                _log.exception("tracker export step failed")

    async def tick(self) -> None:
        """One step of every live run, and the final summary of every ended run not yet summarised."""
        moment = time.monotonic()
        active = [channel for channel in self.channels if not channel.resting(moment)]
        for channel in self.channels:
            if channel not in active:
                channel.worker.skip("down")
        if not active:
            return
        for run in list(self.reads.runs()):
            if run.ended:
                await self._final(run, active)
            else:
                await self._live(run, active)

    async def _live(self, run: RunState, active: list[_Channel]) -> None:
        now = self.reads.clock()
        metrics = await self.reads.build(
            ("tracker-live", run.run_id, id(run), now), lambda: live_metrics(run, now)
        )
        for channel in active:
            channel.submit_live(target_of(run, channel.name), metrics)

    async def _final(self, run: RunState, active: list[_Channel]) -> None:
        channels = [c for c in active if run.run_id not in c.finished and run.run_id not in c.final_queued]
        if not channels:
            return
        reads = self.reads
        rid, key = run.run_id, id(run)
        report_bytes = await reads.build(("report", rid, key), lambda: reads.report(run))
        summary = await reads.build(("summary", rid, key), run.reducer.summary_bytes)
        lines = await reads.build(("verdicts", rid, key), lambda: list(run.reducer.iter_verdict_lines()))
        report = orjson.loads(report_bytes)
        now = reads.clock()
        html = await reads.build(("tracker-html", rid, key), lambda: reads.page(run, now, report))
        # The files byte-identical to what ``rollout-sidecar report`` (and ``report --html``) writes.
        body = {name: value for name, value in report.items() if name != "quality_summary"}
        indented = orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n"
        files = {"quality_summary.json": summary, "rollout_verdicts.jsonl": b"".join(lines),
                 "report.json": indented, "report.html": html}  # fmt: skip
        if report.get("perf_summary") is not None:
            perf = orjson.dumps(report["perf_summary"], option=orjson.OPT_INDENT_2)
            files["perf_summary.json"] = perf + b"\n"
        config = {name: getattr(run.config, name) for name in _CONFIG_PARAMS}
        for channel in channels:
            package = final_package(config, report, files, channel.name)
            target = target_of(run, channel.name)

            def job(channel: _Channel = channel, target: RunTarget = target, package: Any = package) -> None:
                try:
                    channel.session.log_final(target, package)
                    channel.finished.add(target.run_id)
                finally:
                    channel.final_queued.discard(target.run_id)

            if channel.worker.submit(job):
                channel.final_queued.add(rid)

    async def stop(self) -> None:
        """A last step (finals of runs that just ended), then at most the deadline for the threads."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        try:
            await asyncio.wait_for(self.tick(), self.settings.stop_deadline_s)
        except Exception:  # a read that does not finish in time: the journal has the run
            _log.info("last tracker step skipped at shutdown")
        deadline = self.settings.stop_deadline_s

        def close(channel: _Channel) -> None:
            channel.worker.submit(channel.session.close)
            if not channel.worker.stop(deadline):
                _ABANDONED.add(channel.name)
                _log.warning(
                    "tracker did not answer by the shutdown deadline: abandoned",
                    tracker=channel.name,
                    deadline_s=deadline,
                )

        await asyncio.gather(*(asyncio.to_thread(close, channel) for channel in self.channels))
        self.store.close()


#: ``run_started`` fields logged as parameters.
_CONFIG_PARAMS = ("dispatch_budget_s", "drain_margin_s", "task_timeout_s", "max_attempts", "ignored_checks")
