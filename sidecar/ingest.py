"""Validated events -> journal commit -> run state, in one order that replay reproduces.

Requests hand their validated events to a single sequencer task. It takes everything
queued, appends it to the journal in one call (so concurrent requests share a group
commit), and only after the commit applies the new events to the run states in journal
order and answers each request. Because state is only ever changed by committed events in
commit order, replaying the journal on start rebuilds exactly the same state, including
order-dependent parts such as ``record_failure``'s median test and the digests' ordinals.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import orjson
import structlog

from sidecar.engines import Engines
from sidecar.events import (
    Completed,
    Event,
    EventBatch,
    Heartbeat,
    Latency,
    RunStarted,
    encode_event,
    event_identity,
)
from sidecar.inflight import InflightRules
from sidecar.journal import JournalEvent, JournalUnavailable
from sidecar.materialized_inputs import PlanError, plan_from_materialized
from sidecar.prepare import Prepared, Preparer
from sidecar.runs import RunState, latency_ms

__all__ = ["EventOutcome", "Ingestor", "JournalLike", "PlanError", "UnknownRun", "plan_from_materialized"]

_log = structlog.get_logger("sidecar.ingest")
_MAX_EVENTS_PER_APPEND = 4096
_DERIVED_PLAN = "derived_plan"


class JournalLike(Protocol):
    async def append(self, events: Sequence[JournalEvent]) -> list[JournalEvent | None]: ...
    def replay(self, *, after_seq: int = 0) -> Any: ...


class UnknownRun(LookupError):
    """Events for a run that was never started (and no ``run_started`` precedes them in the batch)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}: post a run_started event first")
        self.run_id = run_id


@dataclass(frozen=True, slots=True)
class EventOutcome:
    """What the service answers for one event of a batch."""

    status: str  # "accepted" | "duplicate" | "unknown_run" | "not_in_flight" (a heartbeat)
    kind: str
    seq: int | None = None
    ng_perf: dict[str, Any] | None = None

    def as_dict(self, index: int) -> dict[str, Any]:
        body: dict[str, Any] = {"index": index, "kind": self.kind, "status": self.status}
        if self.seq is not None:
            body["seq"] = self.seq
        if self.kind == "completed":
            body["ng_perf"] = self.ng_perf
        return body


@dataclass(slots=True)
class _Pending:
    run_id: str
    events: list[Event]
    records: list[JournalEvent]
    plans: list[dict[str, int] | None]
    prepared: list[Prepared | None]
    received_at: float
    future: asyncio.Future[list[EventOutcome]] = field(repr=False)


async def _none() -> None:
    return None


def _fail(batch: list[_Pending], exc: BaseException) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(exc)


class Ingestor:
    """Owns the run states; the only writer of the journal and of the state."""

    def __init__(
        self,
        journal: JournalLike,
        engines: Engines,
        *,
        on_event: Callable[[str, str], None] | None = None,
        health_interval_s: float = 2.0,
        preparer: Preparer | None = None,
        clock: Callable[[], float] = time.time,
        inflight_rules: InflightRules | None = None,
        read_plan: Callable[[str], dict[str, int]] = plan_from_materialized,
    ) -> None:
        self._journal = journal
        self._read_plan = read_plan
        self._engines = engines
        self._on_event = on_event
        self._health_interval_s = health_interval_s
        self._preparer = preparer
        self._clock = clock
        self._inflight_rules = inflight_rules
        self.runs: dict[str, RunState] = {}
        self._starting: dict[str, int] = {}
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.replayed = 0
        #: False while the journal's last append failed (the service answers 503 to ingest).
        self.journal_ok = True
        #: Held while committed events are applied; a reader on another thread holds it to see
        #: the run states still (``sidecar._offloop``).
        self.apply_lock = asyncio.Lock()

    def now(self) -> float:
        """The ingestor's wall clock (arrival times, in-flight ages)."""
        return self._clock()

    # -- lifecycle ------------------------------------------------------------------------

    def replay(self) -> int:
        """Rebuild every run from the journal (call once, before :meth:`start`)."""
        count = 0
        for record in self._journal.replay():
            body = orjson.loads(record.payload)
            received_at = body.pop("received_at")
            plan = body.pop(_DERIVED_PLAN, None)
            event = EventBatch.validate_python([body])[0]
            self._apply(record.run_id, event, received_at, plan)
            count += 1
        self.replayed = count
        _log.info("journal replayed", events=count, runs=len(self.runs))
        return count

    def drop_ended(self, retain_s: float, *, now: float | None = None) -> list[str]:
        """Forget runs that ended at least ``retain_s`` seconds ago; their events stay journaled.

        A restart replays and drops them again; later events for a dropped run get 404.
        """
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
        self._task = asyncio.get_running_loop().create_task(self._sequencer(), name="ingest-sequencer")

    async def stop(self) -> None:
        """Finish what is queued, then stop the sequencer."""
        if self._task is None:
            return
        await self._queue.join()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    # -- requests -------------------------------------------------------------------------

    async def submit(self, run_id: str, events: list[Event]) -> list[EventOutcome]:
        """Journal and apply a batch; returns one outcome per event, in order.

        Raises :class:`UnknownRun` (nothing stored), :class:`PlanError`, or
        ``JournalUnavailable`` (nothing of the batch stored).
        """
        if any(isinstance(event, Heartbeat) for event in events):
            return await self._submit_with_heartbeats(run_id, events)
        starts = isinstance(events[0], RunStarted)
        if run_id not in self.runs and run_id not in self._starting and not starts:
            raise UnknownRun(run_id)
        received_at = self._clock()
        records = []
        plans: list[dict[str, int] | None] = []
        for index, event in enumerate(events):
            extra = None
            plan = None
            if isinstance(event, RunStarted) and event.materialized_inputs is not None:
                try:
                    plan = await anyio.to_thread.run_sync(self._read_plan, event.materialized_inputs)
                except PlanError as exc:
                    exc.index = index
                    raise
                extra = {_DERIVED_PLAN: plan}
            plans.append(plan)
            key, payload = encode_event(run_id, event, received_at=received_at, extra=extra)
            records.append(JournalEvent(run_id=run_id, kind=event.kind, key=key, payload=payload))
        prepared = await self._prepare(run_id, events)
        future: asyncio.Future[list[EventOutcome]] = asyncio.get_running_loop().create_future()
        if starts:
            self._starting[run_id] = self._starting.get(run_id, 0) + 1
        try:
            self._queue.put_nowait(_Pending(run_id, events, records, plans, prepared, received_at, future))
            return await future
        finally:
            if starts:
                left = self._starting[run_id] - 1
                if left:
                    self._starting[run_id] = left
                else:
                    del self._starting[run_id]

    async def _submit_with_heartbeats(self, run_id: str, events: list[Event]) -> list[EventOutcome]:
        """Journal the batch's other events, then apply its heartbeats in memory (never journaled).

        Heartbeats come after the rest of their batch, so a ``started`` and its first heartbeat
        may share a request.
        """
        journaled: list[Event] = [event for event in events if not isinstance(event, Heartbeat)]
        outcomes = iter(await self.submit(run_id, journaled) if journaled else [])
        state = self.runs.get(run_id)
        if state is None:
            raise UnknownRun(run_id)
        now = self._clock()
        answers = []
        for event in events:
            if not isinstance(event, Heartbeat):
                answers.append(next(outcomes))
                continue
            beat = state.heartbeat(event, now)
            if self._on_event is not None:
                self._on_event(event.kind, "accepted" if beat else "not_in_flight")
            answers.append(EventOutcome("accepted" if beat else "not_in_flight", event.kind))
        return answers

    async def _prepare(self, run_id: str, events: list[Event]) -> list[Prepared | None]:
        """Digest and ng_perf of the batch's rows, computed in the worker pool (``None``: inline)."""
        state = self.runs.get(run_id)
        preparer = self._preparer
        if preparer is None or state is None:
            return [None] * len(events)
        work = []
        for event in events:
            if isinstance(event, Completed) and event.row is not None:
                work.append(
                    preparer.prepare(
                        event.row, state.config.source_path, state.ignored_checks, latency_ms(event)
                    )
                )
            else:
                work.append(_none())
        return list(await asyncio.gather(*work))

    async def _sequencer(self) -> None:
        """Commit queued batches in order; the next commit runs while this batch is applied.

        Batch N+1 is handed to the journal only after batch N has committed, so journal order is
        queue order; applying N (CPU) then overlaps with committing N+1 (disk), and N is applied
        before N+1 is, so the state always follows journal order.
        """
        inflight: tuple[list[_Pending], asyncio.Task[list[JournalEvent | None]]] | None = None
        while True:
            if inflight is None:
                inflight = self._begin(self._take([await self._queue.get()]))
            batch, commit = inflight
            inflight = None
            try:
                try:
                    committed = await commit
                    self.journal_ok = True
                except JournalUnavailable as exc:
                    self.journal_ok = False
                    _fail(batch, exc)
                    continue
                except Exception as exc:  # a journal bug must not stop the sequencer
                    _log.exception("journal append failed unexpectedly")
                    _fail(batch, exc)
                    continue
                queued = self._take([])
                if queued:
                    inflight = self._begin(queued)
                try:
                    async with self.apply_lock:  # a report or scrape being built off the loop reads state
                        self._apply_batch(batch, committed)
                except Exception as exc:  # committed events are replayed on restart; answer, keep going
                    _log.exception("answering a committed batch failed")
                    _fail(batch, exc)
            finally:
                for _ in range(len(batch)):
                    self._queue.task_done()
                # nothing of this batch (events, journal payloads) stays referenced while
                # the sequencer waits for the next one: bodies near the cap would stay resident
                del batch, commit
                committed = []
                queued = []

    def _take(self, batch: list[_Pending]) -> list[_Pending]:
        """``batch`` plus whatever else is queued, up to one append's worth of events."""
        size = sum(len(pending.records) for pending in batch)
        while not self._queue.empty() and size < _MAX_EVENTS_PER_APPEND:
            batch.append(self._queue.get_nowait())
            size += len(batch[-1].records)
        return batch

    def _begin(self, batch: list[_Pending]) -> tuple[list[_Pending], asyncio.Task[list[JournalEvent | None]]]:
        records = [record for pending in batch for record in pending.records]
        return batch, asyncio.get_running_loop().create_task(self._journal.append(records))

    def _apply_batch(self, batch: list[_Pending], committed: list[JournalEvent | None]) -> None:
        position = 0
        for pending in batch:
            outcomes = []
            for event, plan, prepared in zip(pending.events, pending.plans, pending.prepared, strict=True):
                stored = committed[position]
                position += 1
                outcomes.append(
                    self._outcome(pending.run_id, event, stored, pending.received_at, plan, prepared)
                )
            if not pending.future.done():
                pending.future.set_result(outcomes)

    def _outcome(
        self,
        run_id: str,
        event: Event,
        stored: JournalEvent | None,
        received_at: float,
        plan: dict[str, int] | None,
        prepared: Prepared | None = None,
    ) -> EventOutcome:
        if stored is None:
            if self._on_event is not None:
                self._on_event(event.kind, "duplicate")
            ng_perf = None
            if isinstance(event, Completed):
                ng_perf = prepared.ng_perf if prepared is not None else self._ng_perf(event)
            return EventOutcome("duplicate", event.kind, None, ng_perf)
        applied, ng_perf = self._apply(run_id, event, received_at, plan, prepared)
        if self._on_event is not None:
            self._on_event(event.kind, "accepted")
        return EventOutcome("accepted" if applied else "unknown_run", event.kind, stored.seq, ng_perf)

    def _ng_perf(self, event: Completed) -> dict[str, Any] | None:
        row = event.row
        if row is None:
            assert event.line is not None
            try:
                parsed = orjson.loads(event.line)
            except orjson.JSONDecodeError:
                return None
            row = parsed if isinstance(parsed, dict) else None
        if row is None:
            return None
        return self._engines.build_ng_perf(row, latency_ms(event))

    def _apply(
        self,
        run_id: str,
        event: Event,
        received_at: float,
        plan: dict[str, int] | None,
        prepared: Prepared | None = None,
    ) -> tuple[bool, dict[str, Any] | None]:
        state = self.runs.get(run_id)
        if isinstance(event, RunStarted):
            # A follower restarts a recreated/truncated file as a new generation: fresh state.
            if state is None or (event.generation or 0) > state.generation:
                self.runs[run_id] = RunState(
                    run_id,
                    event,
                    received_at=received_at,
                    engines=self._engines,
                    plan=plan,
                    health_interval_s=self._health_interval_s,
                    inflight_rules=self._inflight_rules,
                    clock=self._clock,
                )
            return True, None
        if state is None:
            _log.warning("event for a run that never started", run_id=run_id, kind=event.kind)
            return False, None
        if (event.generation or 0) < state.generation and not isinstance(event, Latency):
            return True, None  # late event of a superseded generation (follower restart)
        try:
            return True, state.apply(event, received_at, prepared)
        except Exception:
            task, rollout, attempt = event_identity(event)
            _log.exception(
                "applying a committed event failed",
                run_id=run_id,
                kind=event.kind,
                task=repr(task)[:64],
                rollout=repr(rollout)[:64],
                attempt=attempt,
            )
            return True, None
