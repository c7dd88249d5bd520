"""One OTLP/HTTP POST that a collector cannot turn against the service.

The SDK's exporter reads whatever body a collector answers and gives each socket read its own
timeout, retrying with backoff inside one export: a collector answering hundreds of megabytes
grew the process by as much, one that drips its answer held the export thread for ever, and a
refused connection kept the thread busy for the whole retry budget. This module sends one
request per push and nothing more:

- a **total deadline** per send (``OTEL_EXPORTER_OTLP_TIMEOUT``, seconds as the Python SDK reads
  it, default 10): every socket operation gets the time left, and a watchdog shuts the socket
  down at the deadline, so connect, TLS handshake, send and read all end by then;
- at most :data:`MAX_RESPONSE_BYTES` of the answer are read (status line, headers and the start
  of an error body for the log); a 2xx is accepted as soon as its headers are in;
- no retry inside a send: the next push is the retry, and cumulative temporality means it
  carries everything the failed one would have.

Headers, compression and TLS files come from the standard ``OTEL_EXPORTER_OTLP_[METRICS_]*``
variables (the signal-specific one wins).
"""

from __future__ import annotations

import contextlib
import enum
import gzip
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from urllib.parse import unquote, urlsplit

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_RESPONSE_BYTES",
    "HttpSettings",
    "OtlpConfigError",
    "SendOutcome",
    "SendResult",
    "http_settings",
    "post",
]

#: Bytes of a collector's answer read at most (status line, headers, start of the body).
MAX_RESPONSE_BYTES = 64 * 1024
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 600.0
_MAX_HEADERS = 64
_MAX_HEADER_VALUE = 8192


class OtlpConfigError(ValueError):
    """An OTLP setting is unusable; the message names it and where it came from."""


class SendOutcome(enum.Enum):
    """How one push ended."""

    SENT = "sent"  # 2xx
    REJECTED = "rejected"  # the collector answered something else
    UNREACHABLE = "unreachable"  # refused, reset, no route, bad name, TLS failure
    TIMED_OUT = "timed_out"  # the total deadline passed


@dataclass(frozen=True, slots=True)
class SendResult:
    outcome: SendOutcome
    #: ``HTTP 503: <start of the body>`` or the error, at most 300 characters, for the log.
    detail: str = ""


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Where and how a push is sent."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    gzip: bool = False
    certificate: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None


def _env(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """``(variable, value)`` of the metrics-specific variable, else the general one."""
    for variable in (f"OTEL_EXPORTER_OTLP_METRICS_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        value = environ.get(variable, "").strip()
        if value:
            return variable, value
    return None


def _headers(variable: str, raw: str) -> tuple[tuple[str, str], ...]:
    """``k1=v1,k2=v2`` with URL-encoded values (the OTLP exporter's format)."""
    out = []
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower(), unquote(value.strip())
        if not sep or not key or not key.isascii() or any(c in key for c in ' \t:\r\n()<>@,;\\"/[]?={}'):
            raise OtlpConfigError(f"{variable}: {item.strip()[:80]!r} is not a header such as key=value")
        if any(c in value for c in "\r\n\0"):
            raise OtlpConfigError(f"{variable}: the value of {key!r} holds a line break")
        if len(value) > _MAX_HEADER_VALUE:
            raise OtlpConfigError(
                f"{variable}: the value of {key!r} has {len(value)} characters, at most 8192"
            )
        out.append((key, value))
    if len(out) > _MAX_HEADERS:
        raise OtlpConfigError(f"{variable}: {len(out)} headers, at most {_MAX_HEADERS}")
    return tuple(out)


def _timeout(variable: str, raw: str) -> float:
    try:
        seconds = float(raw)
    except ValueError:
        raise OtlpConfigError(f"{variable} must be seconds, got {raw!r}") from None
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S):
        raise OtlpConfigError(f"{variable} must be in (0, {MAX_TIMEOUT_S:g}] seconds, got {raw!r}")
    return seconds


def _file(found: tuple[str, str] | None) -> str | None:
    if found is None:
        return None
    variable, path = found
    if not os.path.isfile(path):
        raise OtlpConfigError(f"{variable}: no such file {path!r}")
    return path


def http_settings(url: str, env: Mapping[str, str] | None = None) -> HttpSettings:
    """The settings of pushes to ``url`` from the ``OTEL_EXPORTER_OTLP_*`` variables."""
    environ = os.environ if env is None else env
    headers = _env(environ, "HEADERS")
    timeout = _env(environ, "TIMEOUT")
    compression = _env(environ, "COMPRESSION")
    if compression is not None and compression[1].lower() not in ("gzip", "none"):
        raise OtlpConfigError(f"{compression[0]} must be gzip or none, got {compression[1]!r}")
    return HttpSettings(
        url=url,
        headers=_headers(*headers) if headers else (),
        timeout_s=_timeout(*timeout) if timeout else DEFAULT_TIMEOUT_S,
        gzip=compression is not None and compression[1].lower() == "gzip",
        certificate=_file(_env(environ, "CERTIFICATE")),
        client_certificate=_file(_env(environ, "CLIENT_CERTIFICATE")),
        client_key=_file(_env(environ, "CLIENT_KEY")),
    )


def _user_agent() -> str:
    try:
        return f"rollout-sidecar/{metadata.version('rollout-sidecar')}"
    except metadata.PackageNotFoundError:
        return "rollout-sidecar"


_USER_AGENT = _user_agent()


def _request(settings: HttpSettings, body: bytes, host: str, target: str) -> bytes:
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {host}",
        f"User-Agent: {_USER_AGENT}",
        "Content-Type: application/x-protobuf",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if settings.gzip:
        lines.append("Content-Encoding: gzip")
    lines.extend(f"{key}: {value}" for key, value in settings.headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


class _Deadline:
    """Time left of one send; shuts the socket down when it runs out, whatever it is waiting on."""

    def __init__(self, seconds: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._end = clock() + seconds
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()
        self.expired = False

    def left(self) -> float:
        left = self._end - self._clock()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        self._sock = sock

    def _expire(self) -> None:
        self.expired = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def _connect(settings: HttpSettings, deadline: _Deadline) -> socket.socket:
    parts = urlsplit(settings.url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    sock = socket.create_connection((host, port), timeout=deadline.left())
    deadline.watch(sock)
    if parts.scheme != "https":
        return sock
    context = ssl.create_default_context(cafile=settings.certificate)
    if settings.client_certificate:
        context.load_cert_chain(settings.client_certificate, settings.client_key)
    sock.settimeout(deadline.left())
    tls = context.wrap_socket(sock, server_hostname=host)
    deadline.watch(tls)
    return tls


def _read_answer(sock: socket.socket, deadline: _Deadline) -> SendResult:
    """Read at most MAX_RESPONSE_BYTES; a 2xx is decided by its status line alone."""
    buffer = b""
    status: int | None = None
    header_end = -1
    while len(buffer) < MAX_RESPONSE_BYTES:
        sock.settimeout(deadline.left())
        chunk = sock.recv(min(16384, MAX_RESPONSE_BYTES - len(buffer)))
        if not chunk:
            break
        buffer += chunk
        if status is None and b"\r\n" in buffer:
            status = _status(buffer)
            if status is None:
                return SendResult(SendOutcome.REJECTED, f"not an HTTP answer: {buffer[:80]!r}")
            if 200 <= status < 300:
                return SendResult(SendOutcome.SENT)
        if header_end < 0:
            header_end = buffer.find(b"\r\n\r\n")
        if header_end >= 0 and _body_complete(buffer, header_end):
            break
    if status is None and deadline.expired:  # the watchdog shut the socket: recv saw an end
        raise TimeoutError("deadline passed")
    if status is None:
        return SendResult(SendOutcome.REJECTED, f"no status line in {len(buffer)} bytes: {buffer[:80]!r}")
    body = buffer[header_end + 4 :] if header_end >= 0 else b""
    text = body.decode("utf-8", "replace").strip()
    return SendResult(SendOutcome.REJECTED, f"HTTP {status}: {text}"[:300])


def _status(buffer: bytes) -> int | None:
    first = buffer.split(b"\r\n", 1)[0].split(None, 2)
    if len(first) < 2 or not first[0].startswith(b"HTTP/") or not first[1].isdigit():
        return None
    return int(first[1])


def _body_complete(buffer: bytes, header_end: int) -> bool:
    for line in buffer[:header_end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(buffer) - header_end - 4 >= int(value.strip())
    return False


def post(settings: HttpSettings, body: bytes, *, clock: Callable[[], float] = time.monotonic) -> SendResult:
    """POST ``body`` (an encoded ``ExportMetricsServiceRequest``) within ``settings.timeout_s``."""
    payload = gzip.compress(body, compresslevel=6) if settings.gzip else body
    parts = urlsplit(settings.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    deadline = _Deadline(settings.timeout_s, clock)
    sock: socket.socket | None = None
    try:
        sock = _connect(settings, deadline)
        sock.settimeout(deadline.left())
        sock.sendall(_request(settings, payload, parts.netloc.rpartition("@")[2], target))
        return _read_answer(sock, deadline)
    except TimeoutError:
        return SendResult(SendOutcome.TIMED_OUT, f"no complete answer within {settings.timeout_s:g} s")
    except (OSError, ssl.SSLError, ValueError) as exc:
        if deadline.expired:
            return SendResult(SendOutcome.TIMED_OUT, f"no complete answer within {settings.timeout_s:g} s")
        return SendResult(SendOutcome.UNREACHABLE, f"{type(exc).__name__}: {exc}"[:300])
    finally:
        deadline.cancel()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
