"""An ASGI app on uvicorn at ``127.0.0.1:<ephemeral>`` in a thread with its own loop (the
service in tests, the demo's agent server); the socket is bound first, so the URL is known at once."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType

import uvicorn

__all__ = ["ServerThread", "ServerThreadError", "loop_factory"]


class ServerThreadError(RuntimeError):
    """The server failed to start, failed while serving, or did not stop in time."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop when available (a large share of per-request overhead), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


class ServerThread:
    """Base of a server in a thread (``with Subclass(...) as url:``); subclasses build the
    ``uvicorn.Server`` in :meth:`_serve`; a thread's exception is re-raised by ``start``/``stop``."""

    label = "server"

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    async def _serve(self, sock: socket.socket) -> None:
        """Build ``self._server`` (off the main thread: uvicorn installs no signal handlers) and serve."""
        raise NotImplementedError

    def _run(self) -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                runner.run(self._serve(self._sock))
        except BaseException as exc:  # surfaced by start()/stop()
            self._error = exc

    def start(self, timeout: float = 30.0) -> str:
        self._thread = threading.Thread(target=self._run, name=self.label, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while self._server is None or not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise ServerThreadError(f"{self.label} failed to start: {self._error!r}") from self._error
            if time.monotonic() > deadline:
                raise ServerThreadError(f"{self.label} did not start within {timeout} s")
            time.sleep(0.01)
        return self.url

    def stop(self, timeout: float = 30.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()
        if self._thread is not None and self._thread.is_alive():
            raise ServerThreadError(f"{self.label} thread did not stop within {timeout} s")
        if self._error is not None:
            raise ServerThreadError(f"{self.label} failed: {self._error!r}") from self._error

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
