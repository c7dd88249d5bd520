"""``/report`` and ``/metrics`` built on a worker thread, reused while nothing changed and
rate-limited, so a large run's build never stalls the loop nor crowds out ingest.

A build holds the interpreter lock for most of its time, which ingest's worker thread and the
loop need too: two readers of a 100k-rollout run's reports in a tight loop took ~80% of it and
made ingest 6x slower at p99. So the builds from a cut take turns, one at a time, the next
starting no sooner than ``took / cut_duty`` after the last one began (a tenth of the time);
cached builds (``/metrics``, the page) keep ``duty``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from health.process_tuning import collector_paused, stepping_aside

__all__ = ["OffLoopReads"]

T = TypeVar("T")
C = TypeVar("C")
_MAX_CACHED = 64
_MAX_WAIT_S = 5.0  # a request never waits longer than this for its turn (a scrape has a timeout)
_MAX_ASIDE_S = 0.02  # the longest a build steps aside at once, so ingest that never stops cannot starve it


def _collector_paused(make: Callable[[], T]) -> T:
    """``make()`` with the cyclic collector paused (a build's ~300k objects would otherwise
    cost a ~40 ms collection holding the GIL)."""
    with collector_paused():
        return make()


class OffLoopReads:
    """Runs read builders on a thread, serialized with ingest, with a short-lived cache (or, from
    a cut, beside ingest)."""

    def __init__(
        self,
        apply_lock: asyncio.Lock,
        *,
        max_age_s: float = 1.0,
        duty: float = 0.25,
        cut_duty: float = 0.1,
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self._apply_lock = apply_lock
        self.max_age_s = max_age_s
        self.duty = duty
        self.cut_duty = cut_duty
        self.busy = busy
        self._next_build: dict[Hashable, float] = {}
        self._cut_turn = asyncio.Lock()
        self._next_cut = 0.0
        self._applied = 0
        self._cache: dict[Hashable, tuple[int, float, Any]] = {}
        self.builds = 0
        #: called on the worker thread before each :meth:`build_from_cut` computes (tests hold one there)
        self.on_compute: Callable[[], None] | None = None

    def note_event(self, kind: str = "", result: str = "") -> None:
        """An event was applied (or run states changed): cached results are stale."""
        self._applied += 1

    def _fresh(self, key: Hashable) -> Any | None:
        hit = self._cache.get(key)
        if hit is not None and hit[0] == self._applied and time.monotonic() - hit[1] < self.max_age_s:
            return hit[2]
        return None

    async def build(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()`` run on a thread (or its recent result for ``key``)."""
        cached = self._fresh(key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        wait = min(_MAX_WAIT_S, self._next_build.get(key, 0.0) - time.monotonic())
        if wait > 0:
            await asyncio.sleep(wait)
        async with self._apply_lock:
            cached = self._fresh(key)  # built by the request this one waited behind
            if cached is not None:
                return cached  # type: ignore[no-any-return]
            stamp, began = self._applied, time.monotonic()
            value = await asyncio.to_thread(_collector_paused, make)
            self.builds += 1
            took = time.monotonic() - began
            self._next_build[key] = began + took / self.duty
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
            self._next_build.clear()
        self._cache[key] = (stamp, began, value)
        return value

    def _step_aside(self) -> None:
        """A build's pause every few hundred tasks: while ingest requests are in progress, wait
        (they need the interpreter lock the build would take), at most :data:`_MAX_ASIDE_S`."""
        deadline = time.monotonic() + _MAX_ASIDE_S
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.0005)

    async def build_from_cut(self, cut: Callable[[], C], make: Callable[[C], T]) -> T:
        """``make(cut())``: ``cut()`` under the ingest pause, ``make`` on a thread while ingest
        goes on (reads over append-only state; not cached). One such build at a time, within
        ``cut_duty`` of the time (module notes); a request waits at most ``_MAX_WAIT_S`` for its turn."""
        async with self._cut_turn:
            wait = min(_MAX_WAIT_S, self._next_cut - time.monotonic())
            if wait > 0:
                await asyncio.sleep(wait)
            async with self._apply_lock:
                taken = cut()
            hook, began = self.on_compute, time.monotonic()

            def compute() -> T:
                if hook is not None:
                    hook()
                with stepping_aside(self._step_aside):
                    return make(taken)

            try:
                return await asyncio.to_thread(_collector_paused, compute)
            finally:
                self.builds += 1
                self._next_cut = began + (time.monotonic() - began) / self.cut_duty
