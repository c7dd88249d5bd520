"""uvicorn's HTTP protocol with deadlines and a per-peer connection cap, against slow clients.

A connection must deliver its complete request headers within ``header_timeout_s`` of opening
(or of its previous response), and a request body may go ``body_timeout_s`` without a byte;
past either the connection is closed. A peer address holds at most ``max_per_peer`` open
connections: one more evicts that peer's oldest connection still waiting for its headers (a
slow or idle client), and is refused only when all of them are busy with requests. So
half-sent requests cannot pile up to uvicorn's ``limit_concurrency``, and a client that sends
whole requests (``/drain_margin`` polls) keeps getting answers while they are attempted.

A response may go ``write_timeout_s`` without the client reading any of it: once the transport's
buffer passes its high-water mark (the client stopped reading a large ``/report``), the buffer
must shrink within that time, again and again, until it drains; otherwise the connection is
aborted, which frees the unsent bytes at once (a plain close would keep them until sent).

A whole, bodiless ``GET`` on a path of the guard's :class:`~sidecar.http._priority_lane.PriorityLane`
(``/drain_margin``) is answered in the callback that read it, ahead of the tasks other requests
made ready (see that module for when a request takes the ordinary route instead).

A request body's chunks are held as they arrive (:class:`BodyChunks`) and joined once when the
app reads them, instead of being appended to one growing buffer that is then copied again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sidecar.http._priority_lane import LaneHandler, PriorityLane

__all__ = ["BodyChunks", "ConnectionGuard", "guarded_protocol"]


class BodyChunks:
    """The body chunks that arrived since the app last read, as uvicorn's ``cycle.body``.

    uvicorn appends each chunk with ``+=``, compares ``len`` with its flow-control mark and
    hands the app ``bytes(...)``: here the chunks are kept as they are and joined only then,
    so a body that arrived as one chunk reaches the app as that very chunk.
    """

    __slots__ = ("_chunks", "_size")

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0

    def __iadd__(self, chunk: bytes) -> BodyChunks:
        self._chunks.append(chunk)
        self._size += len(chunk)
        return self

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        chunks = self._chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class ConnectionGuard:
    """Settings and bookkeeping shared by every connection of one server."""

    def __init__(
        self,
        header_timeout_s: float,
        body_timeout_s: float,
        max_per_peer: int,
        write_timeout_s: float = 60.0,
    ) -> None:
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.write_timeout_s = write_timeout_s
        self.max_per_peer = max_per_peer
        #: Set by the server once the app exists (``None``: every request takes the app's route).
        self.priority_lane: PriorityLane | None = None
        self.by_peer: dict[str, OrderedDict[int, _GuardedProtocol]] = {}
        self.header_timeouts = 0
        self.body_timeouts = 0
        #: Connections aborted because their client read nothing of a response for too long.
        self.write_timeouts = 0
        self.evicted = 0
        self.refused = 0

    def admit(self, protocol: _GuardedProtocol) -> bool:
        """Register ``protocol``; False when its peer is at the cap with only busy connections."""
        held = self.by_peer.setdefault(protocol.peer, OrderedDict())
        if len(held) >= self.max_per_peer:
            victim = next((other for other in held.values() if other.waiting_for_headers), None)
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            victim.close_now()
        held[id(protocol)] = protocol
        return True

    def release(self, protocol: _GuardedProtocol) -> None:
        held = self.by_peer.get(protocol.peer)
        if held is not None:
            held.pop(id(protocol), None)
            if not held:
                del self.by_peer[protocol.peer]


class _GuardedProtocol(HttpToolsProtocol):
    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._unsent = 0  # the write buffer's size when the write deadline was last armed
        self.waiting_for_headers = True
        self.peer = ""
        self._admitted = False
        self._lane_request: tuple[LaneHandler, bytes] | None = None  # (handler, query) to answer

    def _arm(self, seconds: float, on_expiry: Any) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(seconds, on_expiry)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def close_now(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()

    def _header_expired(self) -> None:
        self.guard.header_timeouts += 1
        self.close_now()

    def _body_expired(self) -> None:
        self.guard.body_timeouts += 1
        self.close_now()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.peer = self.client[0] if self.client else ""
        if not self.guard.admit(self):
            transport.close()
            return
        self._admitted = True
        self._arm(self.guard.header_timeout_s, self._header_expired)

    def pause_writing(self) -> None:
        """The client is not keeping up with a response: it must read some within the deadline."""
        super().pause_writing()
        self._arm_write()

    def resume_writing(self) -> None:
        self._disarm_write()
        super().resume_writing()

    def _arm_write(self) -> None:
        self._disarm_write()
        self._unsent = self.transport.get_write_buffer_size()
        self._write_deadline = self.loop.call_later(self.guard.write_timeout_s, self._write_expired)

    def _disarm_write(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _write_expired(self) -> None:
        self._write_deadline = None
        if self.transport.get_write_buffer_size() < self._unsent:
            self._arm_write()  # the client read some since: a new period
            return
        self.guard.write_timeouts += 1
        self._disarm()
        self.transport.abort()  # drops the unsent bytes now; close() would keep them until sent

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_write()
        if self._admitted:
            self.guard.release(self)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self.waiting_for_headers = False
        self._arm(self.guard.body_timeout_s, self._body_expired)  # until the body is complete
        self._lane_request = self._lane_route()
        if self._lane_request is None:
            super().on_headers_complete()

    def _lane_route(self) -> tuple[LaneHandler, bytes] | None:
        """The lane's handler and query for this request, or ``None`` for the app's route."""
        lane = self.guard.priority_lane
        if lane is None or self.root_path:
            return None
        path, _, query = self.url.partition(b"?")
        handler = lane.handler(path)
        if handler is None:
            return None
        parser = self.parser
        cycle = self.cycle
        if (
            parser.get_method() != b"GET"
            or parser.get_http_version() != "1.1"
            or not parser.should_keep_alive()
            or parser.should_upgrade()
            or (cycle is not None and not cycle.response_complete)
            or self.pipeline
        ):
            return None
        for name, value in self.headers:
            if (name == b"content-length" and value != b"0") or name == b"transfer-encoding":
                return None
        return handler, query.partition(b"#")[0]

    def on_body(self, body: bytes) -> None:
        self._arm(self.guard.body_timeout_s, self._body_expired)
        cycle = self.cycle
        # Only uvicorn's own empty buffer is swapped: its reader copies it out with bytes().
        if type(cycle.body) is bytearray and not cycle.body:
            cycle.body = BodyChunks()  # type: ignore[assignment]  # (it reads as one)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        request = self._lane_request
        if request is None:
            super().on_message_complete()
            return
        self._lane_request = None
        lane = self.guard.priority_lane
        assert lane is not None
        self.transport.write(lane.response(*request, self.server_state.default_headers))
        self.on_response_complete()  # as uvicorn's cycle ends: keep-alive, pipelined requests

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self.waiting_for_headers = True
            self._arm(self.guard.header_timeout_s, self._header_expired)


def guarded_protocol(guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """The protocol class uvicorn instantiates per connection (``Config(http=...)``), bound to ``guard``."""
    return type("GuardedHttpProtocol", (_GuardedProtocol,), {"guard": guard})
