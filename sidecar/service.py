"""The service's parts wired together: journal, ingestor and metrics, with one start/stop.

Kept apart from the HTTP layer so the server runner can open (and refuse) the journal
before it binds a port, and tests can drive the same object the app serves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from sidecar.engines import Engines, default_engines
from sidecar.ingest import Ingestor, JournalLike
from sidecar.metrics import ServiceMetrics
from sidecar.prepare import Preparer
from sidecar.settings import ServiceSettings

__all__ = ["Service"]

_log = structlog.get_logger("sidecar.service")
#: Newly flagged rollouts logged per run and evaluation (all are counted and listed in /inflight).
_LOGGED_FLAGS = 20


class Service:
    """Owns the journal for its lifetime; :meth:`start` replays it before anything is served."""

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        journal: JournalLike | None = None,
        engines: Engines | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        #: Wall clock of arrivals and in-flight ages (the demo runs the service on simulated time).
        self.clock = clock
        self.metrics = ServiceMetrics()
        if journal is None:
            from sidecar.journal import Journal

            settings.journal_path.parent.mkdir(parents=True, exist_ok=True)
            journal = Journal(settings.journal_path, on_commit=self.metrics.on_commit)
        self.journal = journal
        self.preparer = Preparer(settings.workers) if settings.workers and engines is None else None
        self.ingestor = Ingestor(
            journal,
            engines or default_engines(),
            on_event=self.metrics.on_event,
            health_interval_s=settings.health_metrics_interval_s,
            preparer=self.preparer,
            inflight_rules=settings.inflight,
            clock=clock,
        )
        self.metrics.attach(self.ingestor)
        self.started = False
        self.ready = False
        self._retention: asyncio.Task[None] | None = None
        self._inflight: asyncio.Task[None] | None = None
        self.otlp: Any = None  # sidecar.otlp.OtlpPusher while pushing
        self.process_started = time.time()

    async def _retain(self, retain_s: float) -> None:
        while True:
            self.ingestor.drop_ended(retain_s)
            await asyncio.sleep(min(60.0, max(retain_s / 4, 1.0)))

    def evaluate_inflight(self, now: float | None = None) -> int:
        """Stamp and log rollouts that straggle or stall for the first time; returns how many."""
        moment = self.clock() if now is None else now
        flagged = 0
        for run in list(self.ingestor.runs.values()):
            if run.ended:
                continue
            threshold = run.straggler_threshold()
            stragglers, stalls = run.inflight.evaluate(moment, threshold)
            for entry in stragglers[:_LOGGED_FLAGS]:
                _log.info(
                    "straggler flagged",
                    run_id=run.run_id,
                    task=entry.task,
                    rollout=entry.rollout,
                    attempt=entry.attempt,
                    age_s=round(moment - entry.started_at, 3),
                    threshold_s=threshold,
                )
            for entry in stalls[:_LOGGED_FLAGS]:
                assert entry.last_heartbeat is not None
                _log.info(
                    "stalled rollout flagged",
                    run_id=run.run_id,
                    task=entry.task,
                    rollout=entry.rollout,
                    attempt=entry.attempt,
                    heartbeat_age_s=round(moment - entry.last_heartbeat, 3),
                )
            flagged += len(stragglers) + len(stalls)
        return flagged

    async def _evaluate_inflight(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.evaluate_inflight()
            except Exception:  # a bug here must not stop the evaluations
                _log.exception("in-flight evaluation failed")

    def series_start(self, labels: Mapping[str, str]) -> float:
        """Start of a metric series: its run's start, else this process's (OTLP cumulative start)."""
        run = self.ingestor.runs.get(labels.get("run_id", ""))
        return run.started_at if run is not None else self.process_started

    def histogram_extremes(self, family: str, labels: Mapping[str, str]) -> tuple[float, float] | None:
        """Min and max of a run's task-duration histogram series (other histograms keep none)."""
        run = self.ingestor.runs.get(labels.get("run_id", ""))
        if run is None or family != "rollout_sidecar_task_duration_seconds":
            return None
        histogram = run.durations.get(labels.get("outcome", ""))
        if histogram is None or histogram.low is None or histogram.high is None:
            return None
        return histogram.low, histogram.high

    def _start_otlp(self, endpoint: str) -> None:
        from sidecar.otlp import OtlpPusher, SeriesTimes

        self.otlp = OtlpPusher(
            self.metrics.registry,
            endpoint,
            self.settings.otlp_interval_s,
            SeriesTimes(self.series_start, self.histogram_extremes),
            on_result=self.metrics.on_otlp_result,
            clock=self.clock,
        )
        self.otlp.start()

    async def start(self) -> None:
        """Open the journal (raises ``JournalError`` subclasses), replay it, start ingesting."""
        if self.started:
            return
        open_ = getattr(self.journal, "open", None)
        if open_ is not None:
            await open_()
        self.started = True
        self.ingestor.replay()
        self.ingestor.start()
        if self.settings.retain_ended_s is not None:
            self._retention = asyncio.get_running_loop().create_task(
                self._retain(self.settings.retain_ended_s)
            )
        self._inflight = asyncio.get_running_loop().create_task(
            self._evaluate_inflight(self.settings.inflight.eval_interval_s)
        )
        if self.settings.otlp_endpoint is not None:
            self._start_otlp(self.settings.otlp_endpoint)
        self.ready = True
        _log.info(
            "service ready",
            journal=str(self.settings.journal_path),
            runs=len(self.ingestor.runs),
            replayed=self.ingestor.replayed,
        )

    async def stop(self) -> None:
        """Drain queued events, then close the journal."""
        if not self.started:
            return
        self.ready = False
        if self._retention is not None:
            self._retention.cancel()
            self._retention = None
        if self._inflight is not None:
            self._inflight.cancel()
            self._inflight = None
        await self.ingestor.stop()
        if self.otlp is not None:
            await self.otlp.stop()
            self.otlp = None
        if self.preparer is not None:
            self.preparer.close()
        close = getattr(self.journal, "close", None)
        if close is not None:
            await close()
        self.started = False
        _log.info("service stopped")
