"""An outage of an outside system, logged twice: once when it starts and once when it ends.

A push to a system the service does not control (a collector, an experiment tracker) fails
for as long as that system is down; a log line per failed push would flood the log. So the
first failure after a success starts an outage (logged with that failure), later drops are
only counted, and the first success after it ends the outage (logged with its length and the
drop count). A shutdown during an outage may say so (:meth:`OutageLog.close`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

__all__ = ["OutageLog"]


class OutageLog:
    """Start and end of one destination's outages; safe to call from any thread.

    ``down``, ``back`` and ``stopped`` are the three log events; ``context`` (the endpoint, the
    worker's name) is logged with each.
    """

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
        """A dropped push that starts an outage when none is on (logged with ``first_failure``)."""
        with self._lock:
            if self._since is None:
                self._since, self._dropped = self._clock(), 0
                self._log.warning(self._events[0], **self._context, **first_failure)
            self._dropped += 1

    def dropped(self) -> None:
        """A dropped push that never starts an outage (the destination was not tried): counted
        only while one is on."""
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
