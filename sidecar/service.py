"""The service's parts wired together: journal, ingestor and metrics, with one start/stop.

Kept apart from the HTTP layer so the server runner can open (and refuse) the journal
before it binds a port, and tests can drive the same object the app serves.
"""

from __future__ import annotations

import asyncio
import functools

import structlog

from sidecar.engines import Engines, default_engines
from sidecar.ingest import Ingestor, JournalLike, plan_from_materialized
from sidecar.metrics import ServiceMetrics
from sidecar.prepare import Preparer
from sidecar.settings import ServiceSettings

__all__ = ["Service"]

_log = structlog.get_logger("sidecar.service")


class Service:
    """Owns the journal for its lifetime; :meth:`start` replays it before anything is served."""

    def __init__(
        self, settings: ServiceSettings, *, journal: JournalLike | None = None, engines: Engines | None = None
    ) -> None:
        self.settings = settings
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
            read_plan=functools.partial(
                plan_from_materialized,
                root=settings.inputs_root,
                max_line_bytes=settings.max_input_line_bytes,
                max_tasks=settings.max_plan_tasks,
            ),
        )
        self.metrics.attach(self.ingestor)
        self.started = False
        self.ready = False
        self._retention: asyncio.Task[None] | None = None

    async def _retain(self, retain_s: float) -> None:
        while True:
            self.ingestor.drop_ended(retain_s)
            await asyncio.sleep(min(60.0, max(retain_s / 4, 1.0)))

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
        await self.ingestor.stop()
        if self.preparer is not None:
            self.preparer.close()
        close = getattr(self.journal, "close", None)
        if close is not None:
            await close()
        self.started = False
        _log.info("service stopped")
