"""The service's parts wired together: journal, ingestor and metrics, with one start/stop.

Kept apart from the HTTP layer so the server runner can open (and refuse) the journal
before it binds a port, and tests can drive the same object the app serves.
"""

from __future__ import annotations

import asyncio

import structlog

from sidecar._journal_facts import STATE_SCHEMA
from sidecar._journal_snapshot import SnapshotStore
from sidecar.engines import Engines, default_engines
from sidecar.ingest import Ingestor, JournalLike
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
        snapshots = None
        if journal is None:
            from sidecar.journal import Journal

            settings.journal_path.parent.mkdir(parents=True, exist_ok=True)
            journal = Journal(settings.journal_path, on_commit=self.metrics.on_commit)
            snapshots = SnapshotStore.beside(settings.journal_path, keep=settings.snapshot_keep)
        self.journal = journal
        self.preparer = Preparer(settings.workers) if settings.workers and engines is None else None
        self.ingestor = Ingestor(
            journal,
            engines or default_engines(),
            on_event=self.metrics.on_event,
            health_interval_s=settings.health_metrics_interval_s,
            preparer=self.preparer,
            keep_rows=settings.keep_rows,
            snapshots=snapshots,
            snapshot_every_events=settings.snapshot_every_events,
            snapshot_every_s=settings.snapshot_every_s,
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
        await self._check_state_schema()
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

    async def _check_state_schema(self) -> None:
        """Refuse a journal whose facts another build wrote; stamp a new (or pre-facts) one.

        A journal without the stamp was written before facts existed: replay migrates its
        records (derives their facts from the stored rows) and a snapshot right after means
        that happens once.
        """
        get_meta = getattr(self.journal, "get_meta", None)
        set_meta = getattr(self.journal, "set_meta", None)
        if get_meta is None or set_meta is None:
            return
        from sidecar.journal import JournalSchemaError

        stamp = get_meta("state_schema")
        if stamp is None:
            await set_meta("state_schema", STATE_SCHEMA.encode())
        elif stamp.decode(errors="replace") != STATE_SCHEMA:
            found = stamp.decode(errors="replace")
            raise JournalSchemaError(
                f"journal {self.settings.journal_path} holds facts in state schema {found!r}; this build "
                f"reads {STATE_SCHEMA!r}: run the rollout-sidecar version that wrote it, or start on a new "
                "journal path and re-feed the run from the dispatcher's rollouts.jsonl with the follower",
                path=self.settings.journal_path,
                found=0,
                supported=0,
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
        await self.ingestor.snapshot()  # a restart then replays nothing
        if self.preparer is not None:
            self.preparer.close()
        close = getattr(self.journal, "close", None)
        if close is not None:
            await close()
        self.started = False
        _log.info("service stopped")
