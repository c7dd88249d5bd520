"""A hostile HTTP endpoint on 127.0.0.1 for the exporters: whatever is asked, it answers badly.

Modes: ``hang`` reads the request and never answers; ``drip`` sends a 200 whose 1 MB body comes
one byte every ``delay_s``; ``huge`` sends a 200 of ``huge_bytes`` (zeros) as fast as the client
takes them; ``500`` answers ``500`` with a small JSON error. It counts requests and the bytes it
managed to send, so a test asserts on what the client read, not on time.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["HostileEndpoint"]


class HostileEndpoint:
    """``with HostileEndpoint("huge") as url``; ``requests`` and ``written`` count what happened."""

    def __init__(self, mode: str, *, delay_s: float = 0.05, huge_bytes: int = 2 << 30) -> None:
        self.mode = mode
        self.delay_s = delay_s
        self.huge_bytes = huge_bytes
        self.requests = 0
        #: The request line of each request (``POST /graphql HTTP/1.1``).
        self.lines: list[str] = []
        #: Bytes of answers sent (written into the socket) before the client hung up.
        self.written = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def __enter__(self) -> str:
        threading.Thread(target=self._accept, daemon=True).start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        with self._lock:
            self.written += len(data)

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            with self._lock:
                self.requests += 1
                self.lines.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
            if self.mode == "hang":
                self._stop.wait(300)
            elif self.mode == "500":
                body = b'{"error_code": "INTERNAL_ERROR", "message": "hostile"}'
                head = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n" % len(body)
                self._send(conn, head + b"Connection: close\r\n\r\n" + body)
            elif self.mode == "drip":
                self._send(
                    conn,
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n",
                )
                while not self._stop.wait(self.delay_s):
                    self._send(conn, b" ")
            elif self.mode == "huge":
                self._send(conn, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n" % self.huge_bytes)  # fmt: skip
                chunk, left = b"0" * (1 << 20), self.huge_bytes
                while left > 0 and not self._stop.is_set():
                    self._send(conn, chunk[:left])
                    left -= len(chunk)
