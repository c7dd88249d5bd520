"""The dispatcher's read answered ahead of bulk reads, in the callback that read its request.

Starlette runs every request as a task: a ``GET /drain_margin`` that arrives while the loop
serves ``/inflight`` pollers, scrapes and a ``/report`` waits behind every task those made
ready, then passes the router and the middleware. The dispatcher asks this question before it
starts each task, and its answer is a few hundred bytes computed in microseconds, so the
connection's protocol (:mod:`sidecar.http._guarded`) answers it itself: when a whole, bodiless
``GET`` on one of :class:`PriorityLane`'s paths arrives on an idle keep-alive connection, the
answer is computed and written in the same callback, as one write (status line, headers and
body together). Anything else about the request (a body, ``Connection: close``, HTTP/1.0, a
request pipelined behind one still being answered, a percent-encoded path, a mounted app) takes
the ordinary route, which answers from the same handler, so both give the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus

import structlog

__all__ = ["LaneAnswer", "LaneHandler", "PriorityLane"]

_log = structlog.get_logger("sidecar.http.app")

#: ``(status, JSON body, extra headers or None)``, what a lane handler answers.
LaneAnswer = tuple[int, bytes, Mapping[str, str] | None]
#: ``raw query string -> answer``: synchronous, cheap (it runs inside the protocol's callback),
#: refusals rendered as answers; an unexpected exception becomes the app's 500.
LaneHandler = Callable[[bytes], LaneAnswer]

_STATUS_LINES = {
    status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode()) for status in HTTPStatus
}


class PriorityLane:
    """The ``GET`` paths answered in the protocol (exact raw paths, no query) and their handlers.

    ``internal_error`` is the body of the app's 500 (the same one Starlette's route answers).
    ``answered`` counts the requests this lane served (tests tell the two routes apart by it).
    """

    def __init__(self, handlers: Mapping[bytes, LaneHandler], internal_error: bytes) -> None:
        self._handlers = dict(handlers)
        self._internal_error = internal_error
        self.answered = 0

    def handler(self, path: bytes) -> LaneHandler | None:
        return self._handlers.get(path)

    def response(
        self, handler: LaneHandler, query: bytes, default_headers: Iterable[tuple[bytes, bytes]]
    ) -> bytes:
        """The whole HTTP/1.1 response to one request: the handler's answer, framed as uvicorn
        frames the app's (its default headers first, then the app's, then ``Server-Timing``)."""
        started = time.perf_counter()
        try:
            status, body, extra = handler(query)
        except Exception as exc:  # the app's 500: logged, never raised into the protocol
            _log.error("unhandled error", path="priority lane", error=type(exc).__name__)
            status, body, extra = 500, self._internal_error, None
        took = (time.perf_counter() - started) * 1000.0
        self.answered += 1
        head = [_STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status]
        for name, value in default_headers:
            head.append(b"%s: %s\r\n" % (name, value))
        if extra:  # (in the order Starlette's ``Response`` lists them: its own, length, type)
            for key, text in extra.items():
                head.append(b"%s: %s\r\n" % (key.lower().encode("latin-1"), text.encode("latin-1")))
        head.append(b"content-length: %d\r\ncontent-type: application/json\r\n" % len(body))
        head.append(b"server-timing: app;dur=%.3f\r\n\r\n" % took)
        head.append(body)
        return b"".join(head)
