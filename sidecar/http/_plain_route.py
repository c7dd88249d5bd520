"""One POST route served as plain ASGI in front of the Starlette app.

The ingest endpoint takes every row the service receives, so it skips Starlette's router,
inner middleware and ``Request`` / ``Response`` objects. It is installed as the app's outermost
middleware, so an unexpected error still reaches Starlette's error middleware (a 500 with the
app's body, then raised to the server). Its answers are the ones the Starlette route would
give: the same JSON bodies and headers (content type and length, then ``Server-Timing``), and
refusals rendered and counted by the same function. Any other request goes to the wrapped app,
and so does a path this route does not match exactly.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from sidecar.http.errors import RequestError

__all__ = ["PlainHandler", "PlainPostRoute"]

#: ``(path parameter, raw request headers, receive) -> the 200 answer's JSON body``; refusals
#: are raised as :class:`RequestError`.
PlainHandler = Callable[[str, Iterable[tuple[bytes, bytes]], Receive], Awaitable[bytes]]

_JSON_HEADERS = (b"content-type", b"application/json")


class PlainPostRoute:
    """``POST`` on paths that ``pattern`` matches in full (its one group is the handler's
    parameter) answered by ``handler``; everything else passed to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        pattern: re.Pattern[str],
        handler: PlainHandler,
        *,
        render_error: Callable[[RequestError], bytes],
    ) -> None:
        self._app = app
        self._pattern = pattern
        self._handler = handler
        self._render_error = render_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A mounted app (a root path) takes the wrapped app's matching, which knows how to strip it.
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            match = self._pattern.fullmatch(scope["path"])
            if match is not None:
                await self._serve(match[1], scope, receive, send)
                return
        await self._app(scope, receive, send)

    async def _serve(self, parameter: str, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        extra: dict[str, str] | None = None
        try:
            body = await self._handler(parameter, scope["headers"], receive)
            status = 200
        except RequestError as exc:
            status, body, extra = exc.status, self._render_error(exc), exc.headers
        await _answer(send, status, body, extra, started)


async def _answer(send: Send, status: int, body: bytes, extra: dict[str, str] | None, started: float) -> None:
    """A JSON response, its headers in the order Starlette's ``Response`` and the app's
    ``Server-Timing`` middleware give them."""
    headers = [(key.lower().encode("latin-1"), text.encode("latin-1")) for key, text in (extra or {}).items()]
    headers.append((b"content-length", b"%d" % len(body)))
    headers.append(_JSON_HEADERS)
    took = (time.perf_counter() - started) * 1000.0
    headers.append((b"server-timing", b"app;dur=%.3f" % took))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
