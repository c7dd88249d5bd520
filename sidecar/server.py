"""Run the service on uvicorn: open the journal first, then bind, then shut down gracefully.

:func:`serve` is what ``rollout-sidecar serve`` calls. :class:`ServiceThread` runs the real
service on an ephemeral loopback port in a background thread, for tests and benchmarks.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
from collections.abc import Callable
from types import TracebackType

import structlog
import uvicorn

from sidecar.app import create_app
from sidecar.engines import Engines
from sidecar.service import Service
from sidecar.settings import ServiceSettings

__all__ = ["ServiceThread", "loop_factory", "run_service", "serve"]

_log = structlog.get_logger("sidecar.server")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop when available (a large share of per-request overhead), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


class _Terminated(Exception):
    """SIGTERM arrived; uvicorn has already shut down gracefully and re-raises the signal."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def run_service(settings: ServiceSettings) -> None:
    """Blocking entry point of ``rollout-sidecar serve``; returns normally after SIGTERM or SIGINT.

    uvicorn handles the signals itself (graceful shutdown, lifespan, journal closed) and then
    re-raises them to the previous handler; ours turns that into a normal return, exit code 0.
    """
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(serve(settings))
    except (_Terminated, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _config(service: Service) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(service),
        host=service.settings.host,
        port=service.settings.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
        limit_concurrency=4096,
        server_header=False,
    )


async def serve(settings: ServiceSettings, *, sock: socket.socket | None = None) -> None:
    """Serve until SIGINT/SIGTERM. Raises ``SettingsError`` / ``JournalError`` before binding."""
    settings.check_bind()
    service = Service(settings)
    await service.start()  # a corrupt or newer journal fails here, before any port is bound
    server = _AnnouncingServer(_config(service), settings)
    try:
        await server.serve(sockets=[sock] if sock is not None else None)
    finally:
        await service.stop()


class _AnnouncingServer(uvicorn.Server):
    """Logs the address actually bound (``--port 0`` picks an ephemeral one) once it is bound."""

    def __init__(self, config: uvicorn.Config, settings: ServiceSettings) -> None:
        super().__init__(config)
        self._settings = settings

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        ports = {s.getsockname()[1] for listener in self.servers for s in listener.sockets}
        port = ports.pop() if len(ports) == 1 else self._settings.port
        _log.info("listening", host=self._settings.host, port=port, auth=self._settings.token is not None)


class ServiceThread:
    """The real service on ``127.0.0.1:<ephemeral>`` in a thread: ``with ServiceThread(s) as url: ...``."""

    def __init__(self, settings: ServiceSettings, *, engines: Engines | None = None) -> None:
        self.settings = settings
        self._engines = engines
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((settings.host, 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://{settings.host}:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.service: Service | None = None

    def _run(self) -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                runner.run(self._main())
        except BaseException as exc:  # surfaced by start()/stop()
            self._error = exc

    async def _main(self) -> None:
        self.service = Service(self.settings, engines=self._engines)
        await self.service.start()
        self._server = uvicorn.Server(_config(self.service))  # off the main thread: no signal handlers
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            await self.service.stop()

    def start(self, timeout: float = 30.0) -> str:
        self._thread = threading.Thread(target=self._run, name="sidecar-service", daemon=True)
        self._thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout / 0.01)):
            if self._error is not None:
                raise RuntimeError(f"service failed to start: {self._error!r}") from self._error
            if self._server is not None and self._server.started:
                return self.url
            deadline.wait(0.01)
        raise TimeoutError(f"service did not start within {timeout} s")

    def stop(self, timeout: float = 30.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._sock.close()
        if self._error is not None:
            raise RuntimeError(f"service failed: {self._error!r}") from self._error

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
