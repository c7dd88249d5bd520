"""A small NeMo-Gym-shaped dispatcher: concurrency gate, dispatch budget, drain margin from the sidecar.

Per row, as NeMo Gym's dispatcher does: wait for a slot; then,
with the budget's deadline set, drain the row if ``remaining <= 0`` or the drain margin exceeds
the time left (strictly); otherwise POST it to the agent's ``/run``. A reply (any HTTP success,
agent-reported failures included) is a completion (``record``); a request that raises becomes
a Gym-built failure row (``record_failure``); a drained row gets Gym's drained result and is never
written. The slot is held for the drain check and the ``/run`` call only.

The drain margin is the sidecar's (``SidecarClient.drain_margin``: the latency tracker's p75
once five samples exist), polled in the background every ``margin_refresh_s`` so a drain
check never waits on the network; if the sidecar cannot answer, the last known margin stays,
so the dispatcher never waits on or fails because of the sidecar.

All times are simulated seconds (:class:`~sidecar.demo.config.SimClock`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from dispatcher_client import SidecarClient, SidecarError
from sidecar.demo.config import SimClock
from sidecar.demo.run_files import RunFiles

__all__ = ["DispatchStats", "Dispatcher", "drained_result", "gym_failure_row", "stamp"]

_RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
_BODY_LIMIT = 2000
_STAMPED = ("_ng_task_index", "_ng_rollout_index", "agent_ref", "_ng_attempt_index", "_ng_rollout_id")


@dataclass(slots=True)
class DispatchStats:
    """Live counters of the dispatcher (read by the display; one event loop, no locking)."""

    planned: int
    budget_s: float
    dispatched: int = 0
    in_flight: int = 0
    succeeded: int = 0
    drained: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    """Failure rows by ``_ng_failure_class`` (agent-reported and Gym-built)."""
    margin: float | None = None
    """The drain margin seen at the latest drain check."""
    first_drain: tuple[float, float, float | None] | None = None
    """``(simulated time, time left, margin)`` of the first drained row."""
    last_dispatch_at: float | None = None
    ended_at: float | None = None

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def queued(self) -> int:
        return self.planned - self.dispatched - self.drained

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready counters (``dispatch.json`` in the demo's report directory)."""
        first = self.first_drain
        return {
            "planned": self.planned,
            "budget_s": self.budget_s,
            "dispatched": self.dispatched,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "failures": dict(sorted(self.failures.items())),
            "drained": self.drained,
            "first_drain": None
            if first is None
            else {"at_s": first[0], "time_left_s": first[1], "drain_margin_s": first[2]},
            "last_dispatch_at_s": self.last_dispatch_at,
            "ended_at_s": self.ended_at,
        }


def stamp(result: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """Copy the collector's identity keys from the dispatched row onto its result."""
    for key in _STAMPED:
        if key in row:
            result[key] = row[key]
    return result


def drained_result(row: dict[str, Any], remaining: float, margin: float | None) -> dict[str, Any]:
    """The result NeMo Gym builds for a row the budget never started, stamped."""
    if margin is None:
        message = "not dispatched: dispatch budget exhausted"
    else:
        message = (
            f"not dispatched: {remaining:.0f}s left in dispatch budget, below the {margin:.0f}s drain margin"
        )
    result: dict[str, Any] = {
        "_ng_failure_class": "cancelled",
        "_ng_no_persist": True,
        "_ng_dispatch_drained": True,
        "error_message": message,
    }
    return stamp(result, row)


def gym_failure_row(row: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """The failure row NeMo Gym writes when ``/run`` raised, stamped."""
    status: int | None = None
    body: str | None = None
    message = str(exc)
    if isinstance(exc, httpx.HTTPStatusError):
        response = exc.response
        status = response.status_code
        body = response.text
        if len(body) > _BODY_LIMIT:
            body = body[:_BODY_LIMIT] + "…"
        message = f"{status}, message={response.reason_phrase!r}, url={str(exc.request.url)!r}"
    failure_class = (
        "agent_request_failed" if status is None or status in _RETRYABLE_STATUS else "agent_run_error"
    )
    failure: dict[str, Any] = {
        "_ng_failure_class": failure_class,
        "_ng_failure_type": type(exc).__name__,
        "_ng_failure_message": message,
        "_ng_failure_http_status": status,
        "_ng_failure_response_body": body,
    }
    return stamp(failure, row)


@dataclass(frozen=True, slots=True)
class _Failure:
    """A ``/run`` that raised, with how long it took (simulated seconds)."""

    exc: Exception
    seconds: float


class Dispatcher:
    """Dispatch ``rows`` to the agent within ``budget_s`` simulated seconds, reporting to the sidecar."""

    def __init__(
        self,
        rows: Sequence[dict[str, Any]],
        *,
        agent: httpx.AsyncClient,
        sidecar: SidecarClient,
        files: RunFiles,
        clock: SimClock,
        budget_s: float,
        concurrency: int,
        margin_refresh_s: float = 0.05,
    ) -> None:
        self._rows = rows
        self._agent = agent
        self._sidecar = sidecar
        self._files = files
        self._clock = clock
        self._gate = asyncio.Semaphore(concurrency)
        self._margin_refresh_s = margin_refresh_s
        self.stats = DispatchStats(planned=len(rows), budget_s=budget_s)

    async def run(self) -> DispatchStats:
        """Dispatch every row (one task each, as NeMo Gym does) and wait for all of them."""
        poller = asyncio.create_task(self._poll_margin())
        try:
            await self._refresh_margin()
            async with asyncio.TaskGroup() as group:
                for row in self._rows:
                    group.create_task(self._one(row))
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        self.stats.ended_at = self._clock.now()
        return self.stats

    async def _refresh_margin(self) -> None:
        with contextlib.suppress(SidecarError):  # fail open: keep the last margin the sidecar gave
            self.stats.margin = await self._sidecar.drain_margin()

    async def _poll_margin(self) -> None:
        """Keep :attr:`DispatchStats.margin` fresh, so a drain check never waits on the network."""
        while True:
            await asyncio.sleep(self._margin_refresh_s)
            await self._refresh_margin()

    async def _one(self, row: dict[str, Any]) -> None:
        outcome: tuple[dict[str, Any], float] | _Failure | None = None
        async with self._gate:
            margin = self.stats.margin
            now = self._clock.now()
            remaining = self.stats.budget_s - now
            drain = remaining <= 0 or (margin is not None and remaining < margin)
            if not drain:
                self.stats.dispatched += 1
                self.stats.in_flight += 1
                self.stats.last_dispatch_at = now
                await self._sidecar.started(row)  # in flight on the sidecar until its end event
                try:
                    outcome = await self._post(row)
                finally:
                    self.stats.in_flight -= 1
        # The slot is free again: reporting and writing happen outside it, as in NeMo Gym's
        # collection loop, so they never delay the next dispatch.
        if outcome is None:
            self.stats.drained += 1
            if self.stats.first_drain is None:
                self.stats.first_drain = (now, remaining, margin)
            await self._sidecar.drained(row, drained_result(row, remaining, margin))
        elif isinstance(outcome, _Failure):
            await self._failed(row, outcome)
        else:
            result, seconds = outcome
            await self._completed(row, stamp(result, row), seconds)

    async def _post(self, row: dict[str, Any]) -> tuple[dict[str, Any], float] | _Failure:
        """POST the row to ``/run``: ``(result, simulated seconds)``, or the failure and its duration."""
        started = time.monotonic()
        try:
            response = await self._agent.post("/run", content=orjson.dumps(row))
            response.raise_for_status()
            result = orjson.loads(response.content)
            if not isinstance(result, dict):
                raise ValueError(f"agent replied with a JSON {type(result).__name__}, not an object")
        except (httpx.HTTPError, ValueError) as exc:
            return _Failure(exc, self._clock.scale.to_sim(time.monotonic() - started))
        return result, self._clock.scale.to_sim(time.monotonic() - started)

    async def _failed(self, row: dict[str, Any], failure: _Failure) -> None:
        failure_row = gym_failure_row(row, failure.exc)
        self.stats.failures[failure_row["_ng_failure_class"]] += 1
        self._files.write_failure(failure_row)
        await self._sidecar.failed(row, failure_row, seconds=failure.seconds)

    async def _completed(self, row: dict[str, Any], result: dict[str, Any], seconds: float) -> None:
        failure_class = result.get("_ng_failure_class")
        persisted = not result.get("_ng_no_persist") and failure_class is None
        # The slot is taken right before ``completed`` submits the event (it queues it before its
        # first await), so the main file keeps the order in which the sidecar receives rows.
        slot = self._files.reserve() if persisted else None
        try:
            ng_perf = await self._sidecar.completed(row, result, seconds=seconds)
            if ng_perf is not None:
                result["ng_perf"] = ng_perf
        finally:
            if slot is not None:
                self._files.fill(slot, result)
        if failure_class is not None:
            self.stats.failures[str(failure_class)] += 1
            if not result.get("_ng_no_persist"):
                self._files.write_failure(result)
        elif persisted:
            self.stats.succeeded += 1
