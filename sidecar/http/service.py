"""The service's parts (journal, ingestor, metrics) with one start/stop, apart from HTTP so the
runner opens the journal right after binding and serves (503 run reads) while it replays."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, get_args

import structlog

from sidecar.export.metrics import ServiceMetrics
from sidecar.http.errors import ErrorCode
from sidecar.http.offloop import OffLoopReads
from sidecar.http.settings import ServiceSettings
from sidecar.ingest.engines import Engines, default_engines
from sidecar.ingest.ingestor import Ingestor
from sidecar.ingest.plans import plan_from_materialized
from sidecar.journal import STATE_SCHEMA, Journal, JournalError, JournalSchemaError
from sidecar.state.inflight import InflightEntry

__all__ = ["Service"]

_log = structlog.get_logger("sidecar.http.service")
#: Newly flagged rollouts logged per run and evaluation (all are counted and listed in /inflight).
_LOGGED_FLAGS = 20
#: Interpreter frames left for the server's own call stack above a value nested to the depth cap.
_STACK_HEADROOM = 1000


def _identity(entry: InflightEntry) -> dict[str, Any]:
    return {"task": entry.task, "rollout": entry.rollout, "attempt": entry.attempt}


class Service:
    """Owns the journal for its lifetime; :meth:`start` replays it before anything is served."""

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        journal: Journal | None = None,
        engines: Engines | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        # msgspec and the stdlib encoder count each nesting level against the recursion limit:
        # a body nested to the depth cap is then read and written, not refused with a 500
        sys.setrecursionlimit(max(sys.getrecursionlimit(), settings.max_json_depth + _STACK_HEADROOM))
        #: Wall clock of arrivals and in-flight ages (the demo runs the service on simulated time).
        self.clock = clock
        self.started = False
        self.ready = False
        self.metrics = ServiceMetrics(get_args(ErrorCode))
        #: The journal is the service's own file (trackers keep their side table beside it).
        self._own_journal = journal is None
        if journal is None:
            parent = settings.journal_path.parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise JournalError(
                    f"cannot create the journal's directory {str(parent)!r}: {exc.strerror or exc}; "
                    "give --journal a path in a writable directory",
                    path=settings.journal_path,
                ) from None
            journal = Journal(
                settings.journal_path, on_commit=self.metrics.on_commit, keep_snapshots=settings.snapshot_keep
            )
        self.journal = journal
        #: Journal records the replay applied so far (its progress callback, every 10,000).
        self._progress = 0
        #: ``serve --follow``'s follower (anything with ``status() -> dict``), shown in ``/readyz``.
        self.follower: Any = None
        #: The server's slow-client guard (``sidecar.http.guard.ConnectionGuard``), once serving.
        self.connection_guard: Any = None
        self.ingestor = Ingestor(
            journal,
            engines or default_engines(),
            on_event=self._on_event,
            health_interval_s=settings.health_metrics_interval_s,
            inflight_rules=settings.inflight,
            clock=clock,
            read_plan=functools.partial(
                plan_from_materialized,
                root=settings.inputs_root,
                max_line_bytes=settings.max_input_line_bytes,
                max_tasks=settings.max_plan_tasks,
            ),
            keep_rows=settings.keep_rows,
            snapshots=self._own_journal,
            snapshot_every_events=settings.snapshot_every_events,
            snapshot_every_s=settings.snapshot_every_s,
            max_runs=settings.max_runs,
            max_inflight=settings.max_inflight,
            max_identity_chars=settings.max_identity_chars,
        )
        self.body_bytes_held = 0
        """Body bytes reserved by ingest requests in progress (``--max-body-bytes-in-flight``);
        while any are, reads' builds step aside."""
        self.reads = OffLoopReads(self.ingestor.apply_lock, busy=lambda: self.body_bytes_held > 0)
        self.metrics.attach(
            lambda: self.ingestor.runs.values(),
            self.ingestor.now,
            ready=lambda: self.ready,
            follower=lambda: self.follower.status() if self.follower is not None else None,
            retain_ended_s=settings.metrics_retain_ended_s,
        )
        self._retention: asyncio.Task[None] | None = None
        self._inflight: asyncio.Task[None] | None = None
        self.otlp: Any = None  # sidecar.export.otlp.OtlpPusher while pushing
        self.trackers: Any = None  # sidecar.export.trackers.export.TrackerExport while exporting
        self.process_started = time.time()
        self._replay: asyncio.Task[None] | None = None
        #: The replay finished: the state is whole and may be snapshotted (never a partial replay's).
        self._replayed = False
        self.replay_error: BaseException | None = None

    def _on_event(self, kind: str, result: str, count: int) -> None:
        self.metrics.on_event(kind, result, count)
        self.reads.note_event()

    def _note_progress(self, applied: int) -> None:
        self._progress = applied

    @property
    def replay_progress(self) -> dict[str, int]:
        """``snapshot_seq`` (the loaded snapshot's seq), ``replayed`` (records applied after it) and
        ``journal_events`` (the journal's last seq)."""
        return {
            "replayed": max(self._progress, self.ingestor.replayed),
            "journal_events": self.journal.events,
            "snapshot_seq": self.ingestor.restored_seq,
        }

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
                age = {"age_s": round(moment - entry.started_at, 3), "threshold_s": threshold}
                _log.info("straggler flagged", run_id=run.run_id, **_identity(entry), **age)
            for entry in stalls[:_LOGGED_FLAGS]:
                age = {"heartbeat_age_s": round(moment - (entry.last_heartbeat or moment), 3)}
                _log.info("stalled rollout flagged", run_id=run.run_id, **_identity(entry), **age)
            flagged += len(stragglers) + len(stalls)
        return flagged

    async def _evaluate_inflight(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                # under the apply lock: a scrape built on a worker thread reads the same indexes
                async with self.ingestor.apply_lock:
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
        from sidecar.export.otlp import OtlpPusher, SeriesTimes, http_settings

        self.otlp = OtlpPusher(
            self.metrics.registry,
            http_settings(endpoint),
            self.settings.otlp_interval_s,
            SeriesTimes(self.series_start, self.histogram_extremes),
            on_result=self.metrics.on_otlp_result,
            clock=self.clock,
            apply_lock=self.ingestor.apply_lock,
        )
        self.otlp.start()

    async def _start_trackers(self) -> None:
        """MLflow / W&B export; a tracker whose client cannot even be built is logged and left off."""
        from sidecar.export.trackers.backends import make_backend
        from sidecar.export.trackers.export import ServiceReads, TrackerExport
        from sidecar.export.trackers.session import ExportStore
        from sidecar.http.json_bodies import dumps_report
        from sidecar.web.data import live_body
        from sidecar.web.page import saved_html

        def page(run: Any, now: float, report: dict[str, Any]) -> bytes:
            return saved_html(live_body(run, now), dict(run.timeline_body())).encode()

        settings = self.settings.trackers
        assert settings is not None
        path = self.settings.journal_path
        store = ExportStore(path.with_name(path.name + ".trackers.sqlite3") if self._own_journal else None)
        backends = []
        for name in settings.enabled:
            try:
                backends.append(await asyncio.to_thread(make_backend, name, settings))
            except Exception as exc:  # fail open: the service runs without this tracker
                _log.warning("tracker off", tracker=name, error=f"{type(exc).__name__}: {exc}"[:300])
        self.metrics.trackers_on(tuple(backend.name for backend in backends))
        reads = ServiceReads(
            runs=lambda: self.ingestor.runs.values(),
            build=self.reads.build,
            clock=self.clock,
            report=lambda run: dumps_report(run.report()),
            page=page,
        )
        self.trackers = TrackerExport(
            reads, settings, store, backends, on_result=self.metrics.on_tracker_result
        )
        self.trackers.start()

    async def open(self) -> None:
        """Open the journal (raises ``JournalError`` subclasses); nothing is replayed yet."""
        if self.started:
            return
        await self.journal.open()
        self.started = True
        try:
            await self._check_state_schema()
        except BaseException:
            await self.journal.close()  # nothing replayed, nothing to snapshot
            self.started = False
            raise

    def begin(self) -> None:
        """Replay on a worker thread, then start ingesting; returns at once (see ``ready``)."""
        if self._replay is None:
            self._replay = asyncio.get_running_loop().create_task(self._replay_then_start(), name="replay")

    async def start(self) -> None:
        """Open the journal, replay it and start ingesting; returns once ready (or at once when
        :meth:`begin` already runs the replay in the background)."""
        if self._replay is not None:
            return
        await self.open()
        self.begin()
        assert self._replay is not None
        await self._replay

    async def replay_outcome(self) -> BaseException | None:
        """Wait for the replay :meth:`begin` started; its error (None: the service is ready)."""
        if self._replay is not None:
            with contextlib.suppress(Exception):
                await self._replay
        return self.replay_error

    async def _replay_then_start(self) -> None:
        try:
            # The newest usable snapshot, then the journal after it; the replay freezes the
            # rebuilt state out of the cyclic collector's way (see ``Ingestor.replay``).
            await asyncio.to_thread(self.ingestor.replay, self._note_progress)
        except Exception as exc:
            self.replay_error = exc
            _log.error("journal replay failed", error=f"{type(exc).__name__}: {exc}")
            raise
        self._replayed = True
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
        if self.settings.trackers is not None and self.settings.trackers.enabled:
            await self._start_trackers()
        self.ready = True
        _log.info(
            "service ready",
            journal=str(self.settings.journal_path),
            runs=len(self.ingestor.runs),
            replayed=self.ingestor.replayed,
        )

    async def _check_state_schema(self) -> None:
        """Refuse a journal whose facts this build cannot read; stamp a new one."""
        stamp = self.journal.get_meta("state_schema")
        if stamp is None:
            await self.journal.set_meta("state_schema", STATE_SCHEMA.encode())
        elif stamp != STATE_SCHEMA.encode():
            raise JournalSchemaError(
                f"journal {self.settings.journal_path} holds facts in state schema "
                f"{stamp.decode(errors='replace')!r}; this build reads {STATE_SCHEMA!r}: run the "
                "rollout-sidecar version that wrote it, or start on a new journal path and re-feed "
                "the run from the dispatcher's rollouts.jsonl with the follower",
                path=self.settings.journal_path,
            )

    async def stop(self) -> None:
        """Drain queued events, then close the journal."""
        if not self.started:
            return
        self.ready = False
        if self._replay is not None and not self._replay.done():
            self._replay.cancel()  # the worker thread finishes its replay; its state is dropped
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._replay
        self._replay = None
        if self._retention is not None:
            self._retention.cancel()
            self._retention = None
        if self._inflight is not None:
            self._inflight.cancel()
            self._inflight = None
        await self.ingestor.stop()
        if self._replayed:
            await self.ingestor.snapshot()  # a restart then replays nothing
            self._replayed = False
        if self.otlp is not None:
            await self.otlp.stop()
            self.otlp = None
        if self.trackers is not None:
            await self.trackers.stop()
            self.trackers = None
        await self.journal.close()
        self.started = False
        _log.info("service stopped")
