"""Run the service on uvicorn: open the journal first, then bind, then shut down gracefully.

:func:`serve` is what ``rollout-sidecar serve`` calls. :class:`ServiceThread` runs the real
service on an ephemeral loopback port in a background thread, for tests and benchmarks.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Callable

import structlog
import uvicorn

from sidecar._server_thread import ServerThread, loop_factory
from sidecar.app import create_app
from sidecar.engines import Engines
from sidecar.service import Service
from sidecar.settings import ServiceSettings

__all__ = ["ServiceThread", "loop_factory", "run_service", "serve"]

_log = structlog.get_logger("sidecar.server")



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


class ServiceThread(ServerThread):
    """The real service on ``127.0.0.1:<ephemeral>`` in a thread: ``with ServiceThread(s) as url: ...``."""

    label = "sidecar service"

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        engines: Engines | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(settings.host)
        self.settings = settings
        self._engines = engines
        self._clock = clock
        self.service: Service | None = None

    async def _serve(self, sock: socket.socket) -> None:
        self.service = Service(self.settings, engines=self._engines, clock=self._clock)
        await self.service.start()
        self._server = uvicorn.Server(_config(self.service))
        try:
            await self._server.serve(sockets=[sock])
        finally:
            await self.service.stop()
