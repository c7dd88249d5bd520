"""Slow clients: half-sent headers and stalled bodies, more than a peer may hold, from loopback.

Against a real ``rollout-sidecar serve``, ``attackers`` sockets send half a request header and
``stallers`` send complete headers and a few bytes of a longer body, then both go quiet (a
slowloris). Meanwhile ``/drain_margin`` is polled on fresh connections from the same address.
Every poll must be answered 200; every attacking socket must be closed by the service within
its header / body timeout (plus a second of slack).
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.reliability_harness.load import percentile
from tests.reliability_harness.sidecar_process import Launch, SidecarProcess

__all__ = ["SlowClientsResult", "run_slow_clients"]


@dataclass
class SlowClientsResult:
    attackers: int = 0
    stallers: int = 0
    polls: int = 0
    polls_ok: int = 0
    poll_ms: list[float] = field(default_factory=list)
    closed_by_service: int = 0
    slowest_close_s: float = 0.0
    violations: list[str] = field(default_factory=list)

    @property
    def p99_ms(self) -> float:
        return percentile(sorted(self.poll_ms), 99) if self.poll_ms else 0.0


def _open(port: int, payload: bytes) -> socket.socket | None:
    sock = socket.socket()
    try:
        sock.connect(("127.0.0.1", port))
        sock.sendall(payload)
    except OSError:
        sock.close()
        return None
    return sock


def _closed(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(4096) == b""
    except OSError:
        return True


def run_slow_clients(
    workdir: Path,
    *,
    launch: Launch = "exec",
    attackers: int = 300,
    stallers: int = 50,
    header_timeout_s: float = 2.0,
    body_timeout_s: float = 2.0,
    max_per_peer: int = 128,
) -> SlowClientsResult:
    result = SlowClientsResult()
    sidecar = SidecarProcess(
        workdir / "journal.sqlite3",
        workdir / "sidecar.log",
        launch=launch,
        extra_args=[
            "--header-timeout",
            str(header_timeout_s),
            "--body-timeout",
            str(body_timeout_s),
            "--max-connections-per-peer",
            str(max_per_peer),
        ],
    )
    url = sidecar.start()
    port = int(url.rsplit(":", 1)[1])
    sockets: dict[socket.socket, float] = {}
    try:
        httpx.post(
            f"{url}/v1/runs/slow/events", json=[{"kind": "run_started"}], timeout=10
        ).raise_for_status()
        began = time.monotonic()
        half_header = b"GET /drain_margin?run_id=slow HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        stalled = b"POST /v1/runs/slow/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n[{"
        for number in range(attackers + stallers):
            sock = _open(port, half_header if number < attackers else stalled)
            if sock is not None:
                sockets[sock] = time.monotonic()
        result.attackers, result.stallers = attackers, stallers
        deadline = began + max(header_timeout_s, body_timeout_s) + 1.0
        open_sockets = dict(sockets)
        # one client, but ``Connection: close``: every poll opens a fresh connection the guard must admit
        poller = httpx.Client(base_url=url, timeout=5, headers={"Connection": "close"})
        while time.monotonic() < deadline + 1.0:
            started = time.perf_counter()
            result.polls += 1
            try:
                response = poller.get("/drain_margin", params={"run_id": "slow"})
                if response.status_code == 200:
                    result.polls_ok += 1
                    result.poll_ms.append((time.perf_counter() - started) * 1000)
                else:
                    result.violations.append(f"/drain_margin answered {response.status_code}")
            except httpx.HTTPError as exc:
                result.violations.append(f"/drain_margin failed: {exc!r}")
            for sock in [s for s in open_sockets if _closed(s)]:
                result.closed_by_service += 1
                result.slowest_close_s = max(
                    result.slowest_close_s, time.monotonic() - open_sockets.pop(sock)
                )
            time.sleep(0.02)
        poller.close()
        if open_sockets:
            result.violations.append(
                f"{len(open_sockets)} slow sockets open {deadline + 1.0 - began:.1f} s after they started"
            )
    finally:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
        sidecar.stop()
    return result
