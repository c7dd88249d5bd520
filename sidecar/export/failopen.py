"""Fail-open pushes to systems the service does not control: none of their outages, slowness or
hostility may reach the event loop or the process's memory.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Literal

import structlog

#: Most bytes of any answer an exporter reads (status line and headers included for OTLP).
MAX_RESPONSE_BYTES = 4 << 20
#: ``busy``: the same kind of job still waits; ``down``: the destination is down and this is no retry.
JobResult = Literal["sent", "failed", "queue_full", "busy", "down"]


class Deadline:
    """Time left of one call; shuts down every watched socket when it runs out."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        left = self._end - time.monotonic()
        if left <= 0 or self.expired:
            raise TimeoutError(f"no complete answer within {self.seconds:g} s")
        return left

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class OutageLog:
    """Logs one destination's outage once at its start and once at its end (thread-safe)."""

    def __init__(
        self,
        logger: structlog.typing.FilteringBoundLogger,
        *,
        down: str,
        back: str,
        stopped: str,
        clock: Callable[[], float] = time.monotonic,
        **context: object,
    ) -> None:
        self._log = logger
        self._events = (down, back, stopped)
        self._context = context
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._dropped = 0

    @property
    def down(self) -> bool:
        """True while an outage is going on (the last attempt failed)."""
        return self._since is not None

    def failed(self, **first_failure: object) -> None:
        """A failed push: starts an outage when none is on (logged with ``first_failure``)."""
        with self._lock:
            if self._since is None:
                self._since, self._dropped = self._clock(), 0
                self._log.warning(self._events[0], **self._context, **first_failure)
            self._dropped += 1

    def dropped(self) -> None:
        """A push not even tried: counted only while an outage is on, never starts one."""
        with self._lock:
            if self._since is not None:
                self._dropped += 1

    def sent(self) -> None:
        """A push arrived: the end of an outage, if one was on."""
        with self._lock:
            self._end(self._log.info, self._events[1])

    def close(self) -> None:
        """No more pushes: an outage still on is logged as cut short by the shutdown."""
        with self._lock:
            self._end(self._log.warning, self._events[2])

    def _end(self, log: Callable[..., object], event: str) -> None:
        if self._since is not None:
            log(event, **self._context, outage_s=round(self._clock() - self._since, 3), dropped=self._dropped)
            self._since = None


class FailOpenWorker:
    """Runs submitted callables on one daemon thread, dropping (and counting) what it cannot take."""

    def __init__(
        self,
        name: str,
        *,
        maxsize: int = 64,
        on_result: Callable[[JobResult], None] = lambda result: None,
        outage: OutageLog | None = None,
    ) -> None:
        self.name = name
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize)
        self._on_result = on_result
        self.outage = outage or OutageLog(
            structlog.get_logger("sidecar.failopen"),
            down="push destination down: dropping until it answers",
            back="push destination back",
            stopped="push destination stopped during an outage",
            worker=name,
        )
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job``; never blocks. False (counted ``queue_full``) when the queue is full."""
        if self._stopping:
            return False
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.outage.failed(reason="queue_full")
            self._on_result("queue_full")
            return False
        return True

    def skip(self, reason: Literal["busy", "down"]) -> None:
        """Count a job the caller did not submit (see :data:`JobResult`)."""
        self._on_result(reason)

    def pending(self) -> int:
        """Jobs submitted and not yet finished (queued, plus the running one)."""
        return self._queue.unfinished_tasks

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                job()
            except Exception as exc:  # the destination's failure is counted, never raised
                self.outage.failed(reason="failed", error=f"{type(exc).__name__}: {exc}"[:300])
                self._on_result("failed")
            else:
                self.outage.sent()
                self._on_result("sent")
            finally:
                self._queue.task_done()

    def stop(self, deadline_s: float = 2.0) -> bool:
        """Let queued jobs finish for at most ``deadline_s``; True if the (daemon) thread ended."""
        self._stopping = True
        end = time.monotonic() + max(0.0, deadline_s)
        while True:
            try:
                self._queue.put(None, timeout=max(0.001, end - time.monotonic()))
                break
            except queue.Full:
                if time.monotonic() >= end:
                    return False
        self._thread.join(max(0.0, end - time.monotonic()))
        return not self._thread.is_alive()
