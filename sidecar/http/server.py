"""Run the service on uvicorn (:func:`serve`), or in a thread with its own loop on an ephemeral
loopback port (:class:`ServiceThread`; :class:`ServerThread` for any ASGI app) for tests and the demo."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import structlog
import uvicorn

from sidecar.http.app import create_app
from sidecar.http.guard import ConnectionGuard
from sidecar.http.service import Service
from sidecar.http.settings import ServiceSettings, SettingsError, is_loopback
from sidecar.ingest.engines import Engines
from sidecar.journal import JournalError

__all__ = [
    "ServerThread",
    "ServerThreadError",
    "ServiceThread",
    "bind_socket",
    "loop_factory",
    "run_service",
    "serve",
]

_log = structlog.get_logger("sidecar.http.server")


class _Terminated(Exception):
    """SIGTERM arrived; uvicorn has already shut down gracefully and re-raises the signal."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def run_service(settings: ServiceSettings, *, follower: Any = None) -> None:
    """Blocking entry point of ``rollout-sidecar serve``; SIGTERM/SIGINT (uvicorn shuts down, then
    re-raises) become a normal return, exit code 0."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(serve(settings, follower=follower))
    except (_Terminated, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _config(service: Service) -> uvicorn.Config:
    settings = service.settings
    guard = service.connection_guard = ConnectionGuard(
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        write_timeout_s=settings.write_timeout_s,
        max_per_peer=settings.max_connections_per_peer,
    )
    return uvicorn.Config(
        guard.middleware(create_app(service)),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
        limit_concurrency=4096,
        server_header=False,
    )


async def _serve_guarded(server: uvicorn.Server, service: Service, sock: socket.socket) -> None:
    """``server.serve`` with the service's connection guard sweeping its connections."""
    sweep = asyncio.get_running_loop().create_task(
        service.connection_guard.run(server.server_state.connections), name="connection-guard"
    )
    try:
        await server.serve(sockets=[sock])
    finally:
        sweep.cancel()


def bind_socket(settings: ServiceSettings) -> socket.socket:
    """The listening socket of ``settings``; a port in use raises ``SettingsError`` naming the fix."""
    try:
        infos = socket.getaddrinfo(settings.host or None, settings.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise SettingsError(f"cannot resolve --host {settings.host!r}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SettingsError(
                f"cannot listen on {settings.host}:{settings.port}: the port is already in use (another "
                "rollout-sidecar?); stop that process or give another --port"
            ) from None
        raise SettingsError(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}"
        ) from None
    sock.setblocking(False)
    return sock


async def serve(
    settings: ServiceSettings, *, sock: socket.socket | None = None, follower: Any = None
) -> None:
    """Serve until SIGINT/SIGTERM: bind (``SettingsError``), open the journal (``JournalError``),
    then serve while it replays (``/readyz`` 503 until ready)."""
    settings.check_bind()
    listener = sock if sock is not None else bind_socket(settings)
    try:
        service = Service(settings)
        service.follower = follower
        await service.open()
    except BaseException:
        if sock is None:
            listener.close()
        raise
    service.begin()
    server = _AnnouncingServer(_config(service), settings)
    watch = asyncio.get_running_loop().create_task(_exit_if_replay_fails(service, server))
    try:
        await _serve_guarded(server, service, listener)
    finally:
        watch.cancel()
        await service.stop()
    if service.replay_error is not None:
        raise _refusal(settings, service.replay_error) from service.replay_error


async def _exit_if_replay_fails(service: Service, server: uvicorn.Server) -> None:
    """A start that cannot rebuild the state stops serving (``serve`` then raises the refusal),
    rather than answering 503 ``replay_failed`` for ever."""
    if await service.replay_outcome() is not None:
        server.should_exit = True


def _refusal(settings: ServiceSettings, error: BaseException) -> JournalError:
    """The one-line ``JournalError`` a failed replay is refused with (the CLI prints it, exit 2)."""
    if isinstance(error, JournalError):
        return error
    message = " ".join(f"{type(error).__name__}: {error}".split())[:1000]
    return JournalError(
        f"journal {settings.journal_path}: the state cannot be rebuilt ({message}); the journal is "
        "kept as it was",
        path=settings.journal_path,
    )


class _AnnouncingServer(uvicorn.Server):
    """Logs the address actually bound (``--port 0`` picks an ephemeral one) once it is bound."""

    def __init__(self, config: uvicorn.Config, settings: ServiceSettings) -> None:
        super().__init__(config)
        self._settings = settings

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        ports = {s.getsockname()[1] for listener in self.servers for s in listener.sockets}
        port = ports.pop() if len(ports) == 1 else self._settings.port
        if sockets is not None and not self.should_exit:  # uvicorn announces only sockets it bound
            self._log_started_message(sockets)
        settings = self._settings
        _log.info(
            "listening", host=settings.host, port=port, auth=settings.token is not None,
            read_auth=settings.read_token is not None,
        )  # fmt: skip
        if settings.read_token is None and not is_loopback(settings.host):
            _log.warning(
                "reads are open to anyone who reaches this address (run list, reports, verdicts, "
                "pages, metrics): give --read-token-file (docs/deploy.md)",
                host=settings.host,
            )


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
            await _serve_guarded(self._server, self.service, sock)
        finally:
            await self.service.stop()
