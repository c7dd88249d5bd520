"""Slow and half-open clients closed beside uvicorn (which has no header, body or write
deadline and no per-peer cap): an ASGI middleware notes each connection's progress and a sweep
closes those past ``header_timeout_s``, ``body_timeout_s``, ``write_timeout_s`` or
``max_per_peer`` (the longest idle first; one just accepted is spared until the next sweep, so a
burst from its host cannot evict it before its request arrives); a handler is never interrupted
mid-request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ConnectionGuard", "GuardCounts"]

Peer = tuple[str, int]


@dataclass
class GuardCounts:
    """Connections the guard closed, by reason (tests and logs read them)."""

    header_timeouts: int = 0
    body_timeouts: int = 0
    write_timeouts: int = 0
    evicted: int = 0


@dataclass
class _Request:
    """A request under way on one connection."""

    waiting_for_body_since: float | None = None


@dataclass
class _Seen:
    """What the sweep remembers of one connection."""

    idle_since: float
    unsent: int = 0
    unsent_since: float = 0.0


class ConnectionGuard:
    """``middleware(app)`` wraps the ASGI app; :meth:`run` sweeps ``connections`` until cancelled."""

    def __init__(
        self,
        *,
        header_timeout_s: float,
        body_timeout_s: float,
        write_timeout_s: float,
        max_per_peer: int,
        interval_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.write_timeout_s = write_timeout_s
        self.max_per_peer = max_per_peer
        self.interval_s = interval_s
        self.counts = GuardCounts()
        self._clock = clock
        self._requests: dict[Peer, _Request] = {}
        #: When each connection's last request ended (its idle time starts again there).
        self._finished: dict[Peer, float] = {}
        self._seen: dict[asyncio.BaseTransport, _Seen] = {}

    def middleware(self, app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            client = scope.get("client")
            if scope["type"] != "http" or not client:
                await app(scope, receive, send)
                return
            peer = (client[0], client[1])
            request = self._requests[peer] = _Request()

            async def timed_receive() -> Message:
                request.waiting_for_body_since = self._clock()
                try:
                    return await receive()
                finally:
                    request.waiting_for_body_since = None

            try:
                await app(scope, timed_receive, send)
            finally:
                self._requests.pop(peer, None)
                self._finished[peer] = self._clock()

        return guarded

    async def run(self, connections: Collection[Any]) -> None:
        """Sweep ``connections`` (objects with an asyncio ``transport``) every ``interval_s``."""
        while True:
            await asyncio.sleep(self.interval_s)
            self.sweep(connections)

    def sweep(self, connections: Collection[Any]) -> None:
        now = self._clock()
        seen: dict[asyncio.BaseTransport, _Seen] = {}
        per_host: dict[str, list[tuple[float, asyncio.Transport]]] = {}
        fresh: dict[str, int] = {}  # idle connections first seen now: counted, never evicted yet
        busy: dict[str, int] = {}
        for connection in list(connections):
            transport = getattr(connection, "transport", None)
            if transport is None or transport.is_closing():
                continue
            peername = transport.get_extra_info("peername")
            peer = (peername[0], peername[1]) if isinstance(peername, tuple) else ("", 0)
            state = seen[transport] = self._seen.get(transport) or _Seen(idle_since=now)
            if self._stalled_writing(transport, state, now):
                continue
            request = self._requests.get(peer)
            if request is not None:
                busy[peer[0]] = busy.get(peer[0], 0) + 1
                waiting = request.waiting_for_body_since
                if waiting is not None and now - waiting >= self.body_timeout_s:
                    self.counts.body_timeouts += 1
                    transport.close()
                continue
            state.idle_since = max(state.idle_since, self._finished.pop(peer, 0.0))
            if now - state.idle_since >= self.header_timeout_s:
                self.counts.header_timeouts += 1
                transport.close()
            elif transport in self._seen:
                per_host.setdefault(peer[0], []).append((state.idle_since, transport))
            else:  # it may not have sent its request yet: a burst of others must not evict it
                fresh[peer[0]] = fresh.get(peer[0], 0) + 1
        self._seen = seen
        self._finished.clear()  # marks nobody took belong to connections already gone
        for host, idle in per_host.items():
            extra = len(idle) + fresh.get(host, 0) + busy.get(host, 0) - self.max_per_peer
            for _, transport in sorted(idle, key=lambda pair: pair[0])[: max(extra, 0)]:
                self.counts.evicted += 1
                transport.close()

    def _stalled_writing(self, transport: asyncio.Transport, state: _Seen, now: float) -> bool:
        """Abort a connection whose client read none of a response for ``write_timeout_s``."""
        unsent = transport.get_write_buffer_size()
        if unsent == 0 or state.unsent == 0 or unsent < state.unsent:
            state.unsent, state.unsent_since = unsent, now
            return False
        if now - state.unsent_since >= self.write_timeout_s:
            self.counts.write_timeouts += 1
            transport.abort()  # drops the unsent bytes now; close() would keep them until sent
            return True
        return False
