"""A fail-open worker: a bounded queue drained by one daemon thread, for pushes to outside systems.

The service pushes to systems it does not control (an experiment tracker, a collector). Any
of them may be down, slow or refusing; none of that may reach the event loop. So the loop
only ever calls :meth:`FailOpenWorker.submit`, which never blocks: a full queue drops the job
(counted ``queue_full``). The thread runs the jobs in order; a job that raises is counted
``failed``. An outage (the first failure after a success) is logged once, and its end (the
first success after it) once more with the number of jobs lost meanwhile
(:class:`~sidecar.export.outage.OutageLog`). The thread is a daemon, so :meth:`stop` waits at most
its deadline for a hung push and the process can exit.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Literal

import structlog

from sidecar.export.outage import OutageLog

__all__ = ["DropReason", "FailOpenWorker", "JobResult", "SkipReason"]

#: Why a job did not reach its destination: it raised, the queue was full, or the caller skipped
#: it (:meth:`FailOpenWorker.skip`): ``busy``, the same kind of job was still waiting; ``down``,
#: the destination is down and this was not a retry.
DropReason = Literal["failed", "queue_full", "busy", "down"]
SkipReason = Literal["busy", "down"]
#: What became of a job: ``sent``, or a drop reason.
JobResult = Literal["sent", "failed", "queue_full", "busy", "down"]

_log = structlog.get_logger("sidecar.failopen")


class FailOpenWorker:
    """Runs submitted callables on one thread, dropping (and counting) what it cannot take."""

    def __init__(
        self,
        name: str,
        *,
        maxsize: int = 64,
        on_result: Callable[[JobResult], None] = lambda result: None,
        outage: OutageLog | None = None,
    ) -> None:
        """``outage``: how this destination's outages are logged (default: as a push
        destination named ``name``)."""
        if maxsize < 1:
            raise ValueError(f"{name}: queue size must be >= 1, got {maxsize!r}")
        self.name = name
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize)
        self._on_result = on_result
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self.outage = outage or OutageLog(
            _log,
            down="push destination down: dropping until it answers",
            back="push destination back",
            stopped="push destination stopped during an outage",
            worker=name,
        )
        self._stopping = False
        self.busy = False
        self._thread.start()

    @property
    def down(self) -> bool:
        """True while the last job failed (an outage is going on)."""
        return self.outage.down

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job``; never blocks. False (counted ``queue_full``) when the queue is full."""
        if self._stopping:
            return False
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self._note_drop("queue_full")
            return False
        return True

    def skip(self, reason: SkipReason) -> None:
        """Count a job the caller did not submit: an older one of its kind still waits (``busy``:
        a slow destination gets no backlog), or the destination is down and it is not time to
        retry (``down``: an outage costs one attempt per retry interval, not one per job)."""
        self._on_result(reason)

    def pending(self) -> int:
        """Jobs submitted and not yet finished (queued, plus the running one)."""
        return self._queue.unfinished_tasks

    def _note_drop(self, reason: DropReason, error: str = "") -> None:
        self.outage.failed(reason=reason, error=error[:300])
        self._on_result(reason)

    def _note_sent(self) -> None:
        self.outage.sent()
        self._on_result("sent")

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self.busy = True
            try:
                job()
            except Exception as exc:  # the destination's failure is counted, never raised
                self._note_drop("failed", f"{type(exc).__name__}: {exc}")
            else:
                self._note_sent()
            finally:
                self.busy = False
                self._queue.task_done()

    def stop(self, deadline_s: float = 2.0) -> bool:
        """Let queued jobs finish for at most ``deadline_s``; True if the thread ended in time.

        A hung job is abandoned (the thread is a daemon); jobs still queued then are dropped.
        """
        self._stopping = True
        end = time.monotonic() + max(0.0, deadline_s)
        while True:
            try:
                self._queue.put(None, timeout=max(0.0, end - time.monotonic()) or 0.001)
                break
            except queue.Full:
                if time.monotonic() >= end:
                    return False
        self._thread.join(max(0.0, end - time.monotonic()))
        return not self._thread.is_alive()
