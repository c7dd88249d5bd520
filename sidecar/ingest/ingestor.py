"""Validated events -> journal commit -> run state, in one order that replay reproduces.

One sequencer task group-commits whatever requests queued, then applies the committed events in
journal order before answering, so a replay rebuilds exactly the same (order-dependent) state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import structlog

from health.process_tuning import freeze_long_lived
from sidecar.ingest.answers import EventOutcome, TooManyRuns, UnknownRun, check_identity
from sidecar.ingest.engines import Engines
from sidecar.ingest.events import (
    Event,
    Heartbeat,
    RowUnreadable,
    RunStarted,
    idempotency_key,
)
from sidecar.ingest.facts import derive_fact
from sidecar.ingest.plans import PlanError, plan_from_materialized
from sidecar.journal import (
    DAMAGED_KIND,
    CompletedFact,
    Fact,
    Journal,
    JournalEvent,
    JournalUnavailable,
    LatencyFact,
    RunStartedFact,
    decode_fact,
    encode_fact,
)
from sidecar.state.inflight import InflightBudget, InflightRules
from sidecar.state.run import RunState
from sidecar.state.snapshot import SnapshotError, decode_state, encode_state
from sidecar.wire import OutcomeStatus

__all__ = ["Ingestor"]

_log = structlog.get_logger("sidecar.ingest.ingestor")
_MAX_EVENTS_PER_APPEND = 4096
#: Longest the sequencer applies facts before it lets the event loop answer others.
_APPLY_SLICE_S = 0.0003


_ACCEPTED: Final = OutcomeStatus.ACCEPTED
_DUPLICATE: Final = OutcomeStatus.DUPLICATE
_UNKNOWN_RUN: Final = OutcomeStatus.UNKNOWN_RUN
_NOT_IN_FLIGHT: Final = OutcomeStatus.NOT_IN_FLIGHT


@dataclass(slots=True)
class _Pending:
    run_id: str
    events: list[Event]
    records: list[JournalEvent]
    facts: list[Fact]
    future: asyncio.Future[list[EventOutcome]] = field(repr=False)
    #: It creates its run and was counted against ``max_runs`` until applied.
    creates: bool = False


def _fail(batch: list[_Pending], exc: BaseException) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(exc)


class Ingestor:
    """Owns the run states; the only writer of the journal and of the state."""

    def __init__(
        self,
        journal: Journal,
        engines: Engines,
        *,
        on_event: Callable[[str, str, int], None] | None = None,
        health_interval_s: float = 2.0,
        clock: Callable[[], float] = time.time,
        inflight_rules: InflightRules | None = None,
        read_plan: Callable[[str], dict[str, int]] = plan_from_materialized,
        keep_rows: bool = False,
        snapshots: bool = False,
        snapshot_every_events: int = 100_000,
        snapshot_every_s: float = 300.0,
        max_runs: int | None = None,
        max_inflight: int | None = None,
        max_identity_chars: int | None = None,
    ) -> None:
        self._journal = journal
        self._read_plan = read_plan
        self._engines = engines
        self._on_event = on_event
        self._health_interval_s = health_interval_s
        self._clock = clock
        self._inflight_rules = inflight_rules
        #: Caps checked here, where they hold whatever path an event took (``None``: no cap).
        self._max_runs = max_runs
        self._max_identity_chars = max_identity_chars
        #: Entries tracked in flight over all runs, against ``serve --max-inflight``.
        self.inflight_budget = InflightBudget(max_inflight) if max_inflight is not None else None
        #: Runs that batches being committed (not yet applied) create, with how many such batches:
        #: each run counted once against ``max_runs``.
        self._creating: dict[str, int] = {}
        self._keep_rows = keep_rows
        #: Snapshots (and closed task groups) are kept in the journal's database; without them
        #: every group stays in memory and a restart replays the whole journal.
        self._snapshots = snapshots
        self._closed_groups = journal.groups if snapshots else None
        self._snapshot_every_events = snapshot_every_events
        self._snapshot_every_s = snapshot_every_s
        self._snapshot_task: asyncio.Task[int | None] | None = None
        self._snapshot_lock = asyncio.Lock()
        #: Ingest requests are parsed and derived on one worker thread at a time: several CPU-bound
        #: threads would each make the event loop wait its turn for the GIL, for no throughput.
        self.cpu = anyio.CapacityLimiter(1)
        self._last_snapshot_at = time.monotonic()
        self._since_snapshot = 0
        #: Seq of the newest journal record applied to the state, and of the newest snapshot.
        self.applied_seq = 0
        self.snapshot_seq = 0
        #: Seq of the snapshot the replay started from (0: none); the replay applies the records after it.
        self.restored_seq = 0
        #: Snapshots the replay could not use: ``(seq, reason)``, newest first.
        self.skipped_snapshots: list[tuple[int, str]] = []
        #: Seqs of journal records the replay skipped because their CRC did not match.
        self.damaged_records: list[int] = []
        self.runs: dict[str, RunState] = {}
        self._starting: dict[str, int] = {}
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.replayed = 0
        #: False while the journal's last append failed (the service answers 503 to ingest).
        self.journal_ok = True
        #: Held while committed events are applied; a reader on another thread holds it to see
        #: the run states still (``sidecar.http.offloop``).
        self.apply_lock = asyncio.Lock()

    def now(self) -> float:
        """The ingestor's wall clock (arrival times, in-flight ages)."""
        return self._clock()

    # -- lifecycle ------------------------------------------------------------------------

    def _restore_newest_snapshot(self) -> None:
        """Load the newest whole snapshot (CRC, schema, the closed groups it refers to); without one
        the whole journal is replayed, as records are never deleted."""
        journal = self._journal
        groups = self._closed_groups
        if not self._snapshots or groups is None:
            return
        began = time.perf_counter()
        last_seq = journal.last_seq()
        for seq, body in journal.snapshots():
            try:
                if body is None:
                    raise SnapshotError("its CRC does not match (damaged on disk)")
                if seq > last_seq:
                    raise SnapshotError(f"it covers seq {seq}, past the journal's last record {last_seq}")
                restored = decode_state(body, self._attach)
                damaged = groups.damaged_below(restored.next_group)
                if damaged:
                    raise SnapshotError(f"closed groups it refers to are missing or damaged: {damaged[:10]}")
            except SnapshotError as exc:
                _log.warning("snapshot skipped", seq=seq, reason=str(exc)[:300])
                self.skipped_snapshots.append((seq, str(exc)))
                continue
            self.runs = restored.runs
            groups.restart_at(restored.next_group)
            self.applied_seq = self.snapshot_seq = self.restored_seq = seq
            _log.info(
                "snapshot loaded", seq=seq, runs=len(self.runs), seconds=round(time.perf_counter() - began, 3)
            )
            return
        groups.restart_at(1)

    def _run_options(self) -> dict[str, Any]:
        """What every run state is built with, fresh or from a snapshot."""
        return {
            "health_interval_s": self._health_interval_s,
            "inflight_rules": self._inflight_rules,
            "clock": self._clock,
            "closed_groups": self._closed_groups,
            "inflight_budget": self.inflight_budget,
        }

    def _attach(self, data: dict[str, Any]) -> RunState:
        return RunState.from_snapshot(data, self._engines, **self._run_options())

    def replay(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild every run from the newest usable snapshot and the records after it; call once,
        before :meth:`start` (a worker thread may). Returns the number of records replayed."""
        self._restore_newest_snapshot()
        if self.inflight_budget is not None:  # what the restored runs hold, all runs together
            self.inflight_budget.held = sum(len(state.inflight) for state in self.runs.values())
        count = 0
        for record in self._journal.replay(after_seq=self.applied_seq):
            if record.kind == DAMAGED_KIND:  # its CRC failed: it costs this record only
                self.damaged_records.append(record.seq)
            else:
                self._apply(record.run_id, decode_fact(record.payload, seq=record.seq))
            self.applied_seq = record.seq
            count += 1
            if progress is not None and count % 10_000 == 0:
                progress(count)
        self.replayed = count
        self._since_snapshot = count
        # What was just rebuilt lives as long as the runs do and holds no garbage cycles: keep it
        # out of the cyclic collector's full passes (each would re-scan millions of objects).
        freeze_long_lived()
        _log.info(
            "journal replayed",
            events=count,
            runs=len(self.runs),
            **({"damaged_skipped": self.damaged_records} if self.damaged_records else {}),
        )
        return count

    @property
    def snapshot_due(self) -> bool:
        """Enough records (or time, with records) since the last snapshot to take another."""
        if not self._snapshots or self._since_snapshot == 0:
            return False
        every, interval = self._snapshot_every_events, self._snapshot_every_s
        return bool(every and self._since_snapshot >= every) or bool(
            interval and time.monotonic() - self._last_snapshot_at >= interval
        )

    async def snapshot(self) -> int | None:
        """Store a snapshot as of :attr:`applied_seq`, encoded off the loop under the apply lock;
        returns its seq (None: nothing new, no snapshots, or it failed and the journal is as it was)."""
        async with self._snapshot_lock:  # one at a time
            groups = self._closed_groups
            if not self._snapshots or groups is None or self.applied_seq == self.snapshot_seq:
                return None
            started = time.perf_counter()
            async with self.apply_lock:
                seq = self.applied_seq
                body = await anyio.to_thread.run_sync(encode_state, seq, groups.next_ref, self.runs)
                paused_s = time.perf_counter() - started
                flushed = groups.flush()
            self._since_snapshot = 0
            self._last_snapshot_at = time.monotonic()
            try:
                await self._journal.put_snapshot(seq, body)
                if flushed is not None:
                    await flushed
            except JournalUnavailable as exc:
                _log.warning("snapshot failed", seq=seq, error=str(exc))
                return None
            self.snapshot_seq = seq
            _log.info(
                "snapshot written",
                seq=seq,
                bytes=len(body),
                ingest_paused_s=round(paused_s, 3),
                seconds=round(time.perf_counter() - started, 3),
            )
            return seq

    def _schedule_snapshot(self) -> None:
        if self.snapshot_due and (self._snapshot_task is None or self._snapshot_task.done()):
            self._snapshot_task = asyncio.get_running_loop().create_task(self.snapshot(), name="snapshot")

    def drop_ended(self, retain_s: float, *, now: float | None = None) -> list[str]:
        """Forget runs that ended at least ``retain_s`` seconds ago (their events stay journaled)."""
        moment = self._clock() if now is None else now
        dropped = [
            run_id
            for run_id, state in self.runs.items()
            if state.ended_at is not None and moment - state.ended_at >= retain_s
        ]
        for run_id in dropped:
            del self.runs[run_id]
        if dropped:
            _log.info("ended runs dropped", runs=len(dropped), retain_s=retain_s)
        return dropped

    def start(self) -> None:
        """Start the sequencer, and take a snapshot at once if the replay had to skip one."""
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._sequencer(), name="ingest-sequencer")
        if self.skipped_snapshots:
            self._snapshot_task = loop.create_task(self.snapshot(), name="snapshot")

    async def stop(self) -> None:
        """Finish what is queued, then stop the sequencer."""
        if self._task is None:
            return
        await self._queue.join()
        if self._snapshot_task is not None:
            with contextlib.suppress(Exception):
                await self._snapshot_task
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    # -- requests -------------------------------------------------------------------------

    async def submit(self, run_id: str, events: list[Event]) -> list[EventOutcome]:
        """Journal and apply a batch; one outcome per event, in order (a raise stores nothing)."""
        if any(isinstance(event, Heartbeat) for event in events):
            return await self._submit_with_heartbeats(run_id, events)
        starts = isinstance(events[0], RunStarted)
        if run_id not in self.runs and run_id not in self._starting and not starts:
            raise UnknownRun(run_id)
        if starts:  # from now on, the run's other events are not refused as unknown
            self._starting[run_id] = self._starting.get(run_id, 0) + 1
        try:
            state = self.runs.get(run_id)
            settings = None if state is None else (state.config.source_path, state.ignored_checks)
            known = None if state is None else (state.generation, settings)
            records, facts = await anyio.to_thread.run_sync(
                self._derive_batch, run_id, events, known, limiter=self.cpu
            )
            future: asyncio.Future[list[EventOutcome]] = asyncio.get_running_loop().create_future()
            self._queue.put_nowait(_Pending(run_id, events, records, facts, future))
            return await future
        finally:
            if starts:
                left = self._starting[run_id] - 1
                if left:
                    self._starting[run_id] = left
                else:
                    del self._starting[run_id]

    def _derive_batch(
        self, run_id: str, events: list[Event], known: tuple[int, tuple[str, frozenset[str]] | None] | None
    ) -> tuple[list[JournalEvent], list[Fact]]:
        """Each event's fact and journal record, on a worker thread (rows are parsed and digested
        here, never on the loop); ``known`` is the run's generation and digest settings."""
        received_at = self._clock()
        generation, settings = (None, None) if known is None else known
        records, facts = [], []
        for index, event in enumerate(events):
            plan = None
            if isinstance(event, RunStarted):
                if event.materialized_inputs is not None:
                    try:
                        plan = self._read_plan(event.materialized_inputs)
                    except PlanError as exc:
                        exc.index = index
                        raise
                if generation is None or (event.generation or 0) > generation:
                    generation = event.generation or 0  # what applying this start will make the run
                    settings = (event.source_path, frozenset(event.ignored_checks))
            try:
                fact = derive_fact(
                    event,
                    received_at=received_at,
                    engines=self._engines,
                    settings=settings if (event.generation or 0) == generation else None,
                    plan=plan,
                    keep_rows=self._keep_rows,
                )
                key = idempotency_key(run_id, event)
            except RowUnreadable as exc:  # a row sent as bytes that orjson does not read
                exc.index = index
                raise
            if self._max_identity_chars is not None:
                check_identity(index, event, fact, self._max_identity_chars)
            facts.append(fact)
            records.append(JournalEvent(run_id=run_id, kind=event.kind, key=key, payload=encode_fact(fact)))
        return records, facts

    async def _submit_with_heartbeats(self, run_id: str, events: list[Event]) -> list[EventOutcome]:
        """Journal the other events first, then apply the heartbeats in memory (never journaled),
        so a ``started`` and its first heartbeat may share a request."""
        journaled: list[Event] = [event for event in events if not isinstance(event, Heartbeat)]
        outcomes = iter(await self.submit(run_id, journaled) if journaled else [])
        state = self.runs.get(run_id)
        if state is None:
            raise UnknownRun(run_id)
        now = self._clock()
        answers = []
        # under the apply lock: a scrape built on a worker thread reads the in-flight indexes
        async with self.apply_lock:
            for event in events:
                if not isinstance(event, Heartbeat):
                    answers.append(next(outcomes))
                    continue
                beat = state.heartbeat(event, now)
                if self._on_event is not None:
                    self._on_event(event.kind, _ACCEPTED if beat else _NOT_IN_FLIGHT, 1)
                answers.append(EventOutcome(_ACCEPTED if beat else _NOT_IN_FLIGHT, event.kind))
        return answers

    async def _sequencer(self) -> None:
        """Commit queued batches in order; committing batch N+1 overlaps applying N, which is
        applied first, so the state always follows journal order."""
        inflight: tuple[list[_Pending], asyncio.Task[list[JournalEvent | None]]] | None = None
        while True:
            while inflight is None:  # (no local keeps a batch alive while the next one is awaited)
                inflight = self._begin_first(await self._queue.get())
            batch, commit = inflight
            inflight = None
            try:
                try:
                    committed = await commit
                    self.journal_ok = True
                except JournalUnavailable as exc:
                    self.journal_ok = False
                    self._release(batch)
                    _fail(batch, exc)
                    continue
                except Exception as exc:  # a journal bug must not stop the sequencer
                    _log.exception("journal append failed unexpectedly")
                    self._release(batch)
                    _fail(batch, exc)
                    continue
                queued = self._take([])
                if queued:
                    inflight = self._begin(queued)
                try:
                    async with self.apply_lock:  # a report or scrape being built off the loop reads state
                        await self._apply_batch(batch, committed)
                except Exception as exc:  # committed events are replayed on restart; answer, keep going
                    _log.exception("answering a committed batch failed")
                    _fail(batch, exc)
                finally:
                    self._release(batch)
                if self._closed_groups is not None:
                    self._closed_groups.flush()
                self._schedule_snapshot()
            finally:
                for _ in range(len(batch)):
                    self._queue.task_done()
                # nothing of this batch (events, journal payloads) stays referenced while
                # the sequencer waits for the next one: bodies near the cap would stay resident
                del batch, commit
                committed = []
                queued = []

    def _take(self, batch: list[_Pending]) -> list[_Pending]:
        """``batch`` plus whatever else is queued and admitted, up to one append's worth of events."""
        size = sum(len(pending.records) for pending in batch)
        while not self._queue.empty() and size < _MAX_EVENTS_PER_APPEND:
            pending = self._queue.get_nowait()
            if self._admit(pending):
                batch.append(pending)
                size += len(pending.records)
        return batch

    def _begin_first(
        self, first: _Pending
    ) -> tuple[list[_Pending], asyncio.Task[list[JournalEvent | None]]] | None:
        """Begin committing ``first`` and what is queued behind it (``None``: all refused)."""
        batch = self._take([first] if self._admit(first) else [])
        return self._begin(batch) if batch else None

    def _admit(self, pending: _Pending) -> bool:
        """Check ``--max-runs`` here in the one sequencer, where no other batch's commit can interleave;
        False: refused (answered, and marked done in the queue)."""
        cap = self._max_runs
        run_id = pending.run_id
        if (
            cap is None
            or run_id in self.runs
            or not any(isinstance(fact, RunStartedFact) for fact in pending.facts)
        ):
            return True
        if run_id in self._creating:  # another batch creating the same run: counted once
            self._creating[run_id] += 1
            pending.creates = True
            return True
        held = len(self.runs) + len(self._creating)
        if held < cap:
            self._creating[run_id] = 1
            pending.creates = True
            return True
        if not pending.future.done():
            pending.future.set_exception(TooManyRuns(held))
        self._queue.task_done()
        return False

    def _release(self, batch: list[_Pending]) -> None:
        """The batch's runs are applied (or its commit failed): no longer counted as being created."""
        for pending in batch:
            if pending.creates:
                pending.creates = False
                left = self._creating[pending.run_id] - 1
                if left:
                    self._creating[pending.run_id] = left
                else:
                    del self._creating[pending.run_id]

    def _begin(self, batch: list[_Pending]) -> tuple[list[_Pending], asyncio.Task[list[JournalEvent | None]]]:
        records = [record for pending in batch for record in pending.records]
        return batch, asyncio.get_running_loop().create_task(self._journal.append(records))

    async def _apply_batch(self, batch: list[_Pending], committed: list[JournalEvent | None]) -> None:
        """Apply a committed batch in journal order, giving the event loop back every
        :data:`_APPLY_SLICE_S` (readers that hold the apply lock wait for the whole batch)."""
        position = 0
        began = time.perf_counter()
        # (kind, metric result) -> events: the event callback runs once per pair and batch
        counted: dict[tuple[str, str], int] = {}
        try:
            for pending in batch:
                outcomes = []
                for event, fact in zip(pending.events, pending.facts, strict=True):
                    stored = committed[position]
                    position += 1
                    if stored is not None:
                        self.applied_seq = stored.seq
                        self._since_snapshot += 1
                    outcome = self._outcome(pending.run_id, event, fact, stored)
                    pair = (event.kind, _ACCEPTED if stored is not None else _DUPLICATE)
                    counted[pair] = counted.get(pair, 0) + 1
                    outcomes.append(outcome)
                    if time.perf_counter() - began > _APPLY_SLICE_S:
                        await asyncio.sleep(0)
                        began = time.perf_counter()
                if not pending.future.done():
                    pending.future.set_result(outcomes)
        finally:
            if self._on_event is not None:
                for (kind, result), count in counted.items():
                    self._on_event(kind, result, count)

    def _outcome(self, run_id: str, event: Event, fact: Fact, stored: JournalEvent | None) -> EventOutcome:
        if stored is None:
            ng_perf = fact.ng_perf if isinstance(fact, CompletedFact) else None
            return EventOutcome(_DUPLICATE, event.kind, None, ng_perf)
        applied, ng_perf = self._apply(run_id, fact)
        return EventOutcome(_ACCEPTED if applied else _UNKNOWN_RUN, event.kind, stored.seq, ng_perf)

    def _apply(self, run_id: str, fact: Fact) -> tuple[bool, dict[str, Any] | None]:
        state = self.runs.get(run_id)
        if isinstance(fact, RunStartedFact):
            # A follower restarts a recreated/truncated file as a new generation: fresh state.
            if state is None or fact.generation > state.generation:
                if state is not None:
                    state.inflight.clear()  # the superseded generation's entries leave the budget
                self.runs[run_id] = RunState(
                    run_id,
                    RunStarted.model_validate_json(fact.config),
                    received_at=fact.received_at,
                    engines=self._engines,
                    plan=fact.plan,
                    **self._run_options(),
                )
            return True, None
        if state is None:
            _log.warning("event for a run that never started", run_id=run_id, kind=type(fact).__name__)
            return False, None
        if fact.generation < state.generation and not isinstance(fact, LatencyFact):
            return True, None  # late event of a superseded generation (follower restart)
        try:
            return True, state.apply_fact(fact)
        except Exception:
            _log.exception(
                "applying a committed event failed",
                run_id=run_id,
                kind=type(fact).__name__,
                task=repr(getattr(fact, "task", None))[:64],
                rollout=repr(getattr(fact, "rollout", None))[:64],
            )
            return True, None
